"""Statement caching on pipeline connections: the LRU, unnamed statements, stale plans,
parse errors, and the named catalog of ``db.prepare``."""

from __future__ import annotations

import gevent
import pytest
from support.mux import drivers, join_all, outcome, unique_name, wait_until, warm

from pgmux.errors import InterfaceError, QueryTimeout, SqlSyntaxError, UndefinedTable


@pytest.fixture
def table(pg):
    name = unique_name()
    pg.admin(f"CREATE TABLE {name} (id int PRIMARY KEY, v int);"
             f"INSERT INTO {name} SELECT g, g * 10 FROM generate_series(1, 5) g")
    yield name
    pg.admin(f"DROP TABLE IF EXISTS {name}")


def server_statements(db) -> list[str]:
    """The statements prepared on the (single) pipeline connection, seen from itself."""
    rows = db.query("SELECT statement FROM pg_prepared_statements ORDER BY statement")
    return [row[0] for row in rows]


# -- the automatic cache ----------------------------------------------------------------


def test_a_repeated_query_is_prepared_once(clients):
    db = clients(pipeline_size=1)
    sql = "SELECT $1::int * 2"
    assert [db.fetchval(sql, [i]) for i in range(5)] == [0, 2, 4, 6, 8]
    assert server_statements(db).count(sql) == 1
    assert len(drivers(db)[0].engine.statements) == 2  # this query and the catalog lookup


def test_lru_cache_closes_old_statements(clients):
    db = clients(pipeline_size=1, statement_cache_size=2)
    queries = [f"SELECT $1::int + {k}" for k in range(5)]
    for rnd in range(3):
        for k, sql in enumerate(queries):
            assert db.fetchval(sql, [rnd]) == rnd + k
    count = db.fetchval("SELECT count(*) FROM pg_prepared_statements")
    assert 1 <= count <= 2


def test_lru_cache_under_concurrent_churn(clients):
    db = clients(pipeline_size=1, statement_cache_size=2)
    queries = [f"SELECT $1::int + {k}" for k in range(5)]

    def worker(n):
        for step in range(20):
            k = (n + step * 3) % 5
            assert db.fetchval(queries[k], [n]) == n + k

    jobs = [gevent.spawn(worker, n) for n in range(50)]
    join_all(jobs)
    for job in jobs:
        assert job.successful(), job.exception
    assert db.fetchval("SELECT count(*) FROM pg_prepared_statements") <= 2


def test_statement_cache_size_zero_uses_unnamed_statements(clients):
    db = clients(pipeline_size=1, statement_cache_size=0)
    jobs = [gevent.spawn(db.fetchone, "SELECT $1::int, $2::text", [i, str(i)])
            for i in range(200)]
    join_all(jobs)
    assert [job.value for job in jobs] == [(i, str(i)) for i in range(200)]
    assert db.fetchval("SELECT count(*) FROM pg_prepared_statements") == 0
    assert len(drivers(db)[0].engine.statements) == 0


# -- stale statements -------------------------------------------------------------------


def test_column_type_change_between_executions_succeeds_on_retry(pg, clients, table):
    db = clients(pipeline_size=2)
    sql = f"SELECT * FROM {table} WHERE id = $1"
    for _ in range(4):  # cached on both connections
        assert db.fetchone(sql, [2]) == (2, 20)
    pg.admin(f"ALTER TABLE {table} ALTER COLUMN v TYPE text")
    for _ in range(4):
        assert db.fetchone(sql, [2]) == (2, "20")


def test_added_column_shows_up_in_the_cached_query(pg, clients, table):
    db = clients(pipeline_size=1)
    sql = f"SELECT * FROM {table} WHERE id = $1"
    first = db.query(sql, [3])
    assert (first.columns, list(first)) == (("id", "v"), [(3, 30)])
    pg.admin(f"ALTER TABLE {table} ADD COLUMN w text DEFAULT 'new'")
    second = db.query(sql, [3])
    assert (second.columns, list(second)) == (("id", "v", "w"), [(3, 30, "new")])


def test_stale_statement_under_concurrent_callers(pg, clients, table):
    db = clients(pipeline_size=2)
    sql = f"SELECT * FROM {table} WHERE id = $1"
    for i in range(1, 6):
        assert db.fetchone(sql, [i]) == (i, i * 10)
    pg.admin(f"ALTER TABLE {table} ALTER COLUMN v TYPE bigint")
    jobs = [gevent.spawn(outcome, lambda i=i: db.fetchone(sql, [i % 5 + 1])) for i in range(40)]
    join_all(jobs)
    for i, job in enumerate(jobs):
        assert job.value == ("ok", (i % 5 + 1, (i % 5 + 1) * 10)), (i, job.value)


def test_prepared_handle_survives_a_column_type_change(pg, clients, table):
    db = clients(pipeline_size=2)
    stmt = db.prepare("mux_stale_handle", f"SELECT * FROM {table} WHERE id = $1")
    assert stmt.fetchone([4]) == (4, 40)
    pg.admin(f"ALTER TABLE {table} ALTER COLUMN v TYPE text")
    for _ in range(4):  # both connections
        assert stmt.fetchone([4]) == (4, "40")


def test_a_dropped_table_is_an_error_not_a_retry_loop(pg, clients, table):
    db = clients(pipeline_size=1)
    sql = f"SELECT * FROM {table} WHERE id = $1"
    assert db.fetchone(sql, [1]) == (1, 10)
    pg.admin(f"DROP TABLE {table}")
    with pytest.raises(UndefinedTable):
        db.fetchone(sql, [1])
    with pytest.raises(UndefinedTable):
        db.fetchone(sql, [1])
    assert db.fetchval("SELECT 1") == 1


# -- parse errors -----------------------------------------------------------------------


def test_syntax_error_twice_then_the_connection_is_fine(clients):
    db = clients(pipeline_size=1)
    bad = "SELECT FROM WHERE $1::int"
    for _ in range(2):
        with pytest.raises(SqlSyntaxError) as caught:
            db.fetchval(bad, [1])
        assert caught.value.sqlstate == "42601"
    assert db.fetchval("SELECT $1::int", [9]) == 9
    assert bad not in server_statements(db)


def test_callers_queued_behind_a_failing_parse_get_the_syntax_error(clients):
    db = clients(pipeline_size=1)
    bad = "SELECT 1 +"
    jobs = [gevent.spawn(outcome, lambda: db.fetchval(bad)) for _ in range(10)]
    good = [gevent.spawn(db.fetchval, "SELECT $1::int", [i]) for i in range(10)]
    join_all(jobs + good)
    for job in jobs:
        kind, error = job.value
        assert kind == "error" and isinstance(error, SqlSyntaxError), error
        assert error.sqlstate == "42601"
    assert [job.value for job in good] == list(range(10))


# -- the named catalog ------------------------------------------------------------------


def test_prepared_handle_query_fetchone_fetchval_execute(pg, clients, table):
    db = clients(pipeline_size=2)
    select = db.prepare("mux_by_id", f"SELECT id, v FROM {table} WHERE id = $1")
    assert select.name == "mux_by_id"
    res = select.query([2])
    assert (res.columns, list(res), res.command) == (("id", "v"), [(2, 20)], "SELECT 1")
    assert select.fetchone([3]) == (3, 30)
    assert select.fetchone([99]) is None
    assert select.fetchval([4]) == 4
    assert select.fetchval([99]) is None
    bump = db.prepare("mux_bump", f"UPDATE {table} SET v = v + 1 WHERE id <= $1")
    assert bump.execute([3]) == 3
    assert select.fetchone([1]) == (1, 11)
    assert db.stats()["prepared_statements"] == 2
    jobs = [gevent.spawn(select.fetchval, [i % 5 + 1]) for i in range(100)]
    join_all(jobs)
    assert [job.value for job in jobs] == [i % 5 + 1 for i in range(100)]


def test_prepare_reaches_every_connection_before_returning(clients):
    db = clients(pipeline_size=3)
    db.prepare("mux_everywhere", "SELECT $1::int - 1")
    assert all("mux_everywhere" in d.engine.catalog for d in drivers(db))  # white box
    names = {d.engine.catalog["mux_everywhere"].name for d in drivers(db)}
    assert len(names) == 1  # one server-side name, replayable on any connection


def test_concurrent_prepare_of_the_same_statement(clients):
    db = clients(pipeline_size=2)

    def prepare_and_run(i):
        return outcome(lambda: db.prepare("mux_race", "SELECT $1::int + 100").fetchval([i]))

    jobs = [gevent.spawn(prepare_and_run, i) for i in range(10)]
    join_all(jobs)
    assert [job.value for job in jobs] == [("ok", i + 100) for i in range(10)]
    assert db.stats()["prepared_statements"] == 1


def test_prepare_again_after_it_timed_out_on_one_connection(clients):
    db = clients(pipeline_size=2, acquire_timeout=0.3)
    sleep = "SELECT 'busy' FROM pg_sleep($1)"
    warm(db, sleep, [0.0])  # described: what stays in flight below is the sleep itself
    busy = gevent.spawn(db.fetchval, sleep, [0.8])
    wait_until(lambda: sum(d.load for d in drivers(db)) == 1, what="one connection busy")
    with pytest.raises(QueryTimeout):  # prepared on the idle connection, not on the busy one
        db.prepare("mux_partly", "SELECT $1::int + 1")
    assert db.stats()["prepared_statements"] == 0
    join_all([busy])
    wait_until(lambda: sum(d.load for d in drivers(db)) == 0, what="both connections idle")
    stmt = db.prepare("mux_partly", "SELECT $1::int + 1")
    other = db.prepare("mux_other", "SELECT 'other'")
    for i in range(4):  # both connections
        assert stmt.fetchval([i]) == i + 1
        assert other.fetchval() == "other"


def test_prepare_with_types(clients):
    db = clients(pipeline_size=1)
    stmt = db.prepare("mux_typed", "SELECT $1 + 1", types=["int"])
    assert stmt.fetchval([41]) == 42
    with pytest.raises(InterfaceError):
        db.prepare("mux_badtype", "SELECT $1", types=["no such type"])


def test_prepare_again_same_sql_returns_a_handle_different_sql_raises(clients):
    db = clients(pipeline_size=2)
    first = db.prepare("mux_twice", "SELECT $1::int")
    again = db.prepare("mux_twice", "SELECT $1::int")
    assert again.fetchval([5]) == 5 and first.fetchval([6]) == 6
    with pytest.raises(InterfaceError):
        db.prepare("mux_twice", "SELECT $1::int + 1")
    with pytest.raises(InterfaceError):
        db.prepare("mux_twice", "SELECT $1::int", types=["int8"])
    assert db.stats()["prepared_statements"] == 1
    assert first.fetchval([7]) == 7


@pytest.mark.parametrize(("sql", "error"), [
    ("SELECT 1 +", SqlSyntaxError),
    ("SELECT * FROM mux_no_such_table_at_all", UndefinedTable),
])
def test_prepare_of_invalid_sql_raises_and_leaves_nothing(clients, sql, error):
    db = clients(pipeline_size=1)
    with pytest.raises(error):
        db.prepare("mux_invalid", sql)
    assert db.stats()["prepared_statements"] == 0
    assert sql not in server_statements(db)
    assert not drivers(db)[0].engine.catalog
    fixed = db.prepare("mux_invalid", "SELECT 'fixed'")  # the name is free again
    assert fixed.fetchval() == "fixed"
