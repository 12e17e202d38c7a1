"""Byte-level tests of pgmux.types: decoders on PostgreSQL 15's exact output, encoders, COPY.

Every server string below was printed by PostgreSQL 15 under the settings pgmux uses
(client_encoding UTF8, DateStyle 'ISO, MDY', IntervalStyle postgres, bytea_output hex,
extra_float_digits 1); binary fixtures are the output of the type's *_send function.
"""

from __future__ import annotations

import ast
import datetime as dt
import enum
import ipaddress
import math
import pathlib
import uuid
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgmux.errors import InterfaceError
from pgmux.types import Interval, Json, TypeRegistry, default_registry, encode_copy_row, oids
from pgmux.types import text as text_codecs
from pgmux.types.arrays import parse_text_array, quote_element
from pgmux.types.ranges import Range

REG = default_registry
UTC = dt.timezone.utc


def tz(hours: int = 0, minutes: int = 0, seconds: int = 0) -> dt.timezone:
    return dt.timezone(dt.timedelta(hours=hours, minutes=minutes, seconds=seconds))


def decode(oid: int, data: bytes):
    return REG.text_decoder(oid)(data)


def bdecode(oid: int, hex_data: str):
    decoder = REG.binary_decoder(oid)
    assert decoder is not None
    return decoder(bytes.fromhex(hex_data))


# -- text decoders on server output ----------------------------------------------------------

SCALARS = [
    (oids.BOOL, b"t", True),
    (oids.BOOL, b"f", False),
    (oids.INT2, b"-32768", -32768),
    (oids.INT4, b"42", 42),
    (oids.INT8, b"-9223372036854775808", -(2**63)),
    (oids.OID, b"4294967295", 4294967295),
    (oids.XID, b"123", 123),
    (oids.XID8, b"5", 5),
    (oids.FLOAT8, b"0.1", 0.1),
    (oids.FLOAT8, b"1e+300", 1e300),
    (oids.FLOAT8, b"1e-07", 1e-07),
    (oids.FLOAT8, b"123456789012", 123456789012.0),
    (oids.FLOAT8, b"Infinity", math.inf),
    (oids.FLOAT8, b"-Infinity", -math.inf),
    (oids.FLOAT4, b"0.1", 0.1),
    (oids.FLOAT4, b"3.4028235e+38", 3.4028235e38),
    (oids.NUMERIC, b"1.50", Decimal("1.50")),
    (oids.NUMERIC, b"0.00000000000000000001", Decimal("1E-20")),
    (oids.NUMERIC, b"Infinity", Decimal("Infinity")),
    (oids.NUMERIC, b"-Infinity", Decimal("-Infinity")),
    (oids.TEXT, "é€😀".encode(), "é€😀"),
    (oids.VARCHAR, b"", ""),
    (oids.BPCHAR, b"a  ", "a  "),
    (oids.NAME, b"ab", "ab"),
    (oids.CHAR, b"x", "x"),
    (oids.UNKNOWN, b"what", "what"),
    (oids.REGTYPE, b"integer", "integer"),
    (oids.REGCLASS, b"pg_class", "pg_class"),
    (oids.MONEY, b"$1.00", "$1.00"),
    (oids.BYTEA, b"\\x00ff", b"\x00\xff"),
    (oids.BYTEA, b"\\x", b""),
    (oids.BYTEA, b"\\000\\377\\\\A", b"\x00\xff\\A"),  # bytea_output=escape
    (oids.BYTEA, b"abc", b"abc"),  # bytea_output=escape
    (oids.UUID, b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
     uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")),
    (oids.JSONB, b'{"a": [1, 2], "b": 1}', {"a": [1, 2], "b": 1}),
    (oids.JSON, b'{"b":1,  "a":[1,2]}', {"b": 1, "a": [1, 2]}),
    (oids.JSONB, b'"\xc3\xa9"', "é"),
    (oids.INET, b"192.168.0.1/24", ipaddress.ip_interface("192.168.0.1/24")),
    (oids.INET, b"192.168.0.1", ipaddress.ip_address("192.168.0.1")),
    (oids.INET, b"::1", ipaddress.ip_address("::1")),
    (oids.INET, b"2001:db8::1/64", ipaddress.ip_interface("2001:db8::1/64")),
    (oids.CIDR, b"192.168.0.0/16", ipaddress.ip_network("192.168.0.0/16")),
    (oids.DATE, b"2024-01-02", dt.date(2024, 1, 2)),
    (oids.DATE, b"0001-01-01", dt.date(1, 1, 1)),
    (oids.DATE, b"0099-01-01", dt.date(99, 1, 1)),
    (oids.TIME, b"12:34:56.5", dt.time(12, 34, 56, 500000)),
    (oids.TIME, b"00:00:00", dt.time(0)),
    (oids.TIMETZ, b"12:34:56+05:30", dt.time(12, 34, 56, tzinfo=tz(5, 30))),
    (oids.TIMETZ, b"12:34:56-03:30:15", dt.time(12, 34, 56, tzinfo=tz(-3, -30, -15))),
    (oids.TIMETZ, b"12:00:00+00", dt.time(12, tzinfo=UTC)),
    (oids.TIMESTAMP, b"2024-01-02 03:04:05.5", dt.datetime(2024, 1, 2, 3, 4, 5, 500000)),
    (oids.TIMESTAMP, b"0001-01-01 00:00:00", dt.datetime(1, 1, 1)),
    # timestamptz decodes in UTC, whatever offset the session's TimeZone printed
    (oids.TIMESTAMPTZ, b"2024-01-02 03:04:05.123456+05:30",
     dt.datetime(2024, 1, 1, 21, 34, 5, 123456, tzinfo=UTC)),
    (oids.TIMESTAMPTZ, b"2024-01-02 03:04:05+00", dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
    (oids.TIMESTAMPTZ, b"2024-01-02 03:04:05-03:30",
     dt.datetime(2024, 1, 2, 6, 34, 5, tzinfo=UTC)),
    (oids.TIMESTAMPTZ, b"1800-01-01 00:00:00+05:53:28",
     dt.datetime(1799, 12, 31, 18, 6, 32, tzinfo=UTC)),
    (oids.TIMESTAMPTZ, b"1900-01-02 03:04:05+00:19:32",
     dt.datetime(1900, 1, 2, 2, 44, 33, tzinfo=UTC)),
]  # fmt: skip


@pytest.mark.parametrize(("oid", "data", "expected"), SCALARS)
def test_text_decoders_on_server_output(oid, data, expected):
    value = decode(oid, data)
    assert value == expected
    assert type(value) is type(expected)
    if isinstance(expected, (dt.datetime, dt.time)):
        assert value.utcoffset() == expected.utcoffset()


def test_text_nan_values():
    assert math.isnan(decode(oids.FLOAT8, b"NaN"))
    assert math.isnan(decode(oids.FLOAT4, b"NaN"))
    assert decode(oids.NUMERIC, b"NaN").is_nan()


def test_unknown_oid_decodes_to_str_and_has_no_binary_decoder():
    assert REG.text_decoder(999_999)(b"(1,2)") == "(1,2)"
    assert REG.text_decoder(oids.POINT)(b"(1,2)") == "(1,2)"
    assert REG.binary_decoder(999_999) is None
    assert REG.result_format(999_999) == 0


OUT_OF_RANGE = [
    (oids.DATE, b"infinity", dt.date.max),
    (oids.DATE, b"-infinity", dt.date.min),
    (oids.DATE, b"4713-01-01 BC", "4713-01-01 BC"),
    (oids.DATE, b"10000-01-01", "10000-01-01"),
    (oids.TIMESTAMP, b"infinity", dt.datetime.max),
    (oids.TIMESTAMP, b"-infinity", dt.datetime.min),
    (oids.TIMESTAMP, b"2024-01-02 00:00:00 BC", "2024-01-02 00:00:00 BC"),
    (oids.TIMESTAMP, b"10000-01-01 00:00:00", "10000-01-01 00:00:00"),
    (oids.TIMESTAMPTZ, b"infinity", dt.datetime.max.replace(tzinfo=UTC)),
    (oids.TIMESTAMPTZ, b"-infinity", dt.datetime.min.replace(tzinfo=UTC)),
    # timestamptz beyond datetime: the server's text under TimeZone UTC (what binary gives)
    (oids.TIMESTAMPTZ, b"2000-01-01 00:00:00+05:53:28 BC", "2001-12-31 18:06:32+00 BC"),
    (oids.TIMESTAMPTZ, b"10000-01-01 00:00:00+00", "10000-01-01 00:00:00+00"),
    (oids.TIMESTAMPTZ, b"0001-01-01 00:00:00+01", "0001-12-31 23:00:00+00 BC"),
    (oids.TIME, b"24:00:00", "24:00:00"),
    # in range once in UTC
    (oids.TIMESTAMPTZ, b"10000-01-01 00:59:59.999999+01",
     dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
]


@pytest.mark.parametrize(("oid", "data", "expected"), OUT_OF_RANGE)
def test_values_python_cannot_hold(oid, data, expected):
    value = decode(oid, data)
    assert value == expected
    assert type(value) is type(expected)


def test_timestamptz_infinity_is_aware():
    assert decode(oids.TIMESTAMPTZ, b"infinity").tzinfo is UTC


@pytest.mark.parametrize(
    ("oid", "data", "expected"),
    [
        case
        for case in SCALARS
        if case[0] in (oids.TIME, oids.TIMETZ, oids.TIMESTAMP, oids.TIMESTAMPTZ)
    ],
)
def test_regex_parsers_read_server_output(oid, data, expected):
    """parse_*_text serve Python 3.10, whose fromisoformat cannot read ".5" or "+05"."""
    parse = text_codecs.parse_time_text if oid in (oids.TIME, oids.TIMETZ) else None
    value = (parse or text_codecs.parse_datetime_text)(data.decode())
    if oid == oids.TIMESTAMPTZ:  # the parser keeps the printed offset; the decoder goes to UTC
        value = value.astimezone(UTC)
    assert value == expected
    assert value.utcoffset() == expected.utcoffset()


@pytest.mark.parametrize("text", ["24:00:00", "2024-01-02 00:00:00 BC", "infinity", ""])
def test_regex_parsers_raise_value_error_outside_python(text):
    with pytest.raises(ValueError):
        text_codecs.parse_datetime_text(text)
    with pytest.raises(ValueError):
        text_codecs.parse_time_text(text)


def pg_timestamptz_text(value: dt.datetime) -> str:
    """Format an aware datetime exactly as PostgreSQL's ISO DateStyle prints it."""
    text = f"{value.year:04d}-" + value.strftime("%m-%d %H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    offset = int(value.utcoffset().total_seconds())
    sign, offset = ("-", -offset) if offset < 0 else ("+", offset)
    hours, rest = divmod(offset, 3600)
    minutes, seconds = divmod(rest, 60)
    text += f"{sign}{hours:02d}"
    if minutes or seconds:
        text += f":{minutes:02d}"
    if seconds:
        text += f":{seconds:02d}"
    return text


@given(
    st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
    st.integers(min_value=-15 * 3600 - 59 * 60 - 59, max_value=15 * 3600 + 59 * 60 + 59),
)
def test_timestamptz_any_offset(naive, offset_seconds):
    value = naive.replace(tzinfo=dt.timezone(dt.timedelta(seconds=offset_seconds)))
    data = pg_timestamptz_text(value).encode()
    decoded = decode(oids.TIMESTAMPTZ, data)
    assert decoded == value
    assert decoded.tzinfo is UTC
    parsed = text_codecs.parse_datetime_text(data.decode())
    assert parsed == value
    assert parsed.utcoffset() == value.utcoffset()


INTERVALS = [
    (b"1 year 2 mons 3 days 04:05:06.789", Interval(14, 3, 14_706_789_000)),
    (b"-1 years -2 mons +3 days -04:05:06", Interval(-14, 3, -14_706_000_000)),
    (b"1 mon -2 days -04:05:06.000001", Interval(1, -2, -14_706_000_001)),
    (b"-1 mons +2 days 04:05:06", Interval(-1, 2, 14_706_000_000)),
    (b"11 mons", Interval(11, 0, 0)),
    (b"178000000 years", Interval(2_136_000_000, 0, 0)),
    (b"-00:00:01", dt.timedelta(seconds=-1)),
    (b"-00:00:00.5", dt.timedelta(microseconds=-500_000)),
    (b"00:00:00", dt.timedelta(0)),
    (b"00:00:00.000001", dt.timedelta(microseconds=1)),
    (b"1 day", dt.timedelta(days=1)),
    (b"-2 days", dt.timedelta(days=-2)),
    (b"1 day 01:00:00", dt.timedelta(days=1, hours=1)),
    (b"-1 days +01:00:00", dt.timedelta(days=-1, hours=1)),
    (b"-1 days -00:00:01", dt.timedelta(days=-1, seconds=-1)),
    (b"1 day -00:00:01", dt.timedelta(days=1, seconds=-1)),
    (b"-5 days -00:00:00.5", dt.timedelta(days=-5, microseconds=-500_000)),
    (b"2562047788:00:54.775807", dt.timedelta(microseconds=2**63 - 1)),
    (b"-2562047788:00:54.775807", dt.timedelta(microseconds=-(2**63 - 1))),
    (b"2147483647 days", Interval(0, 2_147_483_647, 0)),  # beyond timedelta's range
]


@pytest.mark.parametrize(("data", "expected"), INTERVALS)
def test_interval_decoder(data, expected):
    value = decode(oids.INTERVAL, data)
    assert value == expected
    assert type(value) is type(expected)


def test_interval_in_another_style_decodes_to_str():
    assert decode(oids.INTERVAL, b"P1Y2M") == "P1Y2M"  # IntervalStyle iso_8601


@pytest.mark.parametrize(
    ("oid", "data"),
    [(oids.TEXT, "é" * 70_000), (oids.JSONB, '["' + "x" * 70_000 + '"]'),
     (oids.NUMERIC, "1" * 70_000), (999_999, "u" * 70_000)],
)  # fmt: skip
def test_variable_length_decoders_accept_memoryview(oid, data):
    raw = data.encode()
    assert REG.text_decoder(oid)(memoryview(raw)) == REG.text_decoder(oid)(raw)


def test_bytea_and_array_decoders_accept_memoryview():
    raw = b"\\x" + b"ab" * 40_000
    assert decode(oids.BYTEA, memoryview(raw)) == b"\xab" * 40_000
    assert REG.binary_decoder(oids.BYTEA)(memoryview(b"\x00\x01")) == b"\x00\x01"
    array = b"{" + b",".join([b'"a,b"'] * 20_000) + b"}"
    assert decode(oids.TEXT_ARRAY, memoryview(array)) == ["a,b"] * 20_000


# -- binary decoders on *_send output --------------------------------------------------------

BINARY = [
    (oids.BOOL, "01", True),
    (oids.BOOL, "00", False),
    (oids.INT2, "fffe", -2),
    (oids.INT4, "0000002a", 42),
    (oids.INT8, "ffffffffffffffff", -1),
    (oids.OID, "ffffffff", 4294967295),
    (oids.FLOAT8, "3fb999999999999a", 0.1),
    (oids.FLOAT4, "3dcccccd", 0.1),  # the shortest decimal, as text gives (float32 module)
    (oids.UUID, "a0eebc999c0b4ef8bb6d6bb9bd380a11",
     uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")),
    (oids.BYTEA, "00ff", b"\x00\xff"),
    (oids.TEXT, "68c3a9", "hé"),
    (oids.JSONB, "017b2261223a20317d", {"a": 1}),
    (oids.JSON, "7b2261223a317d", {"a": 1}),
]  # fmt: skip


@pytest.mark.parametrize(("oid", "hex_data", "expected"), BINARY)
def test_binary_decoders_on_send_output(oid, hex_data, expected):
    value = bdecode(oid, hex_data)
    assert value == expected
    assert type(value) is type(expected)


NUMERIC_SEND = [
    ("1.50", "000200000000000200011388"),
    ("10000", "00010001000000000001"),
    ("-0.0001230", "0002ffff40000007000108fc"),
    ("0", "0000000000000000"),
    ("0.00", "0000000000000002"),
    ("123456789.000000001", "0006000200000009000109291a850000000003e8"),
    ("100000000000000000000", "00010005000000000001"),
    ("0.00000000000000000001", "0001fffb000000140001"),
    ("-123.456", "0002000040000003007b11d0"),
    ("99999999.9999", "0003000100000004270f270f270f"),
    ("0.5", "0001ffff000000011388"),
    ("12345678901234567890.123", "000600040000000304d2162e23340d801ed204ce"),
    ("Infinity", "00000000d0000020"),
    ("-Infinity", "00000000f0000020"),
]


@pytest.mark.parametrize(("server_text", "hex_data"), NUMERIC_SEND)
def test_binary_numeric_equals_text_numeric(server_text, hex_data):
    """Same value and same scale (str) as the server's text output."""
    value = bdecode(oids.NUMERIC, hex_data)
    assert str(value) == str(decode(oids.NUMERIC, server_text.encode()))


def test_binary_numeric_nan():
    assert bdecode(oids.NUMERIC, "00000000c0000000").is_nan()


BINARY_ARRAYS = [
    (oids.INT4_ARRAY,
     "00000001000000010000001700000003000000010000000400000001ffffffff0000000400000003",
     [1, None, 3]),
    (oids.INT4_ARRAY, "000000000000000000000017", []),
    (oids.INT4_ARRAY,
     "000000020000000000000017000000020000000000000002000000010000000400000001"
     "000000040000000200000004000000030000000400000004",
     [[1, 2], [3, 4]]),  # '[0:1][1:2]={{1,2},{3,4}}': bounds dropped
    (oids.FLOAT8_ARRAY,
     "0000000200000001000002bd00000002000000010000000200000001000000083ff8000000000000"
     "ffffffff00000008bfd0000000000000000000087ff0000000000000",
     [[1.5, None], [-0.25, math.inf]]),
    (oids.BYTEA_ARRAY, "00000001000000000000001100000002000000010000000200ff00000000",
     [b"\x00\xff", b""]),
    (oids.BOOL_ARRAY, "00000001000000010000001000000002000000010000000101ffffffff", [True, None]),
    (oids.TEXT_ARRAY, "00000001000000010000001900000002000000010000000161ffffffff", ["a", None]),
    (oids.TEXT_ARRAY, "000000000000000000000019", []),
]  # fmt: skip


@pytest.mark.parametrize(("oid", "hex_data", "expected"), BINARY_ARRAYS)
def test_binary_arrays_on_array_send_output(oid, hex_data, expected):
    assert bdecode(oid, hex_data) == expected


RESULT_FORMATS = [
    (oids.INT4, 1), (oids.INT8, 1), (oids.INT2, 1), (oids.BOOL, 1), (oids.FLOAT8, 1),
    (oids.BYTEA, 1), (oids.UUID, 1), (oids.OID, 1), (oids.INT4_ARRAY, 1),
    (oids.BYTEA_ARRAY, 1), (oids.FLOAT4, 1), (oids.TEXT, 1), (oids.TIMESTAMPTZ, 1),
    (oids.JSONB, 1), (oids.TEXT_ARRAY, 1), (oids.FLOAT4_ARRAY, 1), (oids.INTERVAL, 1),
    (oids.NUMERIC, 0), (oids.NUMERIC_ARRAY, 0), (oids.POINT, 0), (oids.MONEY, 0),
]  # fmt: skip


@pytest.mark.parametrize(("oid", "fmt"), RESULT_FORMATS)
def test_result_format(oid, fmt):
    assert REG.result_format(oid) == fmt
    if fmt == 1:
        assert REG.binary_decoder(oid) is not None


# -- text arrays -----------------------------------------------------------------------------

TEXT_ARRAYS = [
    (oids.TEXT_ARRAY,
     b'{"a,b","NULL",NULL,"","back\\\\slash","quo\\"te","{br}","sp ace",x}',
     ["a,b", "NULL", None, "", "back\\slash", 'quo"te', "{br}", "sp ace", "x"]),
    (oids.TEXT_ARRAY, b'{"null"," lead"}', ["null", " lead"]),
    (oids.TEXT_ARRAY, b'{"a\\"b\\\\\\\\c"}', ['a"b\\\\c']),
    (oids.TEXT_ARRAY, b'{"{}"}', ["{}"]),
    (oids.TEXT_ARRAY, b'{""}', [""]),
    (oids.TEXT_ARRAY, b'{"\\\\"}', ["\\"]),
    (oids.TEXT_ARRAY, b'{"a\\\\b\\"c{}"}', ['a\\b"c{}']),
    (oids.TEXT_ARRAY, '{é€😀}'.encode(), ["é€😀"]),
    (oids.TEXT_ARRAY, b'{"tab\there","nl\nx"}', ["tab\there", "nl\nx"]),
    (oids.BPCHAR_ARRAY, b'{"   "}', ["   "]),
    (oids.CHAR_ARRAY, b'{x,"\\""}', ["x", '"']),
    (oids.INT4_ARRAY, b"{1,NULL,3}", [1, None, 3]),
    (oids.INT4_ARRAY, b"{}", []),
    (oids.INT4_ARRAY, b"{{1,2},{3,4}}", [[1, 2], [3, 4]]),
    (oids.INT4_ARRAY, b"{{{1},{2}},{{3},{4}}}", [[[1], [2]], [[3], [4]]]),
    (oids.INT4_ARRAY, b"{{NULL,NULL}}", [[None, None]]),
    (oids.INT4_ARRAY, b"[0:1]={1,2}", [1, 2]),
    (oids.INT4_ARRAY, b"[1:1][2:3]={{1,2}}", [[1, 2]]),
    (oids.BOOL_ARRAY, b"{t,f}", [True, False]),
    (oids.FLOAT8_ARRAY, b"{1.5,Infinity}", [1.5, math.inf]),
    (oids.NUMERIC_ARRAY, b"{1.5,Infinity}", [Decimal("1.5"), Decimal("Infinity")]),
    (oids.BYTEA_ARRAY, b'{"\\\\x00ff",NULL}', [b"\x00\xff", None]),
    (oids.JSONB_ARRAY, b'{"{\\"a\\": 1}","null"}', [{"a": 1}, None]),
    (oids.TIMESTAMPTZ_ARRAY, b'{"2024-01-02 03:04:05+00"}',
     [dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)]),
    (oids.TIMESTAMP_ARRAY, b'{"2024-01-02 03:04:05.5"}', [dt.datetime(2024, 1, 2, 3, 4, 5, 500000)]),
    (oids.DATE_ARRAY, b"{infinity,2024-01-02}", [dt.date.max, dt.date(2024, 1, 2)]),
    (oids.TIME_ARRAY, b"{12:00:00}", [dt.time(12)]),
    (oids.INTERVAL_ARRAY, b'{"1 year 2 mons",-00:00:01}', [Interval(14), dt.timedelta(seconds=-1)]),
    (oids.INET_ARRAY, b"{10.0.0.1/8,::1}",
     [ipaddress.ip_interface("10.0.0.1/8"), ipaddress.ip_address("::1")]),
    (oids.UUID_ARRAY, b"{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
     [uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")]),
    (oids.BOX_ARRAY, b"{(1,1),(0,0);(2,2),(1,1)}", ["(1,1),(0,0)", "(2,2),(1,1)"]),
    (oids.POINT_ARRAY, b'{"(1,2)"}', ["(1,2)"]),
    (oids.INT4RANGE_ARRAY, b'{"[1,3)",empty}', [Range(1, 3), Range(empty=True)]),
]  # fmt: skip


@pytest.mark.parametrize(("oid", "data", "expected"), TEXT_ARRAYS)
def test_text_arrays_on_server_output(oid, data, expected):
    value = decode(oid, data)
    assert value == expected
    assert [type(v) for v in value] == [type(v) for v in expected]


def test_nan_in_float_and_numeric_arrays():
    value = decode(oids.FLOAT8_ARRAY, b"{1.5,NaN}")
    assert value[0] == 1.5 and math.isnan(value[1])
    value = decode(oids.NUMERIC_ARRAY, b"{1.5,NaN}")
    assert value[0] == Decimal("1.5") and value[1].is_nan()


def test_array_parser_is_lenient_with_blanks():
    assert parse_text_array(b"{ 1 , 2 }", int) == [1, 2]
    assert parse_text_array(b'{ "a b" , {c} }', bytes) == [b"a b", [b"c"]]


# -- encoders --------------------------------------------------------------------------------

AWARE = dt.datetime(2024, 1, 2, 3, 4, 5, 500000, tzinfo=tz(5, 30))


class Color(enum.IntEnum):
    RED = 1


ENCODED = [
    (None, (0, 0, None)),
    (True, (oids.BOOL, 0, b"t")),
    (False, (oids.BOOL, 0, b"f")),
    (42, (oids.INT4, 0, b"42")),
    (-(2**31), (oids.INT4, 0, b"-2147483648")),
    (2**31, (oids.INT8, 0, b"2147483648")),
    (-(2**63), (oids.INT8, 0, b"-9223372036854775808")),
    (2**63, (oids.NUMERIC, 0, b"9223372036854775808")),
    (-(2**70), (oids.NUMERIC, 0, b"-1180591620717411303424")),
    (Color.RED, (oids.INT4, 0, b"1")),
    (0.1, (oids.FLOAT8, 1, bytes.fromhex("3fb999999999999a"))),
    (math.inf, (oids.FLOAT8, 1, bytes.fromhex("7ff0000000000000"))),
    (Decimal("1.50"), (oids.NUMERIC, 0, b"1.50")),
    (Decimal("1E+2"), (oids.NUMERIC, 0, b"1E+2")),
    (Decimal("NaN"), (oids.NUMERIC, 0, b"NaN")),
    (Decimal("sNaN"), (oids.NUMERIC, 0, b"NaN")),
    (Decimal("Infinity"), (oids.NUMERIC, 0, b"Infinity")),
    (Decimal("-Infinity"), (oids.NUMERIC, 0, b"-Infinity")),
    ("héllo", (0, 0, "héllo".encode())),
    (b"\x00\xff", (oids.BYTEA, 1, b"\x00\xff")),
    (bytearray(b"ab"), (oids.BYTEA, 1, b"ab")),
    (memoryview(b"xy"), (oids.BYTEA, 1, b"xy")),
    (dt.date(2024, 1, 2), (oids.DATE, 0, b"2024-01-02")),
    (dt.date(99, 1, 1), (oids.DATE, 0, b"0099-01-01")),
    (dt.date.max, (oids.DATE, 0, b"9999-12-31")),
    (dt.datetime(2024, 1, 2, 3, 4, 5), (oids.TIMESTAMP, 0, b"2024-01-02 03:04:05")),
    (AWARE, (oids.TIMESTAMPTZ, 0, b"2024-01-02 03:04:05.500000+05:30")),
    (dt.datetime(1800, 1, 1, tzinfo=tz(0, 19, 32)),
     (oids.TIMESTAMPTZ, 0, b"1800-01-01 00:00:00+00:19:32")),
    (dt.time(12, 34, 56, 500000), (oids.TIME, 0, b"12:34:56.500000")),
    (dt.time(12, tzinfo=tz(-3, -30, -15)), (oids.TIMETZ, 0, b"12:00:00-03:30:15")),
    (dt.timedelta(hours=-1), (oids.INTERVAL, 0, b"-01:00:00.000000")),
    (dt.timedelta(days=-2, seconds=5), (oids.INTERVAL, 0, b"-1 days -23:59:55.000000")),
    (dt.timedelta(days=3, microseconds=7), (oids.INTERVAL, 0, b"3 days 00:00:00.000007")),
    (Interval(14, 3, 14_706_789_000), (oids.INTERVAL, 0, b"14 mons 3 days 04:05:06.789000")),
    (Interval(-1, 2, -1), (oids.INTERVAL, 0, b"-1 mons 2 days -00:00:00.000001")),
    (uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
     (oids.UUID, 1, bytes.fromhex("a0eebc999c0b4ef8bb6d6bb9bd380a11"))),
    (ipaddress.ip_address("10.0.0.1"), (oids.INET, 0, b"10.0.0.1")),
    (ipaddress.ip_interface("10.0.0.1/8"), (oids.INET, 0, b"10.0.0.1/8")),
    (ipaddress.ip_network("10.0.0.0/8"), (oids.CIDR, 0, b"10.0.0.0/8")),
    (ipaddress.ip_address("::1"), (oids.INET, 0, b"::1")),
    (ipaddress.ip_interface("2001:db8::1/64"), (oids.INET, 0, b"2001:db8::1/64")),
    (ipaddress.ip_network("2001:db8::/32"), (oids.CIDR, 0, b"2001:db8::/32")),
    (Json({"a": [1, None]}), (oids.JSONB, 0, b'{"a": [1, null]}')),
    (Json({"a": 1}, dumps=lambda v: "custom"), (oids.JSONB, 0, b"custom")),
]  # fmt: skip


@pytest.mark.parametrize(("value", "expected"), ENCODED)
def test_encode(value, expected):
    assert REG.encode(value) == expected


def test_nan_float_encodes_as_binary_nan():
    oid, fmt, data = REG.encode(math.nan)
    assert (oid, fmt) == (oids.FLOAT8, 1)
    assert math.isnan(REG.binary_decoder(oids.FLOAT8)(data))


LISTS = [
    ([], (0, 0, b"{}")),
    ([1, None, 3], (oids.INT4_ARRAY, 0, b"{1,NULL,3}")),
    ([1, 2**40], (oids.INT8_ARRAY, 0, b"{1,1099511627776}")),
    ([1, 2**70], (oids.NUMERIC_ARRAY, 0, b"{1,1180591620717411303424}")),
    ([1, 1.5], (oids.FLOAT8_ARRAY, 0, b"{1,1.5}")),
    ([Decimal("1.5"), 2], (oids.NUMERIC_ARRAY, 0, b"{1.5,2}")),
    ([2**40, 1.5], (oids.NUMERIC_ARRAY, 0, b"{1099511627776,1.5}")),
    ([1.5, math.nan, -math.inf], (oids.FLOAT8_ARRAY, 0, b"{1.5,NaN,-Infinity}")),
    ([[1, 2], [3, 4]], (oids.INT4_ARRAY, 0, b"{{1,2},{3,4}}")),
    ([[None, 1], None], (oids.INT4_ARRAY, 0, b"{{NULL,1},NULL}")),
    ([None, None], (0, 0, b"{NULL,NULL}")),
    (["a", 1], (0, 0, b"{a,1}")),
    (["a,b", "NULL", None, "", "null", "back\\slash", 'quo"te', "{br}", "sp ace", "x",
      "tab\t", " lead", "semi;colon"],
     (oids.TEXT_ARRAY, 0,
      b'{"a,b","NULL",NULL,"","null","back\\\\slash","quo\\"te","{br}","sp ace",x,'
      b'"tab\t"," lead",semi;colon}')),
    ([["a", "b"], ["c", None]], (oids.TEXT_ARRAY, 0, b"{{a,b},{c,NULL}}")),
    ([b"\x00\xff", None], (oids.BYTEA_ARRAY, 0, b'{"\\\\x00ff",NULL}')),
    ([True, False], (oids.BOOL_ARRAY, 0, b"{t,f}")),
    ([dt.date(2024, 1, 2)], (oids.DATE_ARRAY, 0, b"{2024-01-02}")),
    ([dt.datetime(2024, 1, 2, 3, 4, 5)], (oids.TIMESTAMP_ARRAY, 0, b'{"2024-01-02 03:04:05"}')),
    ([AWARE], (oids.TIMESTAMPTZ_ARRAY, 0, b'{"2024-01-02 03:04:05.500000+05:30"}')),
    ([dt.timedelta(hours=-1)], (oids.INTERVAL_ARRAY, 0, b"{-01:00:00.000000}")),
    ([uuid.UUID(int=5)], (oids.UUID_ARRAY, 0, b"{00000000-0000-0000-0000-000000000005}")),
    ([Json({"a": 1})], (oids.JSONB_ARRAY, 0, b'{"{\\"a\\": 1}"}')),
    ([ipaddress.ip_network("10.0.0.0/8")], (oids.CIDR_ARRAY, 0, b"{10.0.0.0/8}")),
]  # fmt: skip


@pytest.mark.parametrize(("value", "expected"), LISTS)
def test_encode_list(value, expected):
    assert REG.encode(value) == expected


def test_encode_params_shape():
    assert REG.encode_params([]) == ((), (), [])
    assert REG.encode_params([42, "x", None, b"\x01"]) == (
        (oids.INT4, 0, 0, oids.BYTEA),
        (0, 0, 0, 1),
        [b"42", b"x", None, b"\x01"],
    )
    assert REG.encode_params((1.5,))[0] == (oids.FLOAT8,)


def test_str_with_nul_is_refused():
    with pytest.raises(InterfaceError, match="NUL"):
        REG.encode("a\x00b")
    with pytest.raises(InterfaceError, match="NUL"):
        REG.encode_params(["ok", ["a\x00b"]])


@pytest.mark.parametrize(
    ("value", "message"),
    [({"a": 1}, "dict; wrap it in pgmux.types.Json"), ((1, 2), "tuple; pass a list"),
     (object(), "object"), ({1}, "set"), (1j, "complex")],
)  # fmt: skip
def test_unencodable_value_names_its_type(value, message):
    with pytest.raises(InterfaceError, match=f"Python type {message}"):
        REG.encode_params([value])
    with pytest.raises(InterfaceError, match="Python type"):
        REG.encode([value])


def test_subclasses_encode_through_their_base():
    class MyStr(str):
        pass

    class MyList(list):
        pass

    class MyDatetime(dt.datetime):
        pass

    assert REG.encode(MyStr("x")) == (0, 0, b"x")
    assert REG.encode(MyList([1, 2])) == (oids.INT4_ARRAY, 0, b"{1,2}")
    assert REG.encode(MyDatetime(2024, 1, 2)) == (oids.TIMESTAMP, 0, b"2024-01-02 00:00:00")
    assert REG.encode([MyStr("a")]) == (oids.TEXT_ARRAY, 0, b"{a}")


def test_quote_element():
    assert quote_element("plain") == "plain"
    assert quote_element("NuLl") == '"NuLl"'
    assert quote_element("") == '""'
    assert quote_element("a;b") == "a;b"
    assert quote_element("a;b", ";") == '"a;b"'
    assert quote_element("a,b", ";") == "a,b"  # box elements hold commas unquoted


# -- hypothesis round trips through the text formats ------------------------------------------

TEXTS = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
FINITE_DECIMALS = st.decimals(allow_nan=False, allow_infinity=False)
AWARE_DATETIMES = st.datetimes(
    min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30),
    timezones=st.integers(-15 * 3600, 15 * 3600).map(lambda s: dt.timezone(dt.timedelta(seconds=s))),
)  # fmt: skip
SCALAR_VALUES = st.one_of(
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    FINITE_DECIMALS,
    TEXTS,
    st.binary(),
    st.dates(),
    st.datetimes(),
    AWARE_DATETIMES,
    st.times(),
    st.timedeltas(),
    st.builds(Interval, st.integers(-(2**31), 2**31 - 1).filter(bool),
              st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63) + 1, 2**63 - 1)),
    st.uuids(),
    st.ip_addresses(),
)  # fmt: skip


def same(decoded, sent) -> bool:
    """Equal and of the same type; aware times keep their offset, timestamptz comes in UTC."""
    if isinstance(decoded, dt.datetime) and decoded.tzinfo is not None:
        return decoded == sent and decoded.tzinfo is UTC
    if isinstance(decoded, dt.time) and decoded.tzinfo is not None:
        return decoded == sent and decoded.utcoffset() == sent.utcoffset()
    return decoded == sent and type(decoded) is type(sent)


@given(SCALAR_VALUES)
def test_text_round_trip_scalars(value):
    oid, text = text_codecs_dump(value)
    decoded = REG.text_decoder(oid)(text.encode())
    if oid == oids.NUMERIC and type(value) is int:  # beyond int8 an int goes as numeric
        value = Decimal(value)
    assert same(decoded, value)


def text_codecs_dump(value):
    return REG._dumper(type(value))(value)


@given(st.floats())
def test_float_text_round_trip(value):
    oid, text = text_codecs_dump(value)
    decoded = REG.text_decoder(oid)(text.encode())
    assert decoded == value or (math.isnan(value) and math.isnan(decoded))


@given(st.lists(st.one_of(st.none(), TEXTS), max_size=8))
def test_text_array_round_trip(values):
    oid, fmt, data = REG.encode(values)
    assert REG.text_decoder(oid or oids.TEXT_ARRAY)(data) == values


@given(st.lists(st.lists(st.one_of(st.none(), st.integers()), min_size=2, max_size=2),
                min_size=1, max_size=4))  # fmt: skip
def test_nested_int_array_round_trip(rows):
    oid, fmt, data = REG.encode(rows)
    decoder = REG.text_decoder(oid or oids.INT4_ARRAY)
    assert decoder(data) == rows


@given(st.lists(st.one_of(st.none(), st.binary(max_size=6)), max_size=5))
def test_bytea_array_round_trip(values):
    oid, fmt, data = REG.encode(values)
    assert REG.text_decoder(oid or oids.BYTEA_ARRAY)(data) == values


# -- COPY --------------------------------------------------------------------------------------


def test_copy_row_escapes_and_nulls():
    row = [1, "a\tb\\c\nd\re", None, [1, None], b"\x00\xff", Json({"k": "v\n"}), True, ""]
    assert encode_copy_row(row, REG) == (
        b'1\ta\\tb\\\\c\\nd\\re\t\\N\t{1,NULL}\t\\\\x00ff\t{"k": "v\\\\n"}\tt\t\n'
    )


def test_copy_row_values_in_input_text():
    row = [AWARE, dt.timedelta(hours=-1), Decimal("NaN"), ["a b", "NULL"], "\\."]
    assert encode_copy_row(row) == (
        b'2024-01-02 03:04:05.500000+05:30\t-01:00:00.000000\tNaN\t{"a b","NULL"}\t\\\\.\n'
    )


def test_copy_row_refuses_nul_and_unknown_types():
    with pytest.raises(InterfaceError, match="NUL"):
        encode_copy_row(["a\x00"])
    with pytest.raises(InterfaceError, match="Python type dict"):
        encode_copy_row([{"a": 1}])


def test_copy_row_empty():
    assert encode_copy_row([]) == b"\n"


# -- registry extension ------------------------------------------------------------------------


class Point:
    def __init__(self, x: float, y: float) -> None:
        self.x, self.y = x, y

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)


def parse_point(data) -> Point:
    x, y = str(data, "ascii").strip("()").split(",")
    return Point(float(x), float(y))


def test_register_custom_type_by_oid_and_class():
    reg = default_registry.copy()
    reg.register(oids.POINT, text_decoder=parse_point, python_type=Point,
                 encoder=lambda p: f"({p.x},{p.y})")  # fmt: skip
    assert reg.text_decoder(oids.POINT)(b"(1,2.5)") == Point(1, 2.5)
    assert reg.text_decoder(oids.POINT_ARRAY)(b'{"(1,2)",NULL}') == [Point(1, 2), None]
    assert reg.encode(Point(1, 2)) == (oids.POINT, 0, b"(1,2)")
    assert reg.encode([Point(1, 2), None]) == (oids.POINT_ARRAY, 0, b'{"(1,2)",NULL}')
    assert encode_copy_row([Point(3, 4)], reg) == b"(3,4)\n"

    class SubPoint(Point):
        pass

    assert reg.encode(SubPoint(5, 6)) == (oids.POINT, 0, b"(5,6)")
    assert SubPoint in reg._params  # cached after the MRO walk
    # the default registry is untouched
    assert default_registry.text_decoder(oids.POINT)(b"(1,2)") == "(1,2)"
    with pytest.raises(InterfaceError):
        default_registry.encode(Point(1, 2))


def test_register_new_type_with_array_and_delimiter():
    reg = TypeRegistry()
    reg.register(90_001, text_decoder=lambda d: str(d, "ascii").upper(), array_oid=90_002,
                 delimiter=";")  # fmt: skip
    assert reg.text_decoder(90_002)(b"{a,b;c}") == ["A,B", "C"]
    assert reg.text_decoder(90_002)(b'{"x;y";NULL}') == ["X;Y", None]


def test_register_array_for_existing_element():
    reg = TypeRegistry()
    reg.register(90_010, text_decoder=int)
    reg.register_array(90_011, 90_010)
    assert reg.text_decoder(90_011)(b"{1,2}") == [1, 2]


def test_register_text_only_overrides_builtin_binary():
    reg = TypeRegistry()
    reg.register(oids.INT4, text_decoder=lambda d: int(d) * 10)
    assert reg.result_format(oids.INT4) == 0
    assert reg.binary_decoder(oids.INT4) is None
    assert reg.result_format(oids.INT4_ARRAY) == 0
    assert reg.text_decoder(oids.INT4_ARRAY)(b"{1,2}") == [10, 20]
    assert default_registry.result_format(oids.INT4) == 1


def test_register_binary_decoder_asks_for_binary():
    reg = TypeRegistry()
    reg.register(oids.NUMERIC, binary_decoder=lambda d: "bin")
    assert reg.result_format(oids.NUMERIC) == 1
    assert reg.result_format(oids.NUMERIC_ARRAY) == 1
    assert reg.binary_decoder(oids.NUMERIC_ARRAY)(
        bytes.fromhex("0000000100000000000006a4000000010000000100000000")
    ) == ["bin"]


def test_register_encoder_refuses_nul_and_needs_both_halves():
    reg = TypeRegistry()
    reg.register(oids.POINT, python_type=Point, encoder=lambda p: "\x00")
    with pytest.raises(InterfaceError, match="NUL"):
        reg.encode(Point(1, 2))
    with pytest.raises(InterfaceError, match="together"):
        reg.register(oids.POINT, python_type=Point)


def test_register_overrides_builtin_encoder_and_clears_subclass_cache():
    reg = TypeRegistry()

    class MyInt(int):
        pass

    assert reg.encode(MyInt(1)) == (oids.INT4, 0, b"1")
    reg.register(oids.INT8, python_type=int, encoder=lambda v: str(int(v)))
    assert reg.encode(MyInt(1)) == (oids.INT8, 0, b"1")
    assert reg.encode(True) == (oids.BOOL, 0, b"t")  # bool keeps its own encoder


def test_copy_is_independent():
    first = TypeRegistry()
    second = first.copy()
    second.register(oids.INT4, text_decoder=lambda d: "mine")
    assert second.text_decoder(oids.INT4_ARRAY)(b"{1}") == ["mine"]
    assert first.text_decoder(oids.INT4_ARRAY)(b"{1}") == [1]
    assert second.copy().text_decoder(oids.INT4)(b"1") == "mine"


# -- layering ----------------------------------------------------------------------------------


def test_types_package_imports_only_stdlib_errors_and_itself():
    package = pathlib.Path(__file__).resolve().parents[2] / "pgmux" / "types"
    allowed_prefixes = ("pgmux.types", "pgmux.errors", "pgmux._native")
    forbidden = {"socket", "ssl", "gevent", "select", "threading", "selectors", "asyncio"}
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                if name.startswith("pgmux"):
                    assert name.startswith(allowed_prefixes), (path.name, name)
                assert name.split(".")[0] not in forbidden, (path.name, name)
