"""hstore (the extension's key/value type): text and binary forms <-> ``dict[str, str | None]``.

Text (hstore_out): ``"a"=>"1", "b"=>NULL``: every key and value double-quoted, ``"`` and
``\\`` backslash-escaped inside, pairs separated by ``", "``; NULL values unquoted.
Binary (hstore_send): the pair count, then per pair the key's length and bytes and the
value's length (-1: NULL) and bytes. hstore's OID differs per database (an extension
type): the registry learns it by name at run time (``TypeRegistry.learn``).

Parameters: wrap a dict in ``Hstore`` to send it; it goes untyped, so the server takes
the type from the context (a column, an operator, a cast such as ``$1::hstore``).
"""

from __future__ import annotations

import re
import struct
from typing import Any

from pgmux.errors import InterfaceError

_PAIR = re.compile(rb'"((?:[^"\\]|\\.)*)"=>(?:NULL|"((?:[^"\\]|\\.)*)")(?:, |\Z)', re.DOTALL)
_UNESCAPE = re.compile(rb"\\(.)", re.DOTALL)
_INT4 = struct.Struct("!i")


def _text(raw: bytes) -> str:
    return str(_UNESCAPE.sub(rb"\1", raw) if b"\\" in raw else raw, "utf-8")


def decode_hstore_text(data: Any) -> dict[str, str | None]:
    """An hstore from hstore_out text."""
    data = bytes(data)
    found: dict[str, str | None] = {}
    pos = 0
    for match in _PAIR.finditer(data):
        if match.start() != pos:
            break
        key, value = match.group(1), match.group(2)
        found[_text(key)] = None if value is None else _text(value)
        pos = match.end()
    if pos != len(data):
        raise ValueError(f"malformed hstore text at byte {pos}: {data[pos:pos + 40]!r}")
    return found


def decode_hstore_binary(data: Any) -> dict[str, str | None]:
    """An hstore from hstore_send output."""
    count = _INT4.unpack_from(data, 0)[0]
    found: dict[str, str | None] = {}
    pos = 4
    for _ in range(count):
        size = _INT4.unpack_from(data, pos)[0]
        key = str(data[pos + 4 : pos + 4 + size], "utf-8")
        pos += 4 + size
        size = _INT4.unpack_from(data, pos)[0]
        pos += 4
        if size < 0:
            found[key] = None
        else:
            found[key] = str(data[pos : pos + size], "utf-8")
            pos += size
    return found


class Hstore:
    """Wrap a ``dict[str, str | None]`` to send it as an hstore parameter."""

    __slots__ = ("value",)

    def __init__(self, value: dict[str, str | None]) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return type(other) is Hstore and other.value == self.value

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Hstore({self.value!r})"


def _quoted(text: Any, what: str) -> str:
    if not isinstance(text, str):
        raise InterfaceError(f"an hstore {what} must be a str, not {type(text).__qualname__}")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def hstore_text(value: dict[str, str | None]) -> str:
    """The hstore input text of a dict (keys and values str; a value may be None)."""
    return ", ".join(f"{_quoted(key, 'key')}=>{'NULL' if item is None else _quoted(item, 'value')}"
                     for key, item in value.items())


def dump_hstore(value: Hstore) -> tuple[int, str]:
    """(0, input text): the type is the context's (hstore's OID differs per database)."""
    return 0, hstore_text(value.value)
