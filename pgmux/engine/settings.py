"""The server settings a connection reports (ParameterStatus) and the policy for changes.

Theory of operation
-------------------
The server reports some settings at startup and again whenever they change. The ones
that decide how bytes are encoded or decoded, or how the multiplexing guard reads SQL,
are followed here, one policy for both connection kinds:

* ``client_encoding``: pgmux writes and reads UTF-8 only. Any other value means the
  next byte either side sends could be misread, so the change is refused: the
  statement that caused it fails with ``InterfaceError`` and the connection is retired
  (``SettingRefused``), before another byte is sent on it.
* ``DateStyle`` / ``IntervalStyle``: followed. Results come in binary wherever pgmux
  has a binary decoder, so they matter only for text results (simple-Query scripts);
  ``epoch`` changes so that row shapes are rebuilt with decoders for the new style.
* ``standard_conforming_strings``: followed (the guard masks backslash escapes in
  plain literals when it is off). On a shared (pipelined) connection a change after
  startup means session state changed under every caller: ``SettingRefused``.
* ``integer_datetimes`` must be on (PostgreSQL 10 and later always are).

Everything else is recorded as reported (``parameters``).
"""

from __future__ import annotations

import re

from pgmux._native import adopt
from pgmux.errors import InterfaceError


class SettingRefused(InterfaceError):
    """A reported setting change pgmux cannot follow: the connection must be retired."""


_UTF8_NAMES = frozenset({"UTF8", "UNICODE"})
_STYLE_SETTINGS = frozenset({"DateStyle", "IntervalStyle"})


def is_utf8(encoding: str) -> bool:
    return encoding.upper().replace("-", "").replace("_", "") in _UTF8_NAMES


class ServerSettings:
    """The parameters one connection's server reported, followed as they change."""

    __slots__ = ("parameters", "shared", "epoch", "standard_conforming_strings")

    def __init__(self, parameters: dict[str, str], *, shared: bool):
        self.parameters = parameters
        self.shared = shared  # a pipelined connection: its session must not change
        self.epoch = 0  # changes whenever text decoding must be rebuilt
        self.standard_conforming_strings = parameters.get(
            "standard_conforming_strings", "on") == "on"
        encoding = parameters.get("client_encoding")
        if encoding is not None and not is_utf8(encoding):
            raise SettingRefused(f"the server uses client_encoding {encoding!r}; "
                                 "pgmux reads and writes UTF-8 only")
        if parameters.get("integer_datetimes", "on") != "on":
            raise SettingRefused("the server has integer_datetimes off (PostgreSQL before "
                                 "10); pgmux needs integer timestamps")

    @property
    def server_major(self) -> int:
        """The server's major version (from ``server_version``; 0 when it did not say)."""
        match = re.match(r"\s*(\d+)", self.parameters.get("server_version", ""))
        return int(match.group(1)) if match else 0

    @property
    def datestyle(self) -> str:
        return self.parameters.get("DateStyle", "ISO, MDY")

    @property
    def intervalstyle(self) -> str:
        return self.parameters.get("IntervalStyle", "postgres")

    @property
    def iso_styles(self) -> bool:
        """Whether text date/time values come in the styles the default decoders read."""
        return (self.datestyle.upper().startswith("ISO")
                and self.intervalstyle == "postgres")

    def update(self, name: str, value: str) -> None:
        """Record a ParameterStatus; raise ``SettingRefused`` for a change pgmux cannot follow."""
        old = self.parameters.get(name)
        self.parameters[name] = value
        if old == value:
            return
        if name == "client_encoding" and not is_utf8(value):
            raise SettingRefused(
                f"client_encoding changed to {value!r}: pgmux reads and writes UTF-8 only, "
                "so the connection was closed before anything else was sent on it")
        if name == "standard_conforming_strings":
            if self.shared and old is not None:
                raise SettingRefused("standard_conforming_strings changed on a shared "
                                     "connection; replacing it")
            self.standard_conforming_strings = value == "on"
        elif name in _STYLE_SETTINGS:
            self.epoch += 1
        elif name == "integer_datetimes" and value != "on":
            raise SettingRefused("integer_datetimes turned off; pgmux needs integer timestamps")


adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
