"""The postgresql+pgmux dialect: multiplexed AUTOCOMMIT, pinned transactions, the pool;
PostgreSQL's own types (ranges, multiranges, hstore, str-based inet) through it."""

from __future__ import annotations

import datetime as dt
import ipaddress
import uuid
from decimal import Decimal

import gevent
import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql as pg_types
from sqlalchemy.dialects.postgresql import HSTORE, MultiRange, Range
from support.mux import wait_until

import pgmux.dbapi
from pgmux.contrib.sqlalchemy import HandlePool, PGDialect_pgmux


@pytest.fixture
def engine(pg):
    made = []

    def make(**options):
        query = {"application_name": f"sa-{uuid.uuid4().hex[:10]}", "acquire_timeout": "10"}
        query.update(options.pop("query", {}))
        url = sa.make_url(pg.dsn.replace("postgresql://", "postgresql+pgmux://", 1))
        eng = sa.create_engine(url.update_query_dict(query), **options)
        made.append(eng)
        return eng

    yield make
    for eng in made:
        eng.dispose()
    pgmux.dbapi.close_shared_clients()


def _client(conn):
    return conn.connection.dbapi_connection.client


def test_entry_point_and_pool(engine):
    eng = engine()
    assert isinstance(eng.dialect, PGDialect_pgmux)
    assert eng.dialect.supports_statement_cache is True
    assert isinstance(eng.pool, HandlePool)


def test_url_query_becomes_client_options(engine):
    eng = engine(query={"pinned_size": "3", "pipeline_size": "2"})
    with eng.connect() as conn:
        client = _client(conn)
        assert (client.pinned_size, client.pipeline_size) == (3, 2)


def test_autocommit_is_multiplexed_and_transactions_pin_when_they_must(engine):
    eng = engine()
    with eng.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        assert conn.execute(sa.select(sa.literal(41) + 1)).scalar() == 42
        assert _client(conn).stats()["pinned"]["active"] == 0
    with eng.begin() as conn:
        client = _client(conn)
        conn.execute(sa.text("SELECT 1"))  # a plain read: multiplexed
        assert client.stats()["pinned"]["active"] == 0
        conn.execute(sa.text("SELECT txid_current()"))  # needs the transaction
        assert client.stats()["pinned"]["active"] == 1
    assert client.stats()["pinned"]["active"] == 0


def test_many_greenlets_share_few_server_connections(engine, pg):
    eng = engine(query={"pipeline_size": "2", "pinned_size": "2"}).execution_options(
        isolation_level="AUTOCOMMIT")
    name = eng.url.query["application_name"]
    stmt = sa.select(sa.func.pg_sleep(0.05), sa.literal(1))

    def work():
        with eng.connect() as conn:
            return conn.execute(stmt).all()

    work()  # SQLAlchemy's first connect holds a threading lock: unpatched, let one go first
    jobs = [gevent.spawn(work) for _ in range(50)]
    wait_until(lambda: all(job.ready() for job in jobs), what="50 greenlets")
    assert [job.get() for job in jobs] == [[("", 1)]] * 50
    count = pg.admin(f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}'")
    assert int(count) <= 4


def test_isolation_readonly_deferrable(engine):
    eng = engine()
    opts = {"isolation_level": "SERIALIZABLE", "postgresql_readonly": True,
            "postgresql_deferrable": True}
    with eng.connect().execution_options(**opts) as conn:
        settings = conn.execute(sa.text(
            "SELECT current_setting('transaction_isolation'), "
            "current_setting('transaction_read_only'), "
            "current_setting('transaction_deferrable')")).one()
        assert tuple(settings) == ("serializable", "on", "on")
        assert conn.get_isolation_level() == "SERIALIZABLE"
        with pytest.raises(sa_exc.InternalError, match="read-only transaction"):
            conn.execute(sa.text("CREATE TEMP TABLE ro (a int)"))
    assert eng.dialect.default_isolation_level == "READ COMMITTED"


def test_session_state_survives_transactions_on_one_connection(engine):
    eng = engine()
    with eng.connect() as conn:
        conn.execute(sa.text("SET search_path = pg_catalog, public"))
        conn.execute(sa.text("CREATE TEMP TABLE t (a int)"))
        conn.commit()
        conn.execute(sa.text("INSERT INTO t VALUES (1)"))
        conn.rollback()
        assert conn.execute(sa.text("SHOW search_path")).scalar() == "pg_catalog, public"
        assert conn.execute(sa.text("SELECT count(*) FROM t")).scalar() == 0


def test_pre_ping_and_a_lost_connection_are_handled(engine, pg):
    eng = engine(pool_pre_ping=True)
    with eng.connect() as conn:
        conn.execute(sa.text("SET application_name = 'doomed'"))  # sticks to its connection
        pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()
        conn.commit()
    pg.admin(f"SELECT pg_terminate_backend({pid})")
    with eng.connect() as conn:  # the ping finds the handle broken: a new one is made
        assert conn.execute(sa.text("SELECT 1")).scalar() == 1
    with eng.connect() as conn:
        conn.execute(sa.text("SET application_name = 'doomed2'"))
        pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()
        pg.admin(f"SELECT pg_terminate_backend({pid})")
        with pytest.raises(sa_exc.OperationalError) as caught:
            conn.execute(sa.text("SELECT 1"))
        assert caught.value.connection_invalidated


def test_server_side_cursor_streams(engine):
    eng = engine()
    with eng.connect() as conn:
        result = conn.execution_options(stream_results=True, max_row_buffer=10).execute(
            sa.text("SELECT g FROM generate_series(1, 1000) g"))
        assert result.cursor.name is not None
        assert sum(row[0] for row in result) == 500500


def test_executemany_and_insertmanyvalues_round_trip(engine):
    eng = engine()
    meta = sa.MetaData()
    table = sa.Table(f"im_{uuid.uuid4().hex[:8]}", meta,
                     sa.Column("id", sa.Integer, primary_key=True),
                     sa.Column("name", sa.String(20)),
                     sa.Column("data", sa.JSON), sa.Column("amount", sa.Numeric(10, 2)))
    meta.create_all(eng)
    try:
        with eng.begin() as conn:
            rows = [{"name": f"n{i}", "data": {"i": i}, "amount": f"{i}.50"} for i in range(30)]
            ids = conn.execute(table.insert().returning(table.c.id), rows).scalars().all()
            assert len(ids) == 30
            conn.execute(table.update().where(table.c.id == sa.bindparam("key"))
                         .values(name="x"), [{"key": i} for i in ids[:5]])
            got = conn.execute(sa.select(table).order_by(table.c.id)).all()
        assert [row.name for row in got[:6]] == ["x"] * 5 + ["n5"]
        assert got[7].data == {"i": 7} and str(got[7].amount) == "7.50"
    finally:
        meta.drop_all(eng)


def test_executemany_under_autocommit_is_one_atomic_unit(engine):
    eng = engine()
    meta = sa.MetaData()
    table = sa.Table(f"em_{uuid.uuid4().hex[:8]}", meta,
                     sa.Column("id", sa.Integer, primary_key=True),
                     sa.Column("n", sa.Integer, nullable=False))
    meta.create_all(eng)
    update = table.update().where(table.c.id == sa.bindparam("key")).values(
        n=sa.bindparam("value"))
    try:
        with eng.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(table.insert(), [{"id": i, "n": 0} for i in range(1, 11)])
            conn.execute(update, [{"key": 1, "value": 1}])  # its description, once
            client = _client(conn)

            def units() -> int:
                return sum(d["units"] for d in client.stats()["pipeline"]["drivers"])

            before = units()
            done = conn.execute(update, [{"key": i, "value": i} for i in range(1, 11)])
            assert done.rowcount == 10 and units() == before + 1  # ten UPDATEs, one unit
            assert client.stats()["pinned"]["active"] == 0
            with pytest.raises(sa_exc.IntegrityError):  # the last one fails: none applied
                conn.execute(update, [{"key": 1, "value": 100}, {"key": 2, "value": None}])
            assert conn.execute(sa.select(table.c.n).where(table.c.id == 1)).scalar() == 1
    finally:
        meta.drop_all(eng)


@pytest.mark.parametrize("hosts", ["host=H:P&host=H&host=H", "host=H,H&port=P,P",
                                   "host=H&host=H:P"])
def test_several_hosts_in_the_url(pg, hosts):
    url = sa.make_url(pg.dsn.replace("postgresql://", "postgresql+pgmux://", 1))
    query = hosts.replace("H", url.host).replace("P", str(url.port))
    several = f"postgresql+pgmux://{url.username}@/{url.database}?{query}&acquire_timeout=10"
    eng = sa.create_engine(several)
    try:
        with eng.connect() as conn:
            assert conn.exec_driver_sql("select 1").scalar() == 1
            client = _client(conn)
            assert len(client.conninfo.hosts) >= 2
    finally:
        eng.dispose()
        pgmux.dbapi.close_shared_clients()


def test_server_notices_go_to_sqlalchemys_postgresql_logger(engine, caplog):
    with caplog.at_level("INFO", logger="sqlalchemy.dialects.postgresql"), \
            engine().connect() as conn:
        conn.exec_driver_sql("DO $$ BEGIN RAISE NOTICE 'hello %%', 'there'; END $$")
    assert ("sqlalchemy.dialects.postgresql", 20, "NOTICE: hello there") in caplog.record_tuples


# -- PostgreSQL's own types ----------------------------------------------------------------


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
