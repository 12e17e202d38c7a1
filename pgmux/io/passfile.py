"""The libpq password file (~/.pgpass): permission check and lookup by host, port, db, user."""

from __future__ import annotations

import logging
import os
import stat
import sys

log = logging.getLogger("pgmux")

# Unix socket directories that count as "localhost" in the password file (libpq maps its
# compiled-in socket directory: /tmp upstream, /var/run/postgresql on Debian).
LOCAL_SOCKET_DIRS = ("/var/run/postgresql", "/run/postgresql", "/tmp")


def default_passfile() -> str:
    """Where libpq looks when neither passfile nor PGPASSFILE is given."""
    if sys.platform == "win32":
        return os.path.join(os.environ.get("APPDATA", ""), "postgresql", "pgpass.conf")
    return os.path.join(os.path.expanduser("~"), ".pgpass")


def lookup_password(path: str, host: str, port: int | str, dbname: str, user: str) -> str | None:
    """The password of the first matching line of the file at ``path``, or None.

    ``host`` is a host name, an IP address or a Unix socket directory; an empty host and
    the default socket directories match the entry ``localhost``. The file is ignored
    (with a warning that does not show its contents) unless it is a plain file that only
    its owner may read.
    """
    text = _read_if_private(path)
    if text is None:
        return None
    wanted = (_passfile_host(host), str(port), dbname, user)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        fields = split_line(line)
        if fields is None:
            continue
        patterns, password = fields[:4], fields[4]
        if all(p is WILDCARD or p == value for p, value in zip(patterns, wanted, strict=True)):
            return password or None
    return None


class _Wildcard(str):
    """An unescaped ``*`` field: distinct from a literal ``\\*``."""


WILDCARD = _Wildcard("*")


def split_line(line: str) -> list[str] | None:
    """Split a password file line into host, port, dbname, user, password (unescaped).

    A field that is exactly an unescaped ``*`` comes back as ``WILDCARD``; the password
    ends at the next unescaped ``:``. Lines with fewer than five fields give None.
    """
    fields: list[str] = []
    current: list[str] = []
    escaped_any = False
    chars = iter(line.rstrip("\r"))
    for char in chars:
        if char == "\\":
            current.append(next(chars, "\\"))
            escaped_any = True
        elif char == ":":
            fields.append(_field(current, escaped_any))
            current, escaped_any = [], False
            if len(fields) == 5:
                return fields
        else:
            current.append(char)
    if len(fields) != 4:
        return None
    fields.append("".join(current))
    return fields


def _field(chars: list[str], escaped: bool) -> str:
    text = "".join(chars)
    return WILDCARD if text == "*" and not escaped else text


def _passfile_host(host: str) -> str:
    if not host or host in LOCAL_SOCKET_DIRS:
        return "localhost"
    return host


def _read_if_private(path: str) -> str | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        log.warning('password file "%s" is not a plain file; ignoring it', path)
        return None
    if sys.platform != "win32" and info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning(
            'password file "%s" has group or world access; permissions should be '
            "u=rw (0600) or less; ignoring it",
            path,
        )
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read()
    except OSError:
        return None
