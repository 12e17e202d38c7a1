"""Binary-format codecs: result decoders for every built-in type pgmux decodes, binary parameters.

Each decoder takes a column in the type's binary form (``*_send`` output, ``bytes`` or a
``memoryview``) and returns exactly what the text decoder returns for the server's text
of the same value under pgmux's settings (see ``pgmux.types.text`` and ``temporal``):
timestamptz in UTC, float4 as its shortest decimal (``float32``), numeric with its
display scale, the same strings for what Python cannot hold. Binary values do not depend
on DateStyle, IntervalStyle, TimeZone, extra_float_digits or bytea_output, so a result
read in binary is the same whatever the session's settings.

``BINARY_RESULTS`` lists the types whose result columns are requested in binary.

Parameters: bytes-like values, floats and UUIDs are sent in binary.
"""

from __future__ import annotations

import json
from datetime import date, datetime, time, timedelta
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal
from ipaddress import (
    IPv4Address,
    IPv4Interface,
    IPv4Network,
    IPv6Address,
    IPv6Interface,
    IPv6Network,
)
from struct import Struct
from typing import Any
from uuid import UUID, SafeUUID

from pgmux.types import oids, temporal
from pgmux.types.float32 import shortest_float
from pgmux.types.text import decode_str

_unpack_int2 = Struct("!h").unpack
_unpack_int4 = Struct("!i").unpack
_unpack_int8 = Struct("!q").unpack
_unpack_uint4 = Struct("!I").unpack
_unpack_uint8 = Struct("!Q").unpack
_unpack_float8 = Struct("!d").unpack
_unpack_timetz = Struct("!qi").unpack
_unpack_interval = Struct("!qii").unpack
_FLOAT8 = Struct("!d")

# -- numbers ---------------------------------------------------------------------------------

decode_bool = {b"\x01": True, b"\x00": False}.__getitem__


def decode_int2(data: Any) -> int:
    return _unpack_int2(data)[0]


def decode_int4(data: Any) -> int:
    return _unpack_int4(data)[0]


def decode_int8(data: Any) -> int:
    return _unpack_int8(data)[0]


def decode_uint4(data: Any) -> int:
    """oid, xid, cid."""
    return _unpack_uint4(data)[0]


def decode_uint8(data: Any) -> int:
    """xid8."""
    return _unpack_uint8(data)[0]


decode_float4 = shortest_float


def decode_float8(data: Any) -> float:
    return _unpack_float8(data)[0]


_NUMERIC_SPECIAL = {0xC000: Decimal("NaN"), 0xD000: Decimal("Infinity"),
                    0xF000: Decimal("-Infinity")}
_NUMERIC_NEGATIVE = 0x4000
# numeric_send: ndigits, weight, sign, dscale, then ndigits base-10000 digits.
_numeric_layouts = {8 + 2 * n: Struct(f"!hhHH{n}H").unpack for n in range(33)}
_exact = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)
_multiply = _exact.multiply
_POWERS = [10**n for n in range(64)]
_SCALES = [Decimal(f"1E-{n}") for n in range(64)]  # the Decimal exponent of each dscale


def decode_numeric(data: Any) -> Decimal:
    """numeric, display scale kept: numeric(12,2) 1.50 -> Decimal('1.50'); NaN, ±Infinity."""
    layout = _numeric_layouts.get(len(data))
    if layout is None:
        return _decode_long_numeric(data)
    ndigits, weight, sign, dscale, *groups = layout(data)
    coefficient = 0
    for group in groups:
        coefficient = coefficient * 10000 + group
    # The groups are coefficient * 10**(4 * (weight + 1 - ndigits)); rescale to 10**-dscale
    # (digits past dscale are zeros, so dividing them off is exact).
    shift = (weight + 1 - ndigits) * 4 + dscale
    if shift > 0:
        coefficient *= _POWERS[shift] if shift < 64 else 10**shift
    elif shift < 0:
        coefficient //= _POWERS[-shift] if shift > -64 else 10**-shift
    if sign:
        if sign != _NUMERIC_NEGATIVE:
            return _NUMERIC_SPECIAL[sign]
        coefficient = -coefficient
    scale = _SCALES[dscale] if dscale < 64 else Decimal(f"1E-{dscale}")
    return _multiply(Decimal(coefficient), scale)


def _decode_long_numeric(data: Any) -> Decimal:
    ndigits, weight, sign, dscale = Struct("!hhHH").unpack_from(data)
    if sign and sign != _NUMERIC_NEGATIVE:
        return _NUMERIC_SPECIAL[sign]
    groups = Struct(f"!{ndigits}H").unpack(data[8:])
    digits = "".join([f"{group:04d}" for group in groups]) or "0"
    shift = (weight + 1 - ndigits) * 4 + dscale
    if shift > 0:
        digits += "0" * shift
    elif shift < 0:
        digits = digits[:shift] or "0"
    return Decimal(f"{'-' if sign else ''}{digits}E-{dscale}")


_timedelta = timedelta

# -- strings, bytes, json, uuid ----------------------------------------------------------------


def decode_bytea(data: Any) -> bytes:
    return bytes(data)


def decode_char(data: Any) -> str:
    """"char": one byte; the text output shows NUL as '' and bytes >= 128 as an octal escape."""
    code = data[0]
    if code < 0x80:
        return chr(code) if code else ""
    return f"\\{code:03o}"


def decode_json(data: Any) -> Any:
    return json.loads(str(data, "utf-8"))


# json.loads's C scanner, without its wrappers (made by JSONDecoder.__init__: not in typeshed)
_scan_json = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def decode_jsonb(data: Any) -> Any:
    """jsonb binary: a version byte (1) then the JSON text (jsonb's, with no blanks around)."""
    text = str(data, "utf-8")
    if text[:1] != "\x01":
        raise ValueError(f"unsupported jsonb binary version {data[:1]!r}")
    try:
        value, end = _scan_json(text, 1)
    except StopIteration:
        raise ValueError("jsonb binary value that is not JSON text") from None
    if end != len(text):
        raise ValueError("jsonb binary value with data after the JSON text")
    return value


_new_object = object.__new__
_set_slot = object.__setattr__
_UNKNOWN_SAFETY = SafeUUID.unknown
_from_bytes = int.from_bytes


def decode_uuid(data: Any) -> UUID:
    """The UUID UUID(bytes=...) builds, without its argument checks (16 bytes is the type)."""
    if len(data) != 16:
        raise ValueError(f"uuid of {len(data)} bytes")
    value = _new_object(UUID)
    _set_slot(value, "int", _from_bytes(data, "big"))
    _set_slot(value, "is_safe", _UNKNOWN_SAFETY)
    return value


# -- network addresses ---------------------------------------------------------------------------

_AF_INET, _AF_INET6 = 2, 3  # PGSQL_AF_INET, PGSQL_AF_INET6
_ADDRESS_CLASSES = {
    _AF_INET: (32, IPv4Address, IPv4Interface, IPv4Network),
    _AF_INET6: (128, IPv6Address, IPv6Interface, IPv6Network),
}


def _address_parts(data: Any) -> tuple[int, bytes, tuple]:
    """(prefix bits, address bytes, classes) of inet_send/cidr_send output."""
    family, bits, _is_cidr, size = data[0], data[1], data[2], data[3]
    classes = _ADDRESS_CLASSES.get(family)
    if classes is None or len(data) != 4 + size:
        raise ValueError(f"malformed inet/cidr binary value of family {family}")
    return bits, bytes(data[4:]), classes


def decode_inet(data: Any) -> Any:
    """inet: an ip_address when the prefix is the whole address (the text has no /n),
    else an ip_interface."""
    bits, address, (max_bits, address_class, interface_class, _) = _address_parts(data)
    if bits == max_bits:
        return address_class(address)
    return interface_class((address, bits))


def decode_cidr(data: Any) -> Any:
    bits, address, (_, _, _, network_class) = _address_parts(data)
    return network_class((address, bits))


# -- dates and times -----------------------------------------------------------------------------

_date_value = temporal.date_value
_time_value = temporal.time_value
_timestamp_value = temporal.timestamp_value
_timestamptz_value = temporal.timestamptz_value


def decode_date(data: Any) -> date | str:
    """date: days since 2000-01-01."""
    return _date_value(_unpack_int4(data)[0])


def decode_timestamp(data: Any) -> datetime | str:
    """timestamp: microseconds since 2000-01-01."""
    return _timestamp_value(_unpack_int8(data)[0])


def decode_timestamptz(data: Any) -> datetime | str:
    """timestamptz: microseconds since 2000-01-01 UTC, decoded in UTC."""
    return _timestamptz_value(_unpack_int8(data)[0])


def decode_time(data: Any) -> time | str:
    """time: microseconds since midnight (24:00:00 included)."""
    return _time_value(_unpack_int8(data)[0])


def decode_timetz(data: Any) -> time | str:
    """timetz: microseconds since midnight, then the zone in seconds west of UTC."""
    micros, seconds_west = _unpack_timetz(data)
    return temporal.timetz_value(micros, -seconds_west)


def decode_interval(data: Any) -> timedelta | temporal.Interval | str:
    """interval: microseconds, days, months."""
    micros, days, months = _unpack_interval(data)
    if not months:
        try:
            return _timedelta(days, 0, micros)
        except OverflowError:
            pass
    return temporal.interval_value(months, days, micros)


DECODERS = {
    oids.BOOL: decode_bool,
    oids.INT2: decode_int2,
    oids.INT4: decode_int4,
    oids.INT8: decode_int8,
    oids.OID: decode_uint4,
    oids.XID: decode_uint4,
    oids.CID: decode_uint4,
    oids.XID8: decode_uint8,
    oids.FLOAT4: decode_float4,
    oids.FLOAT8: decode_float8,
    oids.NUMERIC: decode_numeric,
    oids.BYTEA: decode_bytea,
    oids.TEXT: decode_str,
    oids.VARCHAR: decode_str,
    oids.BPCHAR: decode_str,
    oids.NAME: decode_str,
    oids.CHAR: decode_char,
    oids.UNKNOWN: decode_str,
    oids.JSON: decode_json,
    oids.JSONB: decode_jsonb,
    oids.UUID: decode_uuid,
    oids.DATE: decode_date,
    oids.TIME: decode_time,
    oids.TIMETZ: decode_timetz,
    oids.TIMESTAMP: decode_timestamp,
    oids.TIMESTAMPTZ: decode_timestamptz,
    oids.INTERVAL: decode_interval,
    oids.INET: decode_inet,
    oids.CIDR: decode_cidr,
}

# Fixed-width binary forms: decoder -> (struct code of the value, its width, the function of
# the unpacked value, None when it is the value). Arrays and row decoders read these values
# in bulk, with their lengths, instead of calling the decoder on each one.
FIXED_WIDTH: dict[Any, tuple[str, int, Any]] = {
    decode_int2: ("h", 2, None),
    decode_int4: ("i", 4, None),
    decode_int8: ("q", 8, None),
    decode_uint4: ("I", 4, None),
    decode_uint8: ("Q", 8, None),
    decode_float8: ("d", 8, None),
    decode_bool: ("1s", 1, decode_bool),  # the decoder itself: its own KeyError for 2
    decode_uuid: ("16s", 16, decode_uuid),
    decode_date: ("i", 4, _date_value),
    decode_time: ("q", 8, _time_value),
    decode_timestamp: ("q", 8, _timestamp_value),
    decode_timestamptz: ("q", 8, _timestamptz_value),
}


def fixed_width(decoder: Any) -> tuple[str, int, Any] | None:
    """The FIXED_WIDTH entry of exactly this decoder (by identity: decoders may be unhashable)."""
    found = _FIXED_BY_ID.get(id(decoder))
    return found[1] if found is not None and found[0] is decoder else None


_FIXED_BY_ID = {id(decoder): (decoder, spec) for decoder, spec in FIXED_WIDTH.items()}

# Result columns of these types (and their arrays) are requested in binary: exact whatever
# the session's settings (tools/bench_codecs.py has the costs). Binary is as cheap as text
# or cheaper for all but these two, kept binary because their text is not settings-proof:
# date/time types (in isolation 1.5-2x ISO text, which fromisoformat reads in C; but text
# needs DateStyle/IntervalStyle parsing, a non-UTC timestamptz's conversion costs more
# than binary, and outside ISO a timestamptz cannot be read at all) and float4 (~20x:
# the shortest-decimal search; its text is lossy under extra_float_digits <= 0).
BINARY_RESULTS = frozenset(DECODERS) - {
    oids.NUMERIC,  # text: exact under every setting and ~3x cheaper (Decimal reads text in C)
}


# -- binary parameter encoders ---------------------------------------------------------------


def param_bytea(value: Any) -> tuple[int, int, bytes]:
    """bytes, bytearray and memoryview, sent as they are."""
    return oids.BYTEA, 1, bytes(value)


def param_float8(value: float) -> tuple[int, int, bytes]:
    return oids.FLOAT8, 1, _FLOAT8.pack(value)


def param_uuid(value: UUID) -> tuple[int, int, bytes]:
    return oids.UUID, 1, value.bytes
