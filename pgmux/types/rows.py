"""Compiled row decoders: one DataRow payload -> a tuple of values, code generated per shape.

``make_row_decoder(decoders)`` returns ``decode(payload) -> tuple``, a drop-in for
``decode_row_checked(payload, decoders)`` (below): the column count is checked,
every column length is read and consumed exactly, a malformed or truncated row raises
ProtocolError, a decoder's own
exception propagates, and a payload that is not ``bytes`` (the framing buffer's
``bytearray`` for a large message) is read through a memoryview, its columns over
64 KiB handed to the decoders as memoryviews.

Theory of operation. The common case runs straight-line code written for the shape:
one block per column, no loop, no list. A column whose decoder is one of the built-in
fixed-width binary decoders (``binary.FIXED_WIDTH``: ints, float8, bool, uuid, date, time,
timestamp(tz)) reads its length and its value with one ``unpack_from`` and never calls
the decoder; text and numeric text are decoded inline. Anything unusual (a wrong count, a length that is not
the fixed width or -1, a truncated row, bytes left over) hands the payload to the
checked loop below, which decodes the row again and raises ProtocolError for what is
malformed.
The generated code of a shape (which columns are fused, inlined or called) is compiled
once and shared by every decoder list of that shape.

That is the pure-Python implementation (``python_row_decoder``). With the compiled one
(``pgmux._native``), ``make_row_decoder`` returns a ``pgmux.types._crows.RowDecoder``
instead: told each column's kind of decoder (``_KIND_NAMES``: the built-in ones it builds
values for in C; any other decoder is called), it gives the same tuples, hands every
unusual row to ``decode_row_checked`` the same way, and also decodes a run of DataRow
messages straight from the read buffer (``decode_run``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from struct import Struct
from struct import error as StructError
from typing import Any
from uuid import UUID, SafeUUID

from pgmux._native import extension as native_extension
from pgmux._native import reason as native_reason
from pgmux.errors import ProtocolError
from pgmux.types import binary, text

Decoder = Callable[[Any], Any]
RowDecoder = Callable[[Any], tuple]

# Columns of more than this many bytes inside a large message are handed to decoders
# as memoryviews, so a 1 MiB field is not copied just to be decoded.
VIEW_THRESHOLD = 64 * 1024

_unpack_i16 = Struct("!h").unpack_from
_unpack_i32 = Struct("!i").unpack_from


# -- the checked loop: the reference behaviour, and every unusual row ---------------------------


def decode_row_checked(payload: Any, decoders: list[Decoder]) -> tuple:
    """Decode one DataRow payload with one decoder per column, checking everything."""
    large = type(payload) is not bytes
    data = memoryview(payload) if large else payload
    try:
        (count,) = _unpack_i16(data)
    except StructError:
        raise ProtocolError("DataRow truncated") from None
    if count != len(decoders):
        raise ProtocolError(f"DataRow has {count} columns, RowDescription announced {len(decoders)}")
    values: list[Any] = []
    pos = 2
    for decode in decoders:
        size, pos = _column_length(data, pos)
        if size == -1:
            values.append(None)
            continue
        end = pos + size
        if end > len(data):
            raise ProtocolError("DataRow column runs past the end of the message")
        field = data[pos:end]
        values.append(decode(bytes(field) if large and size <= VIEW_THRESHOLD else field))
        pos = end
    if pos != len(data):
        raise ProtocolError("DataRow length does not match its columns")
    return tuple(values)


def _column_length(data: Any, pos: int) -> tuple[int, int]:
    try:
        (size,) = _unpack_i32(data, pos)
    except StructError:
        raise ProtocolError("DataRow truncated") from None
    if size < -1:
        raise ProtocolError(f"DataRow column with length {size}")
    return size, pos + 4


# -- code generation -------------------------------------------------------------------------

# Decoders written inline on the column's bytes ({s}).
_INLINE_SPECS: dict[Any, str] = {
    text.decode_str: 'str({s}, "utf-8")',
    text.decode_numeric: 'Decimal(str({s}, "ascii"))',
}
# Looked up by identity: a user's decoder may be unhashable, and only these exact ones count.
_INLINE = {id(decoder): (decoder, spec) for decoder, spec in _INLINE_SPECS.items()}


def _inline(decoder: Decoder) -> str | None:
    found = _INLINE.get(id(decoder))
    return found[1] if found is not None and found[0] is decoder else None


_HEAD = '''\
def decode_row(payload):
    if type(payload) is not bytes:
        return checked(payload, decoders)
    try:
        count, = unpack_i16(payload, 0)
    except StructError:
        return checked(payload, decoders)
    if count != {count}:
        return checked(payload, decoders)
    pos = 2
    length = len(payload)
'''
_FUSED_COLUMN = '''\
try:
    size, raw = unpack_{index}(payload, pos)
except StructError:  # a NULL last column, or a truncated row
    size = null_or_bad(payload, pos)
if size == {width}:
{value}
    pos += {step}
elif size == -1:
    {v} = None
    pos += 4
else:
    return checked(payload, decoders)
'''
_COLUMN = '''\
try:
    size, = unpack_i32(payload, pos)
except StructError:
    return checked(payload, decoders)
pos += 4
if size >= 0:
    end = pos + size
    if end > length:  # the column runs past the end of the row
        return checked(payload, decoders)
    {v} = {expression}
    pos = end
elif size == -1:
    {v} = None
else:
    return checked(payload, decoders)
'''
_TAIL = '''\
    if pos != length:
        return checked(payload, decoders)
    return ({values})
'''


def _null_or_bad(payload: bytes, pos: int) -> int:
    """-1 if a column too short for its fused read is a NULL, else -2 (the checked path)."""
    return -1 if payload[pos : pos + 4] == b"\xff\xff\xff\xff" else -2


def _indent(block: str) -> str:
    return "".join("    " + line + "\n" for line in block.splitlines())


def _column_source(index: int, decoder: Decoder) -> str:
    v = f"v{index}"
    fixed = binary.fixed_width(decoder)
    if fixed is not None:  # binary.FIXED_WIDTH: read the value with its length
        _, width, convert = fixed
        value = f"{v} = raw" if convert is None else f"{v} = c{index}(raw)"
        return _FUSED_COLUMN.format(index=index, width=width, value="    " + value, v=v,
                                    step=4 + width)
    inline = _inline(decoder)
    expression = (inline or "d{index}({s})").format(index=index, s="payload[pos:end]")
    return _COLUMN.format(v=v, expression=expression)


def _shape_of(decoders: list[Decoder]) -> tuple:
    """What the generated code depends on: which columns are fused or inlined, and how."""
    return tuple(decoder if binary.fixed_width(decoder) or _inline(decoder) else None
                 for decoder in decoders)


def _source(decoders: list[Decoder]) -> str:
    columns = "".join(_column_source(i, d) for i, d in enumerate(decoders))
    values = "".join(f"v{i}, " for i in range(len(decoders)))
    return _HEAD.format(count=len(decoders)) + _indent(columns) + _TAIL.format(values=values)


_BASE_NAMES = {
    "StructError": StructError, "unpack_i16": _unpack_i16, "unpack_i32": _unpack_i32,
    "checked": decode_row_checked, "null_or_bad": _null_or_bad, "Decimal": Decimal,
}
_compiled: dict[tuple, Any] = {}  # shape -> code object


def python_row_decoder(decoders: list[Decoder]) -> RowDecoder:
    """A function decoding one DataRow payload into a tuple, one decoder per column.

    A drop-in for ``decode_row_checked(payload, decoders)``, built
    once per result shape. The list is copied: later changes to it are not seen.
    """
    decoders = list(decoders)
    shape = _shape_of(decoders)
    code = _compiled.get(shape)
    if code is None:
        code = compile(_source(decoders), f"<row decoder of {len(decoders)} columns>", "exec")
        if len(_compiled) < 1024:
            _compiled[shape] = code
    names: dict[str, Any] = dict(_BASE_NAMES, decoders=decoders)
    for index, decoder in enumerate(decoders):
        names[f"d{index}"] = decoder
        fixed = binary.fixed_width(decoder)
        if fixed is not None:
            names[f"unpack_{index}"] = Struct("!i" + fixed[0]).unpack_from
            names[f"c{index}"] = fixed[2]
    exec(code, names)
    return names["decode_row"]


# -- the compiled implementation ---------------------------------------------------------------

_KIND_NAMES: list[tuple[Decoder, str]] = [
    (binary.decode_int2, "INT2"), (binary.decode_int4, "INT4"), (binary.decode_int8, "INT8"),
    (binary.decode_uint4, "UINT4"), (binary.decode_uint8, "UINT8"),
    (binary.decode_float8, "FLOAT8"), (binary.decode_bool, "BOOL"),
    (binary.decode_uuid, "UUID"), (binary.decode_date, "DATE"), (binary.decode_time, "TIME"),
    (binary.decode_timestamp, "TIMESTAMP"), (binary.decode_timestamptz, "TIMESTAMPTZ"),
    (binary.decode_bytea, "BYTEA"), (binary.decode_jsonb, "JSONB"),
    (text.decode_str, "TEXT"), (text.decode_numeric, "NUMERIC_TEXT"),
    (text.decode_int, "INT_TEXT"), (text.decode_float, "FLOAT_TEXT"),
    (text.decode_bool, "BOOL_TEXT"),
]
_crows = native_extension("pgmux.types._crows")
_kinds: dict[int, tuple[Decoder, int]] = {}
if _crows is not None:
    _crows.configure(uuid=UUID, uuid_unknown=SafeUUID.unknown, decimal=Decimal,
                     json_scan=json.JSONDecoder().scan_once)  # type: ignore[attr-defined]
    _kinds = {id(decoder): (decoder, _crows.KINDS[name]) for decoder, name in _KIND_NAMES}


def _kind(decoder: Decoder) -> int:
    """The compiled decoder's kind of column for ``decoder`` (by identity; 0: call it)."""
    found = _kinds.get(id(decoder))
    return found[1] if found is not None and found[0] is decoder else 0


def compiled_row_decoder(decoders: list[Decoder]) -> RowDecoder:
    """``python_row_decoder``'s compiled twin (only when the compiled implementation runs)."""
    if _crows is None:
        raise RuntimeError(f"the compiled implementation is not in use: {native_reason}")
    decoders = list(decoders)
    kinds = bytes(_kind(decoder) for decoder in decoders)
    return _crows.RowDecoder(kinds, decoders, decode_row_checked)


make_row_decoder = python_row_decoder if _crows is None else compiled_row_decoder
