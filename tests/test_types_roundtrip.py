"""Every supported type through real servers (15 and 18) on the multiplexed path.

Each case is checked three ways, each query run three times (the first execution
describes the statement and reads text; later ones use the registry's preferred result
formats, binary where it has a decoder), and all executions must agree exactly:

* parameter -> server -> result: ``SELECT $1::type`` gives the value back;
* server literal -> result: ``SELECT <literal>::type`` decodes to the value;
* parameter == literal on the server: the server received exactly that value.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from dataclasses import dataclass
from decimal import Decimal
from ipaddress import (
    IPv4Address,
    IPv4Interface,
    IPv4Network,
    IPv6Address,
    IPv6Interface,
    IPv6Network,
)
from typing import Any

import pytest
from support.mux import drivers
from support.values import assert_same, same

from pgmux.client import Client
from pgmux.errors import InterfaceError
from pgmux.types.text import Interval, Json

UTC = dt.timezone.utc
INF, NAN = math.inf, math.nan
SAME = object()  # the decoded value is the parameter itself
RUNS = 3  # executions per query: the first in text, the later ones in preferred formats


def tz(hours: int = 0, minutes: int = 0, seconds: int = 0) -> dt.timezone:
    return dt.timezone(dt.timedelta(hours=hours, minutes=minutes, seconds=seconds))


def quote(text: str) -> str:
    """An SQL string literal (standard_conforming_strings is on)."""
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True)
class Case:
    """A value of `type`, its input text `literal`, and what it decodes to."""

    type: str
    value: Any
    literal: str  # input text, quoted and cast by `sql_literal`
    expected: Any = SAME
    comparable: bool = True  # the type has an equality operator

    def decoded(self) -> Any:
        return self.value if self.expected is SAME else self.expected

    def sql_literal(self) -> str:
        return f"{quote(self.literal)}::{self.type}"

    def __str__(self) -> str:
        return f"{self.type}:{self.literal[:40]}"


SCALARS = [
    Case("bool", True, "t"),
    Case("bool", False, "f"),
    Case("int2", 32767, "32767"),
    Case("int2", -32768, "-32768"),
    Case("int4", 2**31 - 1, "2147483647"),
    Case("int4", -(2**31), "-2147483648"),
    Case("int8", 2**63 - 1, "9223372036854775807"),
    Case("int8", -(2**63), "-9223372036854775808"),
    Case("oid", 4294967295, "4294967295"),
    Case("oid", 0, "0"),
    Case("float4", 1.5, "1.5"),
    Case("float4", 0.1, "0.1"),  # float4 comes as text: 0.1, not 0.10000000149011612
    Case("float4", 3.4028234663852886e38, "3.4028235e+38", 3.4028235e38),
    Case("float4", INF, "Infinity"),
    Case("float4", -INF, "-Infinity"),
    Case("float4", NAN, "NaN"),
    Case("float8", 0.1, "0.1"),
    Case("float8", 1.7976931348623157e308, "1.7976931348623157e+308"),
    Case("float8", 5e-324, "5e-324"),
    Case("float8", -0.0, "-0"),
    Case("float8", INF, "Infinity"),
    Case("float8", -INF, "-Infinity"),
    Case("float8", NAN, "NaN"),
    Case("numeric", Decimal("123456789012345678901234567890.123456789"),
         "123456789012345678901234567890.123456789"),
    Case("numeric", Decimal("-0.000001"), "-0.000001"),
    Case("numeric", Decimal("1.50"), "1.50"),  # the scale survives
    Case("numeric", Decimal("NaN"), "NaN"),
    Case("numeric", Decimal("Infinity"), "Infinity"),
    Case("numeric", Decimal("-Infinity"), "-Infinity"),
    Case("numeric", Decimal("1" + "0" * 1000), "1" + "0" * 1000),
    Case("numeric", Decimal("1E-1000"), "1E-1000"),
    Case("numeric", 2**100, str(2**100), Decimal(2**100)),  # int beyond 64 bits
    Case("numeric", -(2**64), str(-(2**64)), Decimal(-(2**64))),
    Case("text", "héllo wörld ✓ 🎉👍🏽", "héllo wörld ✓ 🎉👍🏽"),
    Case("text", "it's \"quoted\" $1 -- not a comment", "it's \"quoted\" $1 -- not a comment"),
    Case("text", "C:\\path\\n\\x00 \\\\", "C:\\path\\n\\x00 \\\\"),
    Case("text", "\t\n\r\x01\x7f", "\t\n\r\x01\x7f"),
    Case("text", "", ""),
    Case("text", "x" * 100_000, "x" * 100_000),
    Case("varchar", "varchar ✓", "varchar ✓"),
    Case("bpchar", "ab  ", "ab  "),  # no typmod: trailing blanks are kept
    Case("name", "pg_catalog", "pg_catalog"),
    Case("name", "n" * 70, "n" * 70, "n" * 63),  # names are cut at 63 bytes
    Case("bytea", bytes(range(256)), "\\x" + bytes(range(256)).hex()),
    Case("bytea", b"", ""),
    Case("bytea", bytearray(b"\x00\xff"), "\\x00ff", b"\x00\xff"),
    Case("bytea", memoryview(b"\x00abc\\"), "\\x00616263" + "5c", b"\x00abc\\"),
    Case("date", dt.date(1, 1, 1), "0001-01-01"),
    Case("date", dt.date(9999, 12, 31), "9999-12-31"),
    Case("date", dt.date(2000, 2, 29), "2000-02-29"),
    Case("time", dt.time(0, 0), "00:00:00"),
    Case("time", dt.time(23, 59, 59, 999999), "23:59:59.999999"),
    Case("timetz", dt.time(12, 34, 56, 789, tz(5, 30)), "12:34:56.000789+05:30"),
    Case("timetz", dt.time(23, 59, 59, 999999, UTC), "23:59:59.999999+00"),
    Case("timetz", dt.time(0, 0, tzinfo=tz(-12)), "00:00:00-12"),
    Case("timestamp", dt.datetime(1, 1, 1), "0001-01-01 00:00:00"),
    Case("timestamp", dt.datetime(9999, 12, 31, 23, 59, 59, 999999), "9999-12-31 23:59:59.999999"),
    Case("timestamp", dt.datetime(2024, 2, 29, 12, 34, 56, 123456), "2024-02-29 12:34:56.123456"),
    Case("timestamptz", dt.datetime(2024, 2, 29, 12, 0, tzinfo=tz(5, 30)),
         "2024-02-29 12:00:00+05:30", dt.datetime(2024, 2, 29, 6, 30, tzinfo=UTC)),
    Case("timestamptz", dt.datetime(1, 1, 1, tzinfo=UTC), "0001-01-01 00:00:00+00"),
    Case("timestamptz", dt.datetime(9999, 12, 31, 23, 59, 59, 999999, UTC),
         "9999-12-31 23:59:59.999999+00"),
    Case("interval", dt.timedelta(days=1, seconds=3723, microseconds=4),
         "1 day 01:02:03.000004"),
    Case("interval", -dt.timedelta(hours=1), "-01:00:00"),
    Case("interval", dt.timedelta(days=-3, microseconds=5), "-3 days +00:00:00.000005"),
    Case("interval", dt.timedelta(0), "00:00:00"),
    Case("interval", dt.timedelta(days=999999999, seconds=86399, microseconds=999999),
         "999999999 days 23:59:59.999999"),
    Case("interval", Interval(14, 3, 4_005_006), "1 year 2 mons 3 days 00:00:04.005006"),
    Case("interval", Interval(-1, 0, 0), "-1 mons"),
    Case("uuid", uuid.UUID("12345678-1234-5678-1234-567812345678"),
         "12345678-1234-5678-1234-567812345678"),
    Case("uuid", uuid.UUID(int=0), "00000000-0000-0000-0000-000000000000"),
    Case("uuid", uuid.UUID(int=2**128 - 1), "ffffffff-ffff-ffff-ffff-ffffffffffff"),
    Case("jsonb", Json({"a": [1, 2, {"b": None}], "c": "é\"\\'", "d": 1.5, "e": True}),
         '{"a": [1, 2, {"b": null}], "c": "é\\"\\\\\'", "d": 1.5, "e": true}',
         {"a": [1, 2, {"b": None}], "c": "é\"\\'", "d": 1.5, "e": True}),
    Case("jsonb", Json(nested := [[[[[[[[[[{"deep": ["🎉"]}]]]]]]]]]]),
         '[[[[[[[[[[{"deep": ["🎉"]}]]]]]]]]]]', nested),
    Case("jsonb", Json("just a string"), '"just a string"', "just a string"),
    Case("jsonb", Json(None), "null", None),  # JSON null decodes to None, like SQL NULL
    Case("json", Json({"k": [1, "two", None]}), '{"k": [1, "two", null]}',
         {"k": [1, "two", None]}, comparable=False),
    Case("inet", IPv4Address("192.168.0.1"), "192.168.0.1"),
    Case("inet", IPv6Address("2001:db8::1"), "2001:db8::1"),
    Case("inet", IPv4Interface("10.1.2.3/8"), "10.1.2.3/8"),
    Case("inet", IPv6Interface("2001:db8::1/64"), "2001:db8::1/64"),
    Case("inet", IPv4Interface("10.0.0.1/32"), "10.0.0.1/32", IPv4Address("10.0.0.1")),
    Case("cidr", IPv4Network("10.0.0.0/8"), "10.0.0.0/8"),
    Case("cidr", IPv6Network("2001:db8::/32"), "2001:db8::/32"),
    Case("cidr", IPv4Network("192.168.1.5/32"), "192.168.1.5/32"),
]

# Server values Python cannot hold, and types without a decoder: (literal SQL, decoded value).
# Documented in pgmux.types.text: infinities map to the extremes, the rest to the server text.
DECODE_ONLY = [
    ("'infinity'::date", dt.date.max),
    ("'-infinity'::date", dt.date.min),
    ("'0001-01-01 BC'::date", "0001-01-01 BC"),
    ("'10000-01-01'::date", "10000-01-01"),
    ("'24:00:00'::time", "24:00:00"),
    ("'infinity'::timestamp", dt.datetime.max),
    ("'-infinity'::timestamp", dt.datetime.min),
    ("'0044-03-15 12:00:00 BC'::timestamp", "0044-03-15 12:00:00 BC"),
    ("'infinity'::timestamptz", dt.datetime.max.replace(tzinfo=UTC)),
    ("'-infinity'::timestamptz", dt.datetime.min.replace(tzinfo=UTC)),
    ("'4713-01-01 00:00:00+00 BC'::timestamptz", "4713-01-01 00:00:00+00 BC"),
    ("'178000000 years'::interval", Interval(2_136_000_000, 0, 0)),
    ("'-178000000 years'::interval", Interval(-2_136_000_000, 0, 0)),
    ("'(1,2)'::point", "(1,2)"),
    ("'a:1 b:2'::tsvector", "'a':1 'b':2"),
    ("'{\"(1,2)\",NULL}'::point[]", ["(1,2)", None]),
    ("'{(3,4),(1,2);NULL}'::box[]", ["(3,4),(1,2)", None]),  # box arrays use ';'
    ("'[0:1]={1,2}'::int4[]", [1, 2]),  # lower bounds are dropped
    ("'{}'::int4[]", []),
    ("'{{1,2},{3,NULL}}'::int4[]", [[1, 2], [3, None]]),
    ("'{{{\"a b\"}}}'::text[]", [[["a b"]]]),
    ("'{ 1 , 2 }'::int4[]", [1, 2]),
]

TEXT_TRAPS = ["", "NULL", "null", "Null", 'a"b', "a\\b", "{}", "{", "}", "a,b", " lead",
              "trail ", "x y", "\t", "\n", "é🎉", "'", "$1", "--", "\\\"", "NULLx", None]
TYPES = sorted({case.type for case in SCALARS})


def fetch_all_runs(db: Client, sql: str, params: list | tuple = ()) -> Any:
    """fetchval RUNS times; every execution must give the same value. Returns it."""
    values = [db.fetchval(sql, params) for _ in range(RUNS)]
    for later in values[1:]:
        assert same(later, values[0]), f"{sql}: first {values[0]!r}, later {later!r}"
    return values[0]


# -- servers -------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["pg", "pg18"])
def db(request):
    """A one-connection client (so later executions surely hit the cached statement)."""
    server = request.getfixturevalue(request.param)
    client = Client(server.dsn, pipeline_size=1, pinned_size=1, options="-c TimeZone=UTC")
    yield client
    client.close()


# -- scalars -------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", SCALARS, ids=str)
def test_parameter_round_trip(db, case):
    assert_same(fetch_all_runs(db, f"SELECT $1::{case.type}", [case.value]), case.decoded())


@pytest.mark.parametrize("case", SCALARS, ids=str)
def test_server_literal_decodes(db, case):
    assert_same(fetch_all_runs(db, f"SELECT {case.sql_literal()}"), case.decoded())


@pytest.mark.parametrize("case", SCALARS, ids=str)
def test_server_receives_exactly_the_value(db, case):
    compare_as = case.type if case.comparable else "jsonb"
    sql = (f"SELECT $1::{case.type}::{compare_as} IS NOT DISTINCT FROM "
           f"{case.sql_literal()}::{compare_as}")
    assert fetch_all_runs(db, sql, [case.value]) is True


@pytest.mark.parametrize(("literal", "expected"), DECODE_ONLY, ids=[d[0] for d in DECODE_ONLY])
def test_documented_decoding_of_values_python_cannot_hold(db, literal, expected):
    assert_same(fetch_all_runs(db, f"SELECT {literal}"), expected)


@pytest.mark.parametrize("type_name", TYPES)
def test_nulls(db, type_name):
    assert fetch_all_runs(db, f"SELECT $1::{type_name}", [None]) is None
    assert fetch_all_runs(db, f"SELECT NULL::{type_name}") is None
    assert fetch_all_runs(db, f"SELECT $1::{type_name}[]", [None]) is None


def test_python_extremes_map_one_way(db):
    """date.max is sent as 9999-12-31, not infinity; the string "infinity" is."""
    assert fetch_all_runs(db, "SELECT $1::date = 'infinity'::date", [dt.date.max]) is False
    assert fetch_all_runs(db, "SELECT $1::date", ["infinity"]) == dt.date.max


def test_nul_in_text_is_refused_client_side(db):
    with pytest.raises(InterfaceError, match="NUL"):
        db.fetchval("SELECT $1::text", ["a\x00b"])
    with pytest.raises(InterfaceError, match="NUL"):
        db.fetchval("SELECT $1::text[]", [["ok", "a\x00b"]])
    assert db.fetchval("SELECT $1::text", ["still fine"]) == "still fine"


# -- arrays --------------------------------------------------------------------------------------


def array_cases() -> list[tuple[str, list, str, list]]:
    """Per type: [first, NULL, second] (the type's first two cases) and its ARRAY[] literal."""
    found = []
    for type_name in TYPES:
        cases = [case for case in SCALARS if case.type == type_name][:2]
        value = [cases[0].value, None, cases[-1].value]
        literal = f"ARRAY[{cases[0].sql_literal()}, NULL, {cases[-1].sql_literal()}]"
        found.append((type_name, value, literal, [cases[0].decoded(), None,
                                                  cases[-1].decoded()]))
    return found


ARRAYS = array_cases()


@pytest.mark.parametrize(("type_name", "value", "literal", "expected"), ARRAYS,
                         ids=[a[0] for a in ARRAYS])
def test_array_round_trip(db, type_name, value, literal, expected):
    sql_type = f"{type_name}[]"
    assert_same(fetch_all_runs(db, f"SELECT $1::{sql_type}", [value]), expected)
    assert_same(fetch_all_runs(db, f"SELECT {literal}::{sql_type}"), expected)
    if type_name != "json":  # json has no equality operator
        sql = f"SELECT $1::{sql_type} IS NOT DISTINCT FROM {literal}::{sql_type}"
        assert fetch_all_runs(db, sql, [value]) is True


def array_literal(items: list) -> str:
    """ARRAY[...] of text literals (nested lists nest), so no array text syntax is involved."""
    parts = ["NULL" if item is None else array_literal(item) if isinstance(item, list)
             else quote(item) for item in items]
    return f"ARRAY[{', '.join(parts)}]"


SPECIAL_ARRAYS = [
    ("text traps", "text[]", TEXT_TRAPS, f"{array_literal(TEXT_TRAPS)}::text[]"),
    ("nested text traps", "text[]", [TEXT_TRAPS[:5], TEXT_TRAPS[5:10]],
     f"{array_literal([TEXT_TRAPS[:5], TEXT_TRAPS[5:10]])}::text[]"),
    ("varchar traps", "varchar[]", TEXT_TRAPS, f"{array_literal(TEXT_TRAPS)}::varchar[]"),
    ("empty int4", "int4[]", [], "'{}'::int4[]"),
    ("empty text", "text[]", [], "'{}'::text[]"),
    ("all NULL", "int4[]", [None, None], "ARRAY[NULL, NULL]::int4[]"),
    ("2-D int4", "int4[]", [[1, 2], [3, None]], "ARRAY[[1, 2], [3, NULL]]"),
    ("3-D int8", "int8[]", [[[2**63 - 1]], [[-(2**63)]]],
     "ARRAY[[[9223372036854775807]], [[-9223372036854775808]]]::int8[]"),
    ("bytea all bytes", "bytea[]", [bytes(range(256)), b"", None, b"\\\"{},"],
     "ARRAY['\\x" + bytes(range(256)).hex() + "'::bytea, ''::bytea, NULL, '\\x5c227b7d2c'::bytea]"),
    ("float8 specials", "float8[]", [NAN, INF, -INF, -0.0, None],
     "ARRAY['NaN', 'Infinity', '-Infinity', '-0', NULL]::float8[]"),
    ("numeric specials", "numeric[]", [Decimal("NaN"), Decimal("1.50"), Decimal("-Infinity")],
     "ARRAY['NaN', '1.50', '-Infinity']::numeric[]"),
    ("jsonb", "jsonb[]", [Json({"a": "{,}"}), Json([None]), None],
     """ARRAY['{"a": "{,}"}', '[null]', NULL]::jsonb[]"""),
]


@pytest.mark.parametrize(("name", "sql_type", "value", "literal"), SPECIAL_ARRAYS,
                         ids=[a[0] for a in SPECIAL_ARRAYS])
def test_special_arrays(db, name, sql_type, value, literal):
    expected = _unwrap_json(value)
    assert_same(fetch_all_runs(db, f"SELECT $1::{sql_type}", [value]), expected)
    assert_same(fetch_all_runs(db, f"SELECT {literal}"), expected)
    sql = f"SELECT $1::{sql_type} IS NOT DISTINCT FROM {literal}"
    assert fetch_all_runs(db, sql, [value]) is True


def _unwrap_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_unwrap_json(item) for item in value]
    return value.value if isinstance(value, Json) else value


# -- result formats ------------------------------------------------------------------------------

BINARY_RESULT_TYPES = ["bool", "int2", "int4", "int8", "oid", "float4", "float8", "bytea",
                       "uuid", "text", "varchar", "name", "json", "jsonb", "date", "time",
                       "timetz", "timestamp", "timestamptz", "interval", "inet", "cidr",
                       "int4[]", "bytea[]", "uuid[]", "text[]", "timestamptz[]", "jsonb[]"]


def statement_formats(db: Client, sql: str, params: list) -> tuple[int, ...]:
    """The result formats the cached statement asks for now (white box)."""
    oids = db.types.encode_params(params)[0]
    (driver,) = drivers(db)
    statement = driver.engine.statements.get((sql, oids))
    assert statement is not None, "the statement is not cached"
    return statement.result_formats


@pytest.mark.parametrize("type_name", BINARY_RESULT_TYPES)
def test_later_executions_read_binary(db, type_name):
    """The cached statement switches to binary results, so the runs above compared
    text-decoded values with binary-decoded ones."""
    sql = f"SELECT $1::{type_name}"
    db.fetchval(sql, [None])
    assert statement_formats(db, sql, [None]) == (1,)


def test_text_types_stay_text(db):
    """numeric (text is exact and cheaper to decode) and types without a binary decoder."""
    sql = "SELECT $1::numeric, $2::numeric[], '(1,2)'::point"
    params = [Decimal("1.50"), [Decimal("2.5")]]
    first = db.fetchone(sql, params)
    assert statement_formats(db, sql, params) == ()
    assert db.fetchone(sql, params) == first


def test_many_columns_mixed_formats(db):
    """One row, every scalar case a column: text and binary columns side by side."""
    casts = ", ".join(f"${i}::{case.type}" for i, case in enumerate(SCALARS, 1))
    expected = [case.decoded() for case in SCALARS]
    for _ in range(RUNS):
        row = db.fetchone(f"SELECT {casts}", [case.value for case in SCALARS])
        assert_same(list(row), expected)


# -- time zones ----------------------------------------------------------------------------------

ZONES = ["UTC", "Asia/Kolkata", "America/St_Johns", "Pacific/Chatham", "Europe/Paris"]
INSTANTS = [
    dt.datetime(2024, 1, 15, 12, 0, tzinfo=UTC),
    dt.datetime(2024, 7, 15, 12, 0, 0, 123456, tzinfo=UTC),
    dt.datetime(1900, 6, 1, 12, 0, tzinfo=UTC),  # local mean time: offsets with seconds
]


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("server_name", ["pg", "pg18"])
def test_timestamptz_in_session_time_zones(request, server_name, zone):
    """The same instant back, in UTC, whatever offset the session's zone printed."""
    server = request.getfixturevalue(server_name)
    with Client(server.dsn, pipeline_size=1, pinned_size=0,
                options=f"-c TimeZone={zone}") as db:
        assert db.fetchval("SELECT current_setting('TimeZone')") == zone
        for instant in INSTANTS:
            value = fetch_all_runs(db, "SELECT $1::timestamptz", [instant])
            assert value == instant  # the same instant
            assert value.tzinfo is UTC
            printed = db.fetchval("SELECT $1::timestamptz::text", [instant])
            assert_same(db.fetchval(f"SELECT {quote(printed)}::timestamptz"), value)
        # Naive timestamps and timetz do not depend on the session's zone.
        naive = dt.datetime(2024, 3, 31, 2, 30)
        assert_same(fetch_all_runs(db, "SELECT $1::timestamp", [naive]), naive)
        clock = dt.time(1, 2, 3, tzinfo=tz(-3, -30))
        assert_same(fetch_all_runs(db, "SELECT $1::timetz", [clock]), clock)


def test_timestamptz_beyond_year_9999_in_a_zone_east_of_utc(pg):
    """datetime.max in UTC is year 10000 in Paris: still datetime.max, read in UTC."""
    with Client(pg.dsn, pipeline_size=1, pinned_size=0,
                options="-c TimeZone=Europe/Paris") as db:
        top = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, UTC)
        assert db.fetchval("SELECT $1::timestamptz::text", [top]) == \
            "10000-01-01 00:59:59.999999+01"
        assert_same(fetch_all_runs(db, "SELECT $1::timestamptz", [top]), top)
