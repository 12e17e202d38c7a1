"""Binary-format codecs, for the types where binary is cheaper or exact where text is not.

Results: pgmux asks for binary only for bool, int2/4/8, oid, float8, bytea, uuid and
arrays of them (see ``BINARY_RESULTS``): fixed-width, no parsing, float8 exact under
any ``extra_float_digits``, bytea half the size of its hex text. float4 stays text:
its binary value widened to a Python float (0.10000000149011612) differs from the
text decoder's (0.1). Decoders for the text types, json/jsonb and numeric are here too,
for callers that receive binary columns anyway.

Parameters: bytes-like values, floats and UUIDs are sent in binary.
"""

from __future__ import annotations

import json
import struct
from decimal import Decimal
from typing import Any
from uuid import UUID

from pgmux.types import oids
from pgmux.types.text import decode_str

_INT2 = struct.Struct("!h")
_INT4 = struct.Struct("!i")
_INT8 = struct.Struct("!q")
_UINT4 = struct.Struct("!I")
_FLOAT4 = struct.Struct("!f")
_FLOAT8 = struct.Struct("!d")
_NUMERIC_HEAD = struct.Struct("!hhHH")  # ndigits, weight, sign, dscale

decode_bool = {b"\x01": True, b"\x00": False}.__getitem__


def decode_int2(data: Any) -> int:
    return _INT2.unpack(data)[0]


def decode_int4(data: Any) -> int:
    return _INT4.unpack(data)[0]


def decode_int8(data: Any) -> int:
    return _INT8.unpack(data)[0]


def decode_uint4(data: Any) -> int:
    """oid, xid, cid."""
    return _UINT4.unpack(data)[0]


def decode_float4(data: Any) -> float:
    return _FLOAT4.unpack(data)[0]


def decode_float8(data: Any) -> float:
    return _FLOAT8.unpack(data)[0]


def decode_bytea(data: Any) -> bytes:
    return bytes(data)


def decode_uuid(data: Any) -> UUID:
    return UUID(bytes=bytes(data))


def decode_json(data: Any) -> Any:
    return json.loads(str(data, "utf-8"))


def decode_jsonb(data: Any) -> Any:
    """jsonb binary: a version byte (1) then the JSON text."""
    if data[0] != 1:
        raise ValueError(f"unsupported jsonb binary version {data[0]}")
    return json.loads(str(data[1:], "utf-8"))


_NUMERIC_SPECIAL = {
    0xC000: Decimal("NaN"),
    0xD000: Decimal("Infinity"),
    0xF000: Decimal("-Infinity"),
}


def decode_numeric(data: Any) -> Decimal:
    """numeric: base-10000 digit groups, weight of the first group, sign, display scale."""
    ndigits, weight, sign, dscale = _NUMERIC_HEAD.unpack_from(data)
    special = _NUMERIC_SPECIAL.get(sign)
    if special is not None:
        return special
    groups = struct.unpack_from(f"!{ndigits}H", data, 8)
    digits = "".join([f"{group:04d}" for group in groups]) or "0"
    # digits * 10**exponent; rescale to exponent -dscale (dropped digits are zeros).
    shift = (weight + 1 - ndigits) * 4 + dscale
    if shift > 0:
        digits += "0" * shift
    elif shift < 0:
        digits = digits[:shift] or "0"
    return Decimal(f"{'-' if sign == 0x4000 else ''}{digits}E-{dscale}")


DECODERS = {
    oids.BOOL: decode_bool,
    oids.INT2: decode_int2,
    oids.INT4: decode_int4,
    oids.INT8: decode_int8,
    oids.OID: decode_uint4,
    oids.XID: decode_uint4,
    oids.CID: decode_uint4,
    oids.FLOAT4: decode_float4,
    oids.FLOAT8: decode_float8,
    oids.NUMERIC: decode_numeric,
    oids.BYTEA: decode_bytea,
    oids.UUID: decode_uuid,
    oids.JSON: decode_json,
    oids.JSONB: decode_jsonb,
    oids.TEXT: decode_str,
    oids.VARCHAR: decode_str,
    oids.BPCHAR: decode_str,
    oids.NAME: decode_str,
    oids.CHAR: decode_str,
    oids.UNKNOWN: decode_str,
}

# Result columns of these types are requested in binary.
BINARY_RESULTS = frozenset(
    {oids.BOOL, oids.INT2, oids.INT4, oids.INT8, oids.OID, oids.FLOAT8, oids.BYTEA, oids.UUID}
)


# -- binary parameter encoders ---------------------------------------------------------------


def param_bytea(value: Any) -> tuple[int, int, bytes]:
    """bytes, bytearray and memoryview, sent as they are."""
    return oids.BYTEA, 1, bytes(value)


def param_float8(value: float) -> tuple[int, int, bytes]:
    return oids.FLOAT8, 1, _FLOAT8.pack(value)


def param_uuid(value: UUID) -> tuple[int, int, bytes]:
    return oids.UUID, 1, value.bytes
