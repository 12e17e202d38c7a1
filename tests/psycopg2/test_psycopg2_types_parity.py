"""Values through pgmux.psycopg2 as through psycopg2 itself, against the same server: each
built-in type's parameter gives the same result value, result type and ``cursor.query``
(the text psycopg2 sends), and each result column reads as psycopg2 reads it."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pytest

UTC = dt.timezone.utc
PARAMETERS = [
    None, True, False, 0, 1, -1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**70), 1.5, -1.5,
    1e100, 0.1, float("nan"), float("inf"), float("-inf"), decimal.Decimal("19.10"),
    decimal.Decimal("-0.001"), decimal.Decimal("NaN"), decimal.Decimal("Infinity"), "",
    "text", "o'clock", "back\\slash", "ünïcode ☃", b"", b"\x00\x01\xff", bytearray(b"ab"),
    memoryview(b"cd"), dt.date(2024, 5, 1), dt.date.max, dt.time(12, 30, 1, 5),
    dt.time(1, 2, 3, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    dt.datetime(2024, 5, 1, 12, 0, 0, 123456), dt.datetime(2024, 5, 1, 12, tzinfo=UTC),
    dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=-5, minutes=-30))),
    dt.timedelta(days=3, seconds=7, microseconds=11), dt.timedelta(days=-1),
    [1, 2, 3], [], [None], [[1, 2], [3, 4]], ["a", None], [1.5, 2.5],
    [dt.date(2024, 1, 1)], (1, 2, 3),
]


def _result(conn, sql, params):
    cur = conn.cursor()
    cur.execute(sql, params)
    row = cur.fetchone()
    return row, [column.type_code for column in cur.description], cur.query


def _same(mine, theirs):
    """Equal values of the same types (memoryviews by content; NaN equals NaN; ranges,
    whose classes are each module's own, by their repr)."""
    if type(theirs).__name__.endswith("Range"):
        return repr(mine) == repr(theirs)
    if isinstance(theirs, memoryview):
        return isinstance(mine, memoryview) and bytes(mine) == bytes(theirs)
    if isinstance(theirs, (list, tuple)):
        return (type(mine) is type(theirs) and len(mine) == len(theirs)
                and all(_same(a, b) for a, b in zip(mine, theirs, strict=True)))
    if theirs != theirs:  # NaN
        return mine != mine and type(mine) is type(theirs)
    return type(mine) is type(theirs) and mine == theirs


@pytest.mark.parametrize("value", PARAMETERS, ids=[repr(v)[:30] for v in PARAMETERS])
def test_a_parameter_reads_back_as_psycopg2_reads_it(connect, real, value):
    mine, theirs = connect(), real()
    sql = "SELECT %s"
    assert _result(mine, sql, (value,))[2] == _result(theirs, sql, (value,))[2]
    got, types, _ = _result(mine, sql, (value,))
    want, want_types, _ = _result(theirs, sql, (value,))
    assert types == want_types
    assert _same(got, want), (got, want)


RESULTS = [
    "1::int2, 2::int4, 3::int8, 1.5::float4, 1.1::float4, 2.5::float8, 1.50::numeric",
    "'x'::text, 'y'::varchar(3), 'z'::char(2), 'n'::name, 'c'::\"char\", 't'::bool",
    "'\\x00ff'::bytea, ''::bytea",
    "'2024-05-01'::date, 'infinity'::date, '-infinity'::date",
    "'2024-05-01 12:00:01.5'::timestamp, 'infinity'::timestamp",
    "'2024-05-01 12:00:01.5+05:30'::timestamptz, 'infinity'::timestamptz",
    "'12:30:01'::time, '12:30:01+02'::timetz",
    "'1 year 2 mons 3 days 04:05:06.7'::interval, '-1 day'::interval, '0'::interval",
    "'{\"a\": [1, 2]}'::json, '{\"b\": null}'::jsonb",
    "'127.0.0.1'::inet, '10.0.0.0/8'::cidr, '08:00:2b:01:02:03'::macaddr",
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, '$1.50'::money, 1::oid, '(1,2)'::point",
    "'{1,2,NULL}'::int[], '{a,b}'::text[], '{1.5}'::numeric[], '{t,f}'::bool[]",
    "'{2024-01-01}'::date[], '{\"2024-01-01 00:00+00\"}'::timestamptz[], '{}'::int[]",
    "'{1.1.1.1}'::inet[], '{{1,2},{3,4}}'::int[], '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}'::uuid[]",
    "int4range(1, 5), int8range(1, NULL), numrange(1.5, 2.5, '[]'), 'empty'::int4range",
    "daterange('2024-01-01', '2024-02-01'), tsrange('2024-01-01', NULL)",
    "tstzrange('2024-01-01 00:00+00', '2024-02-01 00:00+00'), ARRAY[int4range(1, 2)]",
    "ROW(1, 'a'), NULL::int, NULL::text[]",
]


@pytest.mark.parametrize("columns", RESULTS)
def test_a_result_column_reads_as_psycopg2_reads_it(connect, real, columns):
    sql = f"SELECT {columns}"
    got, types, _ = _result(connect(), sql, None)
    want, want_types, _ = _result(real(), sql, None)
    assert types == want_types
    assert len(got) == len(want)
    for mine, theirs in zip(got, want, strict=True):
        assert _same(mine, theirs), (mine, theirs)


def test_a_float_parameter_is_a_numeric_as_psycopg2s_literal(connect):
    cur = connect().cursor()
    cur.execute("SELECT %s, pg_typeof(%s)::text", (1.5, 1.5))
    assert cur.fetchone() == (decimal.Decimal("1.5"), "numeric")


def test_an_int_parameter_is_int4_int8_or_numeric_by_size(connect):
    cur = connect().cursor()
    cur.execute("SELECT pg_typeof(%s)::text, pg_typeof(%s)::text, pg_typeof(%s)::text",
                (1, 2**40, 2**70))
    assert cur.fetchone() == ("integer", "bigint", "numeric")


def test_a_str_parameter_takes_its_type_from_the_context(connect, real):
    sql = "SELECT %s + 1, %s::date, pg_typeof(%s)::text"
    params = ("41", "2024-05-01", "x")
    assert _result(connect(), sql, params)[0] == _result(real(), sql, params)[0] == (
        42, dt.date(2024, 5, 1), "unknown")


UNTYPED = [
    ("SELECT %s IS NULL, %s IS NOT NULL", ("x", None)),
    ("SELECT json_build_object(%s, %s)::text", ("k", "v")),
    ("SELECT concat(%s, %s), format(%s, %s)", ("a", None, "<%s>", "b")),
    ("SELECT count(*) FROM (SELECT 1) t WHERE (%(f)s IS NULL OR %(f)s = 'x')", {"f": None}),
    ("SELECT %s = %s", ("a", "a")),
]


@pytest.mark.parametrize(("sql", "params"), UNTYPED)
@pytest.mark.parametrize("autocommit", [True, False])
def test_an_untyped_value_where_the_server_cannot_type_a_parameter(connect, real, sql,
                                                                   params, autocommit):
    """A str or None where a parameter's type cannot be inferred reads as psycopg2's
    literal reads (text), in autocommit mode and in a transaction."""
    mine, theirs = connect(), real()
    mine.autocommit = theirs.autocommit = autocommit
    assert _result(mine, sql, params)[0] == _result(theirs, sql, params)[0]
    mine.commit()
    theirs.commit()


def test_uuid_and_hstore_like_values_need_their_registration_as_in_psycopg2(connect, real):
    value = uuid.uuid4()
    for conn in (connect(), real()):
        with pytest.raises(Exception, match="can't adapt type 'UUID'"):
            conn.cursor().execute("SELECT %s", (value,))
