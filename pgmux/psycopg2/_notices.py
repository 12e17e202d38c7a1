"""Server notices delivered to the psycopg2 connection whose statement raised them.

A pinned connection is read by the greenlet that runs the statement, so a notice it
receives belongs to the connection running in that greenlet (named by the greenlet's
``NOTICES_TO`` attribute while the statement runs). A notice of a
statement that ran multiplexed is read by the pipeline's reader greenlet, which serves
everyone: it goes to the ``pgmux`` logger instead."""

from __future__ import annotations

from gevent.hub import getcurrent

from pgmux.client import log_notice

_MAX_NOTICES = 50
# The attribute of a greenlet naming the connection whose statement it runs.
NOTICES_TO = "_pgmux_psycopg2_connection"


def notice_text(fields: dict[str, str]) -> str:
    """A notice as libpq formats it: ``"NOTICE:  message\\n"`` and its DETAIL/HINT lines."""
    lines = [f"{fields.get('S', 'NOTICE')}:  {fields.get('M', '')}"]
    for label, code in (("DETAIL", "D"), ("HINT", "H")):
        if fields.get(code):
            lines.append(f"{label}:  {fields[code]}")
    return "\n".join(lines) + "\n"


def notice_handler(fields: dict[str, str]) -> None:
    """The drop-in's clients' notice handler."""
    connection = getattr(getcurrent(), NOTICES_TO, None)
    if connection is None:
        log_notice(fields)
        return
    notices = connection.notices
    if notices is None:
        return
    notices.append(notice_text(fields))
    if type(notices) is list and len(notices) > _MAX_NOTICES:
        del notices[:len(notices) - _MAX_NOTICES]
