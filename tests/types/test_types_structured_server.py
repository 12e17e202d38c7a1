"""Ranges, multiranges, composites and hstore through a real server: the same value from
its text and from its binary form, and parameters that arrive as the value they were.

Types the server defines at run time (user ranges, composites, hstore) are taught to the
registry with the pg_type lookup pgmux makes for a type it meets (``introspect``).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import namedtuple
from decimal import Decimal

import pytest
from support.rawquery import raw_connection

from pgmux.types import Hstore, Multirange, Range, TypeRegistry
from pgmux.types.introspect import lookup_sql, parse_lookup

UTC = dt.timezone.utc
SUFFIX = uuid.uuid4().hex[:8]
PAIR, NEST, FLOATRANGE = f"pair_{SUFFIX}", f"nest_{SUFFIX}", f"floatrange_{SUFFIX}"


@pytest.fixture(scope="module")
def schema(pg):
    pg.admin(f"CREATE TYPE {PAIR} AS (n int, s text); "
             f"CREATE TYPE {NEST} AS (p {PAIR}, ps {PAIR}[], d date, at timestamptz); "
             f"CREATE TYPE {FLOATRANGE} AS RANGE (subtype = float8, subtype_diff = float8mi); "
             "CREATE EXTENSION IF NOT EXISTS hstore")
    yield
    pg.admin(f"DROP TYPE {NEST}, {PAIR}, {FLOATRANGE}")


@pytest.fixture
def raw(pg, schema):
    with raw_connection(pg) as conn:
        yield conn


def learned(raw, *names: str) -> TypeRegistry:
    """A registry that looked these types up (and what they are built from)."""
    registry = TypeRegistry()
    oids = [int(raw.query(f"SELECT '{name}'::regtype::oid").rows[0][0]) for name in names]
    rows = raw.query(lookup_sql(oids)).decoded(registry.text_decoder)
    registry.learn(parse_lookup(rows), oids)
    return registry


def both_formats(raw, registry: TypeRegistry, sql: str):
    """The value of ``sql``'s one column from its text and from its binary form."""
    values = []
    for result_format in (0, 1):
        found = raw.query(sql, result_format=result_format)
        decode = (registry.binary_decoder if result_format else registry.text_decoder)(
            found.type_oids[0])
        assert decode is not None, sql
        values.append(decode(found.rows[0][0]))
    return values


BUILTIN = [
    ("int4range(1, 10)", Range(1, 10)),
    ("int4range(1, 10, '[]')", Range(1, 11)),  # canonical form of a discrete range
    ("'empty'::int8range", Range(empty=True)),
    ("int8range(NULL, 5)", Range(None, 5, "()")),
    ("numrange(1.5, NULL, '(]')", Range(Decimal("1.5"), None, "()")),
    ("daterange('2020-01-01', '2020-02-01')", Range(dt.date(2020, 1, 1), dt.date(2020, 2, 1))),
    ("tsrange('2020-01-01 10:00', 'infinity')",
     Range(dt.datetime(2020, 1, 1, 10), dt.datetime.max)),
    ("tstzrange('2020-01-01 10:00+02', '2020-01-02')",
     Range(dt.datetime(2020, 1, 1, 8, tzinfo=UTC), dt.datetime(2020, 1, 1, 23, tzinfo=UTC))),
    ("'{[1,3), [5,7)}'::int4multirange", Multirange([Range(1, 3), Range(5, 7)])),
    ("'{}'::datemultirange", Multirange()),
    ("ARRAY[int4range(1, 2), 'empty', NULL]", [Range(1, 2), Range(empty=True), None]),
    ("ARRAY['{[1,2)}'::nummultirange]", [[Range(Decimal(1), Decimal(2))]]),
]


@pytest.mark.parametrize(("literal", "expected"), BUILTIN)
def test_builtin_ranges_in_text_and_binary(pg, literal, expected):
    with raw_connection(pg, options="-c TimeZone=Europe/Paris") as conn:
        text_value, binary_value = both_formats(conn, TypeRegistry(), f"SELECT {literal}")
    assert text_value == expected and binary_value == expected


def test_user_range_and_multirange(raw):
    registry = learned(raw, FLOATRANGE)
    assert both_formats(raw, registry, f"SELECT {FLOATRANGE}(1.5, 2.5)") == [Range(1.5, 2.5)] * 2
    multi = f"SELECT '{{[1,2), [3,4]}}'::{FLOATRANGE.replace('range', 'multirange')}"
    assert both_formats(raw, learned(raw, FLOATRANGE.replace("range", "multirange")), multi) == [
        [Range(1.0, 2.0), Range(3.0, 4.0, "[]")]] * 2


def test_composites_nested_and_in_arrays(raw):
    registry = learned(raw, NEST)
    sql = (f"SELECT ROW(ROW(1, 'a \"b\" c')::{PAIR}, ARRAY[ROW(2, NULL)::{PAIR}, NULL], "
           f"'2020-01-02', '2020-01-01 12:00+01')::{NEST}")
    expected = ((1, 'a "b" c'), [(2, None), None], dt.date(2020, 1, 2),
                dt.datetime(2020, 1, 1, 11, tzinfo=UTC))
    assert both_formats(raw, registry, sql) == [expected, expected]
    rows = f"SELECT ARRAY[ROW(1, '')::{PAIR}, ROW(NULL, ',()\\')::{PAIR}]"
    assert both_formats(raw, registry, rows) == [[(1, ""), (None, ",()\\")]] * 2


def test_hstore_and_its_arrays(raw):
    registry = learned(raw, "hstore")  # and its array type with it
    value = {"a": "1", "b c": None, 'q"\\': "é, =>"}
    sql = "SELECT hstore(ARRAY['a', 'b c', 'q\"\\'], ARRAY['1', NULL, 'é, =>'])"
    assert both_formats(raw, registry, sql) == [value, value]
    arrays = "SELECT ARRAY['a=>1'::hstore, '', NULL]"
    assert both_formats(raw, registry, arrays) == [[{"a": "1"}, {}, None]] * 2


# -- through the client ------------------------------------------------------------------


def learn(db, *names: str) -> None:
    oids = [db.fetchval(f"SELECT '{name}'::regtype::oid") for name in names]
    db.types.learn(parse_lookup(db.query(lookup_sql(oids)).rows), oids)


def test_range_parameters_arrive_as_they_were(clients, schema):
    db = clients()
    table = f"ranges_{uuid.uuid4().hex[:8]}"
    with db.transaction() as tx:
        tx.execute(f"CREATE TABLE {table} (small int4range, big int8range, "
                   "money numrange, days datemultirange)")
        for _ in range(2):  # described, then prepared
            tx.execute(f"INSERT INTO {table} VALUES ($1, $2, $3, $4)", [
                Range(1, 5), Range(-(2**40), None), Range(Decimal("0.5"), Decimal("1.5"), "[]"),
                Multirange([Range(dt.date(2020, 1, 1), dt.date(2020, 1, 5))])])
        row = tx.fetchone(f"SELECT * FROM {table} LIMIT 1")
        assert row == (Range(1, 5), Range(-(2**40), None),
                       Range(Decimal("0.5"), Decimal("1.5"), "[]"),
                       [Range(dt.date(2020, 1, 1), dt.date(2020, 1, 5))])
        assert tx.fetchval(f"SELECT count(*) FROM {table} WHERE big @> $1::bigint", [2**30]) == 2
        tx.execute(f"DROP TABLE {table}")
    for value in (Range(dt.datetime(2020, 1, 1), None),
                  Range(None, dt.datetime(2020, 1, 1, tzinfo=UTC), "(]")):
        assert db.fetchval("SELECT $1", [value]) == value
    assert db.fetchval("SELECT $1::int4range", [Range(empty=True)]) == Range(empty=True)


def test_composite_parameters_and_registered_class(clients, schema):
    db = clients()
    Pair = namedtuple("Pair", "n s")
    db.types.register_composite(PAIR, Pair)
    learn(db, PAIR)
    table = f"pairs_{uuid.uuid4().hex[:8]}"
    with db.transaction() as tx:
        tx.execute(f"CREATE TABLE {table} (p {PAIR}, ps {PAIR}[])")
        tx.execute(f"INSERT INTO {table} VALUES ($1, $2)",
                   [Pair(1, "x, (y)"), [Pair(2, None), Pair(None, "")]])
        row = tx.fetchone(f"SELECT p, ps FROM {table}")
        tx.execute(f"DROP TABLE {table}")
    assert row == (Pair(1, "x, (y)"), [Pair(2, None), Pair(None, "")])
    assert type(row[0]) is Pair and type(row[1][0]) is Pair


def test_hstore_parameters(clients, schema):
    db = clients()
    learn(db, "hstore")
    value = {"k": "v", "empty": "", "null": None, "quote\"": "back\\slash"}
    for _ in range(2):
        assert db.fetchval("SELECT $1::hstore", [Hstore(value)]) == value
        assert db.fetchval("SELECT $1::hstore[]", [[Hstore(value), None]]) == [value, None]
    assert db.fetchval("SELECT $1::hstore -> 'k'", [Hstore(value)]) == "v"
