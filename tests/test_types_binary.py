"""Binary result decoders: byte-level on hand-built *_send output, then against real servers.

The rule under test: a value read in binary decodes to exactly what its ISO /
IntervalStyle=postgres text decodes to (timestamptz in UTC, float4 as its shortest
decimal, numeric with its scale, the same strings for what Python cannot hold).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import math
import pickle
import random
import struct
import uuid
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.rawquery import RawConnection, raw_connection, raw_connection_fixture
from support.values import SERVER_VALUES as VALUES
from support.values import assert_same, same

from pgmux.types import Interval, default_registry, float32, oids, temporal
from pgmux.types import binary as bin_codecs

REG = default_registry
UTC = dt.timezone.utc


def decode(oid: int, data: bytes):
    decoder = REG.binary_decoder(oid)
    assert decoder is not None, f"no binary decoder for {oid}"
    return decoder(data)


def i4(value: int) -> bytes:
    return struct.pack("!i", value)


def i8(value: int) -> bytes:
    return struct.pack("!q", value)


def micros(value: dt.datetime) -> int:
    """Microseconds since 2000-01-01 (UTC for an aware value)."""
    epoch = temporal.EPOCH_UTC if value.tzinfo else temporal.EPOCH
    return (value - epoch) // dt.timedelta(microseconds=1)


def days(value: dt.date) -> int:
    return value.toordinal() - temporal.EPOCH_ORDINAL


# -- numbers -----------------------------------------------------------------------------------

NUMBERS = [
    (oids.INT2, struct.pack("!h", -32768), -32768),
    (oids.INT4, i4(2**31 - 1), 2**31 - 1),
    (oids.INT8, i8(-(2**63)), -(2**63)),
    (oids.OID, struct.pack("!I", 2**32 - 1), 2**32 - 1),
    (oids.XID, struct.pack("!I", 7), 7),
    (oids.CID, struct.pack("!I", 0), 0),
    (oids.XID8, struct.pack("!Q", 2**64 - 1), 2**64 - 1),
    (oids.BOOL, b"\x01", True),
    (oids.BOOL, b"\x00", False),
    (oids.FLOAT8, struct.pack("!d", 0.1), 0.1),
    (oids.FLOAT8, struct.pack("!d", -0.0), -0.0),
    (oids.FLOAT4, struct.pack("!f", 0.1), 0.1),  # not 0.10000000149011612
    (oids.FLOAT4, struct.pack("!f", 3.4028234663852886e38), 3.4028235e38),
    (oids.FLOAT4, struct.pack("!f", 1e-45), 1e-45),  # the smallest subnormal
    (oids.FLOAT4, struct.pack("!f", 1.1754943508222875e-38), 1.1754944e-38),  # smallest normal
    (oids.FLOAT4, struct.pack("!f", 16777216.0), 16777216.0),
    (oids.FLOAT4, struct.pack("!f", 2.0**30), 1073741800.0),  # a power of two: asymmetric
    (oids.FLOAT4, struct.pack("!f", -2.5), -2.5),
    (oids.FLOAT4, struct.pack("!f", -0.0), -0.0),
    (oids.FLOAT4, struct.pack("!f", math.inf), math.inf),
    (oids.FLOAT4, struct.pack("!f", -math.inf), -math.inf),
    (oids.FLOAT4, struct.pack("!f", math.nan), math.nan),
]  # fmt: skip


@pytest.mark.parametrize(("oid", "data", "expected"), NUMBERS)
def test_number_decoders(oid, data, expected):
    assert_same(decode(oid, data), expected)


@given(st.integers(0, 2**32 - 1).filter(lambda bits: (bits >> 23) & 0xFF != 255))
def test_float4_fast_path_agrees_with_exact_arithmetic(bits):
    value = float32.shortest_float(struct.pack("!I", bits))
    if bits & 0x7FFFFFFF:
        assert_same(value, float32.shortest_exact(bits))
    assert struct.pack("!f", value) == struct.pack("!I", bits)  # it reads back as the float32


def numeric_send(text: str) -> bytes:
    """numeric_send output for a finite decimal text (base-10000 digits, weight, dscale)."""
    value = Decimal(text)
    sign, digits, exponent = value.as_tuple()
    dscale = max(0, -exponent)
    whole = "".join(map(str, digits)) + "0" * max(0, exponent)
    point = len(whole) - dscale  # digits before the decimal point
    pad_left = (-point) % 4
    whole = "0" * pad_left + whole
    whole += "0" * ((-len(whole)) % 4)
    groups = [int(whole[i : i + 4]) for i in range(0, len(whole), 4)]
    weight = (point + pad_left) // 4 - 1
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    head = struct.pack("!hhHH", len(groups), weight, 0x4000 if sign and groups else 0, dscale)
    return head + struct.pack(f"!{len(groups)}H", *groups)


NUMERIC_TEXTS = ["0", "0.00", "1.50", "-1.50", "12345.67", "-0.0001230", "10000", "1E+20",
                 "0.00000000000000000001", "99999999.9999", "1" + "0" * 200, "7" * 140,
                 "1." + "0" * 70 + "1", "-" + "9" * 300 + "." + "9" * 90]


@pytest.mark.parametrize("text", NUMERIC_TEXTS, ids=lambda t: t[:24])
def test_numeric_keeps_value_and_scale(text):
    expected = REG.text_decoder(oids.NUMERIC)(f"{Decimal(text):f}".encode())  # numeric_out
    assert_same(decode(oids.NUMERIC, numeric_send(text)), expected)


@given(st.decimals(allow_nan=False, allow_infinity=False, places=None))
def test_numeric_any_finite_value(value):
    text = f"{value:f}"  # plain notation: what numeric_out prints
    assert_same(decode(oids.NUMERIC, numeric_send(text)), Decimal(text))


def test_numeric_specials():
    assert decode(oids.NUMERIC, bytes.fromhex("00000000c0000000")).is_nan()
    assert_same(decode(oids.NUMERIC, bytes.fromhex("00000000d0000000")), Decimal("Infinity"))
    assert_same(decode(oids.NUMERIC, bytes.fromhex("00000000f0000000")), Decimal("-Infinity"))


# -- strings, bytes, json, uuid, addresses ----------------------------------------------------------

STRINGS = [
    (oids.TEXT, "é€😀".encode(), "é€😀"),
    (oids.VARCHAR, b"", ""),
    (oids.BPCHAR, b"ab  ", "ab  "),
    (oids.NAME, b"pg_class", "pg_class"),
    (oids.UNKNOWN, b"x", "x"),
    (oids.CHAR, b"a", "a"),
    (oids.CHAR, b"\x00", ""),  # char_out prints NUL as ''
    (oids.CHAR, b"\xe9", "\\351"),  # ... and high bytes as an octal escape
    (oids.BYTEA, b"\x00\xff", b"\x00\xff"),
    (oids.JSON, b' {"a": [1, 2.5]} ', {"a": [1, 2.5]}),
    (oids.JSONB, b'\x01{"a": [1, 2.5], "b": null}', {"a": [1, 2.5], "b": None}),
    (oids.JSONB, b"\x01null", None),
    (oids.JSONB, b'\x01"\xc3\xa9"', "é"),
]  # fmt: skip


@pytest.mark.parametrize(("oid", "data", "expected"), STRINGS)
def test_string_decoders(oid, data, expected):
    assert_same(decode(oid, data), expected)


@pytest.mark.parametrize("data", [b"\x02{}", b"\x01{} {}", b"", b"\x01"])
def test_jsonb_refuses_other_versions_and_trailing_data(data):
    with pytest.raises(ValueError):
        decode(oids.JSONB, data)


def test_uuid_is_the_uuid_the_constructor_builds():
    raw = uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11").bytes
    value = decode(oids.UUID, raw)
    built = uuid.UUID(bytes=raw)
    assert value == built and hash(value) == hash(built) and repr(value) == repr(built)
    assert value.is_safe is built.is_safe and value.version == 4
    assert pickle.loads(pickle.dumps(value)) == built
    with pytest.raises(ValueError):
        decode(oids.UUID, raw[:15])


def inet_send(family: int, bits: int, is_cidr: bool, address: bytes) -> bytes:
    return bytes([family, bits, is_cidr, len(address)]) + address


ADDRESSES = [
    (oids.INET, inet_send(2, 32, False, bytes([192, 168, 0, 1])),
     ipaddress.ip_address("192.168.0.1")),
    (oids.INET, inet_send(2, 8, False, bytes([10, 1, 2, 3])), ipaddress.ip_interface("10.1.2.3/8")),
    (oids.INET, inet_send(3, 128, False, ipaddress.ip_address("2001:db8::1").packed),
     ipaddress.ip_address("2001:db8::1")),
    (oids.INET, inet_send(3, 64, False, ipaddress.ip_address("2001:db8::1").packed),
     ipaddress.ip_interface("2001:db8::1/64")),
    (oids.CIDR, inet_send(2, 16, True, bytes([192, 168, 0, 0])),
     ipaddress.ip_network("192.168.0.0/16")),
    (oids.CIDR, inet_send(3, 32, True, ipaddress.ip_address("2001:db8::").packed),
     ipaddress.ip_network("2001:db8::/32")),
]  # fmt: skip


@pytest.mark.parametrize(("oid", "data", "expected"), ADDRESSES)
def test_address_decoders(oid, data, expected):
    assert_same(decode(oid, data), expected)


@pytest.mark.parametrize("data", [b"\x07\x20\x00\x04\x01\x02\x03\x04", b"\x02\x20\x00\x04\x01"])
def test_malformed_addresses_are_refused(data):
    with pytest.raises(ValueError):
        decode(oids.INET, data)


# -- dates and times -----------------------------------------------------------------------------

DATES = [
    (0, dt.date(2000, 1, 1)),
    (days(dt.date(1, 1, 1)), dt.date(1, 1, 1)),
    (days(dt.date(9999, 12, 31)), dt.date(9999, 12, 31)),
    (days(dt.date(1, 1, 1)) - 1, "0001-12-31 BC"),
    (days(dt.date(9999, 12, 31)) + 1, "10000-01-01"),
    (-2451545, "4714-11-24 BC"),  # Julian day 0, the earliest date
    (2**31 - 1, dt.date.max),  # infinity
    (-(2**31), dt.date.min),  # -infinity
]


@pytest.mark.parametrize(("count", "expected"), DATES)
def test_date(count, expected):
    assert_same(decode(oids.DATE, i4(count)), expected)


TIMESTAMPS = [
    (0, dt.datetime(2000, 1, 1)),
    (micros(dt.datetime(9999, 12, 31, 23, 59, 59, 999999)),
     dt.datetime(9999, 12, 31, 23, 59, 59, 999999)),
    (micros(dt.datetime(1, 1, 1)), dt.datetime(1, 1, 1)),
    (micros(dt.datetime(1, 1, 1)) - 500_000, "0001-12-31 23:59:59.5 BC"),
    (micros(dt.datetime(9999, 12, 31, 23, 59, 59, 999999)) + 1, "10000-01-01 00:00:00"),
    (2**63 - 1, dt.datetime.max),
    (-(2**63), dt.datetime.min),
]


@pytest.mark.parametrize(("count", "expected"), TIMESTAMPS)
def test_timestamp(count, expected):
    assert_same(decode(oids.TIMESTAMP, i8(count)), expected)


@pytest.mark.parametrize(("count", "expected"), TIMESTAMPS)
def test_timestamptz_is_utc(count, expected):
    if isinstance(expected, dt.datetime):
        expected = expected.replace(tzinfo=UTC)
    else:  # the text under TimeZone UTC: the offset before the era
        expected = expected.replace(" BC", "+00 BC") if "BC" in expected else expected + "+00"
    value = decode(oids.TIMESTAMPTZ, i8(count))
    assert_same(value, expected)
    if isinstance(value, dt.datetime):
        assert value.tzinfo is UTC


TIMES = [
    (oids.TIME, i8(0), dt.time(0)),
    (oids.TIME, i8(86_399_999_999), dt.time(23, 59, 59, 999999)),
    (oids.TIME, i8(45_296_500_000), dt.time(12, 34, 56, 500000)),
    (oids.TIME, i8(86_400_000_000), "24:00:00"),
    (oids.TIMETZ, i8(45_296_000_000) + i4(-19800), dt.time(12, 34, 56, tzinfo=dt.timezone(
        dt.timedelta(hours=5, minutes=30)))),
    (oids.TIMETZ, i8(0) + i4(12_615), dt.time(0, tzinfo=dt.timezone(
        -dt.timedelta(hours=3, minutes=30, seconds=15)))),
    (oids.TIMETZ, i8(1) + i4(0), dt.time(0, 0, 0, 1, tzinfo=UTC)),
    (oids.TIMETZ, i8(86_400_000_000) + i4(-18000), "24:00:00+05"),
    (oids.TIMETZ, i8(86_400_000_000) + i4(57599), "24:00:00-15:59:59"),
]  # fmt: skip


@pytest.mark.parametrize(("oid", "data", "expected"), TIMES)
def test_time_and_timetz(oid, data, expected):
    assert_same(decode(oid, data), expected)


def interval_send(months: int, day_count: int, micro: int) -> bytes:
    return struct.pack("!qii", micro, day_count, months)


INTERVALS = [
    ((0, 0, 0), dt.timedelta(0)),
    ((0, -1, 3_600_000_000), dt.timedelta(days=-1, hours=1)),
    ((0, 0, -(2**63 - 1)), dt.timedelta(microseconds=-(2**63 - 1))),
    ((14, 3, 4_005_006), Interval(14, 3, 4_005_006)),
    ((-1, 0, 0), Interval(-1, 0, 0)),
    ((0, 2**31 - 1, 0), Interval(0, 2**31 - 1, 0)),  # beyond timedelta
    ((2**31 - 1, 2**31 - 1, 2**63 - 1), "infinity"),  # PostgreSQL 17+
    ((-(2**31), -(2**31), -(2**63)), "-infinity"),
]


@pytest.mark.parametrize(("fields", "expected"), INTERVALS)
def test_interval(fields, expected):
    assert_same(decode(oids.INTERVAL, interval_send(*fields)), expected)


@pytest.mark.parametrize(("oid", "data"), [
    (oids.TEXT, "é".encode() * 40_000), (oids.BYTEA, b"\x00" * 70_000),
    (oids.JSONB, b'\x01["' + b"x" * 70_000 + b'"]'), (oids.INT4, i4(5)), (oids.UUID, bytes(16)),
    (oids.NUMERIC, numeric_send("1" * 300)), (oids.INET, inet_send(2, 8, False, bytes(4))),
])  # fmt: skip
def test_decoders_accept_memoryview(oid, data):
    assert_same(decode(oid, memoryview(data)), decode(oid, data))


def test_every_binary_result_type_has_a_binary_decoder_and_its_arrays_too():
    array_of = {oid: array_oid for oid, array_oid, _ in oids.TYPES.values()}
    for oid in bin_codecs.BINARY_RESULTS:
        assert REG.result_format(oid) == 1 and REG.binary_decoder(oid) is not None
        if array_of.get(oid):
            assert REG.result_format(array_of[oid]) == 1, array_of[oid]
    assert REG.result_format(oids.NUMERIC) == 0  # kept in text (see BINARY_RESULTS)


# -- real servers: binary and ISO text of the same values -------------------------------------------

TIME_ZONES = ["UTC", "Europe/Paris", "Asia/Kolkata", "America/St_Johns", "Pacific/Chatham"]


raw = raw_connection_fixture("UTC")


def both_formats(conn: RawConnection, sql: str, params=()) -> list[tuple[list, list]]:
    """[(values decoded from text, values decoded from binary)] per row of ``sql``."""
    text_result = conn.query(sql, params, result_format=0)
    binary_result = conn.query(sql, params, result_format=1)
    assert text_result.type_oids == binary_result.type_oids
    return list(zip(text_result.decoded(REG.text_decoder),
                    binary_result.decoded(REG.binary_decoder), strict=True))


def assert_formats_agree(conn: RawConnection, sql: str, params=()) -> None:
    for from_text, from_binary in both_formats(conn, sql, params):
        for text_value, binary_value in zip(from_text, from_binary, strict=True):
            assert same(binary_value, text_value), (sql, text_value, binary_value)


@pytest.mark.parametrize("type_name", sorted(VALUES))
def test_binary_equals_iso_text(raw, type_name):
    assert_formats_agree(raw, "SELECT " + ", ".join(VALUES[type_name]) + ", NULL::" + type_name)


@pytest.mark.parametrize("type_name", sorted(VALUES))
def test_binary_arrays_equal_text_arrays(raw, type_name):
    elements = ", ".join(f"({v})::{type_name}" for v in VALUES[type_name])
    sql = (f"SELECT ARRAY[{elements}, NULL], ARRAY[]::{type_name}[], "
           f"ARRAY[[{elements}], [{elements}]]")
    assert_formats_agree(raw, sql)


@pytest.mark.parametrize("zone", TIME_ZONES)
def test_timestamptz_in_any_time_zone(raw, zone):
    raw.execute(f"SET TimeZone = '{zone}'")
    try:
        assert_formats_agree(raw, "SELECT " + ", ".join(VALUES["timestamptz"]))
        assert_formats_agree(raw, "SELECT '2024-01-15 12:00:00.5+00'::timestamptz, "
                                  "'2024-07-01 12:00:00+00'::timestamptz")
    finally:
        raw.execute("SET TimeZone = 'UTC'")


def test_bytea_escape_output_equals_binary(raw):
    raw.execute("SET bytea_output = 'escape'")
    try:
        assert_formats_agree(raw, "SELECT decode(string_agg(lpad(to_hex(b), 2, '0'), ''), 'hex') "
                                  "FROM generate_series(0, 255) AS b")
    finally:
        raw.execute("RESET bytea_output")


def random_float4_texts(count: int, seed: int) -> list[str]:
    """Text that reads back as random float32s (all of them finite), 9 digits each."""
    rng = random.Random(seed)
    texts = []
    while len(texts) < count:
        bits = rng.getrandbits(32)
        if (bits >> 23) & 0xFF != 255:
            texts.append(f"{struct.unpack('!f', struct.pack('!I', bits))[0]:.9g}")
    return texts


POWERS_OF_TWO = [f"{math.ldexp(1.0, e):.9g}" for e in range(-149, 128)]


@pytest.mark.parametrize("extra_float_digits", [1, -15])
def test_random_float4_binary_equals_shortest_text(raw, extra_float_digits):
    """Thousands of random float32s and every power of two: binary decodes to the value
    of the text PostgreSQL prints by default, under any extra_float_digits."""
    values = random_float4_texts(3000, seed=extra_float_digits) + POWERS_OF_TWO
    literal = "{" + ",".join(values) + "}"
    sql = "SELECT unnest($1::float4[])"
    shortest = raw.query(sql, [literal.encode()], result_format=0).rows  # default settings
    raw.execute(f"SET extra_float_digits = {extra_float_digits}")
    try:
        binary = raw.query(sql, [literal.encode()], result_format=1).rows
    finally:
        raw.execute("RESET extra_float_digits")
    for (text_value,), (binary_value,) in zip(shortest, binary, strict=True):
        assert_same(REG.binary_decoder(oids.FLOAT4)(binary_value),
                    REG.text_decoder(oids.FLOAT4)(text_value))


def test_infinite_intervals_postgresql_17_and_later(pg18):
    with raw_connection(pg18) as conn:
        assert_formats_agree(conn, "SELECT 'infinity'::interval, '-infinity'::interval, "
                                   "ARRAY['infinity'::interval, '1 day']")
        [(_, from_binary)] = both_formats(conn, "SELECT 'infinity'::interval, "
                                                "'-infinity'::interval")
    assert from_binary == ["infinity", "-infinity"]


def array_send(element_oid: int, elements: list[bytes | None], *, flag_nulls: bool = True,
               dims: tuple[int, ...] | None = None) -> bytes:
    dims = dims or (len(elements),)
    head = struct.pack("!iiI", len(dims), flag_nulls and None in elements, element_oid)
    head += b"".join(struct.pack("!ii", size, 1) for size in dims)
    return head + b"".join(b"\xff\xff\xff\xff" if e is None else struct.pack("!i", len(e)) + e
                           for e in elements)


FIXED_ELEMENTS = {
    oids.INT2: [struct.pack("!h", v) for v in (1, -2, 32767)],
    oids.INT4: [i4(v) for v in (1, -2, 2**31 - 1)],
    oids.INT8: [i8(v) for v in (1, -2, 2**63 - 1)],
    oids.OID: [struct.pack("!I", v) for v in (1, 2**32 - 1, 0)],
    oids.XID8: [struct.pack("!Q", v) for v in (1, 2**64 - 1, 0)],
    oids.FLOAT8: [struct.pack("!d", v) for v in (0.5, -math.inf, 1e300)],
    oids.BOOL: [b"\x01", b"\x00", b"\x01"],
    oids.UUID: [uuid.UUID(int=v).bytes for v in (1, 2, 2**128 - 1)],
    oids.DATE: [i4(v) for v in (0, 2**31 - 1, -2451545)],
    oids.TIME: [i8(v) for v in (0, 86_400_000_000, 1)],
    oids.TIMESTAMP: [i8(v) for v in (0, 2**63 - 1, -(2**62))],
    oids.TIMESTAMPTZ: [i8(v) for v in (0, -(2**63), 10**15)],
}


@pytest.mark.parametrize("oid", sorted(FIXED_ELEMENTS))
def test_fixed_width_arrays_read_in_bulk_equal_element_by_element(oid):
    elements = FIXED_ELEMENTS[oid]
    expected = [REG.binary_decoder(oid)(e) for e in elements]
    array_oid = next(a for o, a, _ in oids.TYPES.values() if o == oid)
    decode_array = REG.binary_decoder(array_oid)
    assert_same(decode_array(array_send(oid, elements)), expected)
    assert_same(decode_array(array_send(oid, elements * 2, dims=(2, 3))), [expected, expected])
    assert_same(decode_array(array_send(oid, [*elements, None])), [*expected, None])
    # a NULL the has-nulls flag did not announce still decodes (element by element)
    assert_same(decode_array(array_send(oid, [None, *elements], flag_nulls=False)),
                [None, *expected])
