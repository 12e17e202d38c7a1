"""PostgreSQL's own types through the postgresql+pgmux dialect: ranges, multiranges, hstore,
str-based inet, a Numeric over a type it cannot convert."""

from __future__ import annotations

import datetime as dt
import ipaddress
import uuid
from decimal import Decimal

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql as pg_types
from sqlalchemy.dialects.postgresql import HSTORE, MultiRange, Range

import pgmux.dbapi


@pytest.fixture
def engine(pg):
    made = []

    def make(**options):
        url = sa.make_url(pg.dsn.replace("postgresql://", "postgresql+pgmux://", 1))
        eng = sa.create_engine(url.update_query_dict({
            "application_name": f"sa-types-{uuid.uuid4().hex[:8]}", "acquire_timeout": "10"}),
            **options)
        made.append(eng)
        return eng

    yield make
    for eng in made:
        eng.dispose()
    pgmux.dbapi.close_shared_clients()


@pytest.fixture
def table_name(pg):
    name = f"satypes_{uuid.uuid4().hex[:8]}"
    yield name
    pg.admin(f"DROP TABLE IF EXISTS {name}")


def test_ranges_and_multiranges_round_trip(engine, table_name):
    eng = engine()
    meta = sa.MetaData()
    table = sa.Table(table_name, meta, sa.Column("id", sa.Integer, primary_key=True),
                     sa.Column("ints", pg_types.INT8RANGE), sa.Column("nums", pg_types.NUMRANGE),
                     sa.Column("days", pg_types.DATEMULTIRANGE),
                     sa.Column("at", pg_types.TSTZRANGE))
    utc = dt.timezone.utc
    row = {"id": 1, "ints": Range(1, 2**40), "nums": Range(Decimal("1.5"), None, bounds="[]"),
           "days": MultiRange([Range(dt.date(2020, 1, 1), dt.date(2020, 1, 3))]),
           "at": Range(dt.datetime(2020, 1, 1, tzinfo=utc), dt.datetime(2020, 1, 2, tzinfo=utc))}
    with eng.begin() as conn:
        meta.create_all(conn)
        conn.execute(table.insert(), [row, {"id": 2, "ints": "[5,10)", "nums": Range(empty=True),
                                            "days": MultiRange(), "at": None}])
        found = conn.execute(sa.select(table).order_by(table.c.id)).mappings().all()
        hit = conn.scalar(sa.select(table.c.id).where(table.c.ints.contains(2**39)))
    assert dict(found[0]) == {**row, "nums": Range(Decimal("1.5"), None, bounds="[)")}
    assert isinstance(found[0]["ints"], Range) and isinstance(found[0]["days"], MultiRange)
    assert found[1]["ints"] == Range(5, 10) and found[1]["nums"] == Range(empty=True)
    assert found[1]["days"] == MultiRange() and hit == 1


def test_hstore_native_and_text(engine, pg, table_name):
    pg.admin("CREATE EXTENSION IF NOT EXISTS hstore")
    value = {"k": "v", "none": None, 'q"\\': "x, y"}
    meta = sa.MetaData()
    table = sa.Table(table_name, meta, sa.Column("h", HSTORE), sa.Column("hs", sa.ARRAY(HSTORE)))
    with engine().begin() as conn:  # hstore is looked up when the engine connects
        meta.create_all(conn)
        conn.execute(table.insert(), {"h": value, "hs": [value, {}]})
        assert conn.execute(sa.select(table.c.h, table.c.hs)).one() == (value, [value, {}])
        assert conn.scalar(sa.select(table.c.h["k"])) == "v"
    with engine(use_native_hstore=False).begin() as conn:  # SQLAlchemy's text both ways
        conn.execute(table.insert(), {"h": {"a": "b"}, "hs": None})
        assert conn.scalars(sa.select(table.c.h).where(table.c.hs.is_(None))).one() == {
            "a": "b"}


def test_inet_as_str_with_native_inet_types_false(engine, table_name):
    meta = sa.MetaData()
    table = sa.Table(table_name, meta, sa.Column("a", pg_types.INET),
                     sa.Column("n", pg_types.CIDR), sa.Column("ns", sa.ARRAY(pg_types.CIDR)))
    row = {"a": "192.168.1.1", "n": "10.0.0.0/8", "ns": ["::ffff:1.2.3.0/120"]}
    with engine(native_inet_types=False).begin() as conn:
        meta.create_all(conn)
        conn.execute(table.insert(), row)
        assert conn.execute(sa.select(table)).one() == ("192.168.1.1", "10.0.0.0/8",
                                                        ["::ffff:1.2.3.0/120"])
    with engine().connect() as conn:  # the default engine's client is another one
        assert conn.execute(sa.select(table)).one() == (
            ipaddress.ip_address("192.168.1.1"), ipaddress.ip_network("10.0.0.0/8"),
            [ipaddress.ip_network("::ffff:1.2.3.0/120")])


def test_numeric_over_a_type_it_cannot_convert_raises(engine):
    stmt = sa.text("select cast('hi' as char) as hi").columns(hi=sa.Numeric)
    with engine().connect() as conn, pytest.raises(sa_exc.InvalidRequestError, match="numeric"):
        conn.execute(stmt)
