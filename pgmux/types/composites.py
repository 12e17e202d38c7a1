"""Composite types (row values): their text and binary forms, decoded to tuples or to a
class the user registers, and encoded from such values.

Text (record_out): ``(1,"a b",)``: fields between parentheses, separated by commas; a
NULL field is empty, an empty string is ``""``, and a field is double-quoted when it
holds a quote, backslash, comma, parenthesis or whitespace (inside quotes ``"`` and
``\\`` are doubled; record_in also reads backslash escapes). Binary (record_send): the
field count, then per field its type oid, its length (-1: NULL) and its binary form.
"""

from __future__ import annotations

import dataclasses
import re
import struct
from collections.abc import Callable, Sequence
from typing import Any

from pgmux.errors import InterfaceError
from pgmux.types.quoting import read_item
from pgmux.types.text import Decoder, Dumper

_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_COMMAS = frozenset(b",")
_FIELD_HEAD = struct.Struct("!Ii")
_INT4 = struct.Struct("!i")

Factory = Callable[..., Any]  # the field values, in order -> the value of the composite


def split_record_text(data: Any) -> list[bytes | None]:
    """The fields of record_out text, unquoted and unescaped (None for NULL)."""
    data = bytes(data)
    if data[:1] != b"(" or data[-1:] != b")":
        raise ValueError(f"malformed record text: {data[:80]!r}")
    if _QUOTE not in data and _BACKSLASH not in data:
        return [field or None for field in data[1:-1].split(b",")]
    fields: list[bytes | None] = []
    pos, end = 1, len(data) - 1
    while True:
        field, quoted, pos = read_item(data, pos, _COMMAS, end)
        fields.append(field if field or quoted else None)
        if pos >= end:
            return fields
        pos += 1  # the comma


def split_record_binary(data: Any) -> list[tuple[int, Any]]:
    """(type oid, binary form or None) of each field of record_send output."""
    count = _INT4.unpack_from(data, 0)[0]
    fields = []
    pos = 4
    for _ in range(count):
        oid, size = _FIELD_HEAD.unpack_from(data, pos)
        pos += 8
        if size < 0:
            fields.append((oid, None))
        else:
            fields.append((oid, data[pos : pos + size]))
            pos += size
    return fields


def make_text_record_decoder(decoders: dict[int, Decoder], field_oids: Sequence[int],
                             fallback: Decoder, factory: Factory) -> Decoder:
    """A text decoder of a composite whose fields have these types (their decoders looked
    up in ``decoders`` at call time; a field beyond them decodes with ``fallback``)."""
    get = decoders.get
    types = tuple(field_oids)

    def decode_record(data: Any) -> Any:
        if not types and data == b"()":
            return factory()
        values: list[Any] = []
        for index, field in enumerate(split_record_text(data)):
            if field is None:
                values.append(None)
            else:
                oid = types[index] if index < len(types) else 0
                values.append(get(oid, fallback)(field))
        return factory(*values)

    return decode_record


def make_binary_record_decoder(decoders: dict[int, Decoder], factory: Factory) -> Decoder:
    """A binary decoder of a composite: each field by the binary decoder of the type oid
    it came with (its bytes when there is none)."""
    get = decoders.get

    def decode_record(data: Any) -> Any:
        return factory(*[None if field is None else (get(oid) or bytes)(field)
                         for oid, field in split_record_binary(data)])

    return decode_record


def as_tuple(*values: Any) -> tuple[Any, ...]:
    """The default factory: a composite decodes to a tuple of its fields."""
    return values


# -- encoding ----------------------------------------------------------------------------

_NEEDS_QUOTES = re.compile(r'[\s"\\,()]|\A\Z')


def field_values(value: Any) -> Sequence[Any]:
    """The field values of a composite given as a tuple (a namedtuple too) or a dataclass."""
    if isinstance(value, tuple):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [getattr(value, field.name) for field in dataclasses.fields(value)]
    raise InterfaceError(f"cannot send a {type(value).__qualname__} as a composite: "
                         "give a tuple, a namedtuple or a dataclass")


def dump_record(value: Any, dumper_for: Callable[[type], Dumper]) -> tuple[int, str]:
    """(0, record input text) of a composite value: its type is left to the server."""
    parts = []
    for field in field_values(value):
        if field is None:
            parts.append("")
            continue
        text = dumper_for(type(field))(field)[1]
        if _NEEDS_QUOTES.search(text) is not None:
            text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        parts.append(text)
    return 0, "(" + ",".join(parts) + ")"
