"""The postgresql+pgmux dialect: multiplexed AUTOCOMMIT, pinned transactions, the pool."""

from __future__ import annotations

import uuid

import gevent
import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
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


def test_autocommit_is_multiplexed_and_transactions_are_pinned(engine):
    eng = engine()
    with eng.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        assert conn.execute(sa.select(sa.literal(41) + 1)).scalar() == 42
        assert _client(conn).stats()["pinned"]["active"] == 0
    with eng.begin() as conn:
        client = _client(conn)
        conn.execute(sa.text("SELECT 1"))
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
