"""pgmux.dbapi connections against a real server: where statements run, what sticks."""

from __future__ import annotations

import gc
import uuid

import gevent
import pytest
from support.factory import close_clients_of, closed_after
from support.fork import run_in_child
from support.mux import wait_until

import pgmux
import pgmux.dbapi
from pgmux import errors


@pytest.fixture
def connect(pg):
    """connect(**options) -> a DB-API connection on a client of this test's own."""
    name = f"dbapi-{uuid.uuid4().hex[:10]}"
    yield from closed_after(lambda autocommit=False, **options: pgmux.dbapi.connect(
        pg.dsn, autocommit=autocommit,
        **{"application_name": name, "acquire_timeout": 10, **options}), close_clients_of)


def pinned(conn) -> int:
    """Pinned server connections lent out by the connection's client."""
    return conn.client.stats()["pinned"]["active"]


def one(conn, sql, params=None):
    cur = conn.cursor()
    cur.execute(sql, params)
    return cur.fetchone()[0]


def test_handles_share_one_client_per_dsn_and_options(connect):
    a, b = connect(), connect()
    assert a.client is b.client
    assert connect(pinned_size=3).client is not a.client
    assert pgmux.dbapi.Error is pgmux.Error and pgmux.dbapi.IntegrityError is pgmux.IntegrityError


def test_unhashable_options_are_refused(pg):
    with pytest.raises(pgmux.InterfaceError, match="hashable"):
        pgmux.dbapi.connect(pg.dsn, application_name=["x"])


def test_a_transaction_holds_a_pinned_connection_until_commit(connect):
    conn = connect(pinned_size=1, deferred_pinning=False)  # pinned at its first statement
    assert pinned(conn) == 0
    pid = one(conn, "SELECT pg_backend_pid()")
    assert pinned(conn) == 1 and conn.in_transaction
    assert one(conn, "SELECT pg_backend_pid()") == pid  # the same server connection
    conn.commit()
    assert pinned(conn) == 0 and not conn.in_transaction
    others = [connect(pinned_size=1, deferred_pinning=False) for _ in range(5)]  # one serves all
    for other in others:
        assert one(other, "SELECT %s::int + 1", (1,)) == 2
        other.rollback()
    assert pinned(conn) == 0


def test_a_with_block_commits_then_closes_and_rolls_back_on_an_exception(connect):
    setup = connect(autocommit=True)
    table = f"with_block_{uuid.uuid4().hex[:8]}"
    setup.cursor().execute(f"CREATE TABLE {table} (n int)")
    with connect() as conn:
        conn.cursor().execute(f"INSERT INTO {table} VALUES (1)")
    assert conn.closed and pinned(conn) == 0
    with pytest.raises(ZeroDivisionError), connect() as conn:
        conn.cursor().execute(f"INSERT INTO {table} VALUES (2)")
        1 / 0
    assert conn.closed and pinned(conn) == 0
    with connect() as conn:
        conn.close()  # closed inside the block: nothing left to end
    assert one(setup, f"SELECT array_agg(n) FROM {table}") == [1]


def test_autocommit_statements_are_multiplexed(connect):
    conn = connect(autocommit=True)
    cur = conn.cursor()
    cur.execute("SELECT %(a)s::int * 2 AS doubled", {"a": 21})
    assert cur.fetchall() == [(42,)] and cur.description[0].name == "doubled"
    assert pinned(conn) == 0 and conn.client.stats()["pipeline"]["live"] > 0


def test_autocommit_runs_what_the_guard_refuses_on_a_pinned_connection_for_it(connect):
    conn = connect(autocommit=True)
    cur = conn.cursor()
    cur.execute("SHOW TimeZone")
    assert cur.fetchone()[0]
    table = f"t_{uuid.uuid4().hex[:8]}"
    cur.execute(f"CREATE TABLE {table} (a int)")
    cur.execute(f"INSERT INTO {table} VALUES (1); INSERT INTO {table} VALUES (2)")
    cur.execute(f"SELECT count(*) FROM {table}")
    assert cur.fetchone() == (2,)
    assert pinned(conn) == 0 and conn.pinned is None
    cur.execute(f"DROP TABLE {table}")


def test_the_users_own_transaction_in_autocommit_mode_keeps_its_connection(connect):
    conn = connect(autocommit=True)
    cur = conn.cursor()
    cur.execute("BEGIN")
    pid = one(conn, "SELECT pg_backend_pid()")
    assert pinned(conn) == 1 and conn.in_transaction
    assert one(conn, "SELECT pg_backend_pid()") == pid
    cur.execute("COMMIT")
    assert pinned(conn) == 0


@pytest.mark.parametrize("autocommit", [True, False])
def test_session_state_sticks_until_close_and_never_leaks(connect, autocommit):
    conn = connect(autocommit=autocommit, pinned_size=2)
    cur = conn.cursor()
    cur.execute("SET application_name = 'sticky'")
    cur.execute("CREATE TEMP TABLE scratch (a int)")
    cur.execute("INSERT INTO scratch VALUES (%s)", (1,))
    conn.commit()
    conn.rollback()
    assert conn.pinned is not None and pinned(conn) == 1
    assert one(conn, "SELECT current_setting('application_name')") == "sticky"
    assert one(conn, "SELECT count(*) FROM scratch") == 1
    other = connect(autocommit=autocommit, pinned_size=2)
    assert one(other, "SELECT current_setting('application_name')") != "sticky"
    other.rollback()
    conn.close()
    assert pinned(conn) == 0
    again = connect(autocommit=False, pinned_size=2)  # gets a reset connection
    assert one(again, "SELECT to_regclass('pg_temp.scratch') IS NULL") is True


def test_commit_of_a_failed_transaction_raises(connect):
    conn = connect()
    cur = conn.cursor()
    with pytest.raises(pgmux.dbapi.ProgrammingError) as caught:
        cur.execute("SELECT * FROM no_such_table")
    assert isinstance(caught.value, errors.UndefinedTable)
    with pytest.raises(pgmux.dbapi.InternalError):  # 25P02: in failed sql transaction
        cur.execute("SELECT 1")
    with pytest.raises(pgmux.DatabaseError, match="rolled back"):
        conn.commit()
    assert pinned(conn) == 0 and one(conn, "SELECT 1") == 1


def test_server_errors_keep_their_pep249_class(connect):
    conn = connect(autocommit=True)
    cur = conn.cursor()
    with pytest.raises(pgmux.dbapi.DataError) as caught:
        cur.execute("SELECT 1 / %s", (0,))
    assert caught.value.sqlstate == "22012"
    cur.execute("CREATE TEMP TABLE u (a int PRIMARY KEY)")
    cur.execute("INSERT INTO u VALUES (1)")
    with pytest.raises(pgmux.dbapi.IntegrityError) as caught:
        cur.execute("INSERT INTO u VALUES (%s)", (1,))
    assert isinstance(caught.value, errors.UniqueViolation)


def test_values_are_parameters_never_spliced_into_the_text(connect):
    conn = connect(autocommit=True)
    evil = "'); DROP TABLE x; --"
    assert one(conn, "SELECT %s::text", (evil,)) == evil
    assert one(conn, "SELECT %(v)s || ' 100%%'", {"v": "it's"}) == "it's 100%"


def test_executemany_is_one_pipeline_in_the_transaction(connect):
    conn = connect()
    cur = conn.cursor()
    cur.execute("CREATE TEMP TABLE m (a int PRIMARY KEY)")
    conn.commit()
    cur.executemany("INSERT INTO m VALUES (%s)", [(i,) for i in range(100)])
    assert cur.rowcount == 100
    with pytest.raises(pgmux.dbapi.IntegrityError):
        cur.executemany("INSERT INTO m VALUES (%s)", [(1000,), (5,), (1001,)])
    conn.rollback()
    cur.execute("SELECT count(*) FROM m")  # temp table: the connection stuck to it
    assert cur.fetchone() == (0,)


def test_executemany_in_autocommit_mode_is_all_or_nothing(connect):
    conn = connect(autocommit=True)
    cur = conn.cursor()
    table = f"m_{uuid.uuid4().hex[:8]}"
    cur.execute(f"CREATE TABLE {table} (a int PRIMARY KEY)")
    cur.executemany(f"INSERT INTO {table} VALUES (%(a)s)", [{"a": 1}, {"a": 2}])
    assert cur.rowcount == 2
    with pytest.raises(pgmux.dbapi.IntegrityError):
        cur.executemany(f"INSERT INTO {table} VALUES (%s)", [(3,), (1,), (4,)])
    cur.execute(f"SELECT array_agg(a ORDER BY a) FROM {table}")
    assert cur.fetchone() == ([1, 2],)
    assert pinned(conn) == 0
    cur.execute(f"DROP TABLE {table}")


def _units(conn) -> int:
    return sum(d["units"] for d in conn.client.stats()["pipeline"]["drivers"])


def test_executemany_in_autocommit_mode_is_one_atomic_unit_without_a_pinned_connection(
        connect, pg):
    conn = connect(autocommit=True, pinned_size=0, pipeline_size=1)
    cur = conn.cursor()
    table = f"m_{uuid.uuid4().hex[:8]}"
    pg.admin(f"CREATE TABLE {table} (a int PRIMARY KEY, b text)")  # DDL would need a pin
    cur.executemany(f"INSERT INTO {table} VALUES (%s, %s)", [(1, "x")])  # described once
    before = _units(conn)
    cur.executemany(f"INSERT INTO {table} VALUES (%s, %s)", [(i, str(i)) for i in range(2, 52)])
    assert cur.rowcount == 50
    assert _units(conn) == before + 1  # fifty statements, one Sync unit
    cur.executemany(f"UPDATE {table} SET b = %(b)s WHERE a = %(a)s",
                    [{"a": 1, "b": "y"}, {"a": 99, "b": "z"}, {"a": 2, "b": "y"}])
    assert cur.rowcount == 2  # 1 + 0 + 1
    with pytest.raises(pgmux.dbapi.IntegrityError) as caught:
        cur.executemany(f"INSERT INTO {table} VALUES (%s, %s)", [(100, "a"), (7, "b"), (101, "c")])
    assert caught.value.statement_index == 1 and caught.value.sqlstate == "23505"
    cur.execute(f"SELECT count(*), count(*) FILTER (WHERE b = 'y') FROM {table}")
    assert cur.fetchone() == (51, 2)  # nothing of the failed unit was applied
    with pytest.raises(pgmux.dbapi.DataError):  # 22P02, the server's own error
        cur.executemany(f"INSERT INTO {table} VALUES (%s, %s)", [(200, "a"), ("nope", "b")])
    cur.execute(f"SELECT count(*) FROM {table} WHERE a >= 100")
    assert cur.fetchone() == (0,)
    pg.admin(f"DROP TABLE {table}")


def test_executemany_the_unit_path_refuses_goes_pinned_as_before(connect):
    conn = connect(autocommit=True, guard="strict")
    cur = conn.cursor()
    sequence = f"s_{uuid.uuid4().hex[:8]}"
    cur.execute(f"CREATE SEQUENCE {sequence}")
    cur.executemany("SELECT nextval(%s)", [(sequence,)] * 3)  # the strict guard refuses it
    cur.execute(f"SELECT last_value FROM {sequence}")
    assert cur.fetchone() == (3,)
    assert pinned(conn) == 0  # the pinned connection it took was given back
    cur.execute(f"DROP SEQUENCE {sequence}")


def test_executemany_in_a_transaction_stays_on_its_pinned_connection(connect):
    conn = connect()
    cur = conn.cursor()
    table = f"m_{uuid.uuid4().hex[:8]}"
    cur.execute(f"CREATE TABLE {table} (a int)")
    conn.commit()
    before = _units(conn)
    cur.executemany(f"INSERT INTO {table} VALUES (%s)", [(1,), (2,)])
    assert conn.in_transaction and pinned(conn) == 1 and _units(conn) == before
    conn.rollback()
    cur.execute(f"SELECT count(*) FROM {table}")
    assert cur.fetchone() == (0,)
    cur.execute(f"DROP TABLE {table}")
    conn.commit()


@pytest.mark.parametrize("autocommit", [True, False])
def test_named_cursor_streams_on_a_pinned_connection(connect, autocommit):
    conn = connect(autocommit=autocommit)
    cur = conn.cursor("stream")
    cur.itersize = 7
    cur.execute("SELECT g, g::text AS label FROM generate_series(1, %s) g", (50,))
    assert [c.name for c in cur.description] == ["g", "label"]
    assert cur.description[0].type_code == pgmux.dbapi.NUMBER
    assert cur.description[1].type_code == pgmux.dbapi.STRING
    assert pinned(conn) == 1
    assert cur.fetchone() == (1, "1")
    assert cur.fetchmany(3) == [(2, "2"), (3, "3"), (4, "4")]
    rest = cur.fetchall()
    assert [row[0] for row in rest] == list(range(5, 51))
    assert cur.fetchone() is None
    conn.commit()
    assert pinned(conn) == 0


def test_closing_a_named_cursor_early_closes_its_portal(connect):
    conn = connect(autocommit=True)
    cur = conn.cursor("early")
    cur.execute("SELECT g FROM generate_series(1, 100000) g")
    assert cur.fetchmany(2) == [(1,), (2,)]
    cur.close()
    assert pinned(conn) == 0
    assert one(conn, "SELECT 7") == 7


def test_greenlets_take_turns_on_one_connection(connect):
    conn = connect()
    gevent.spawn(one, conn, "SELECT 1").get(timeout=10)
    assert conn.in_transaction
    gevent.spawn(conn.commit).get(timeout=10)
    assert pinned(conn) == 0


def test_two_greenlets_at_once_is_refused(connect):
    conn = connect()
    sleeper = gevent.spawn(one, conn, "SELECT pg_sleep(0.5)")
    wait_until(lambda: pinned(conn) == 1, what="the first greenlet inside its query")
    with pytest.raises(pgmux.InterfaceError, match="another greenlet"):
        one(conn, "SELECT 2")
    sleeper.get(timeout=10)
    conn.rollback()


SLEEPING = ("SELECT count(*) FROM pg_stat_activity "
            "WHERE query LIKE '%pg_sleep(3_)%' AND pid <> pg_backend_pid()")


def _inserted(conn, table):
    return one(conn, f"SELECT count(*) FROM {table}")


@pytest.mark.parametrize("sticky", [False, True])
def test_a_killed_greenlet_never_returns_its_connection_dirty(connect, pg, sticky):
    table = f"k_{uuid.uuid4().hex[:8]}"
    pg.admin(f"CREATE TABLE {table} (a int)")
    conn = connect(pinned_size=1)
    if sticky:
        conn.cursor().execute("SET application_name = 'killed'")
    cur = conn.cursor()
    cur.execute(f"INSERT INTO {table} VALUES (1)")
    victim = gevent.spawn(cur.execute, "SELECT pg_sleep(30)")
    wait_until(lambda: pg.admin(SLEEPING) == "1", what="the sleep running")
    victim.kill(timeout=10)
    conn.rollback()  # from another greenlet than the one that held it
    assert pinned(conn) == 0
    if sticky:
        assert conn.broken
        with pytest.raises(pgmux.dbapi.OperationalError, match="session state"):
            one(conn, "SELECT 1")
    other = connect(pinned_size=1)
    assert _inserted(other, table) == 0  # the open transaction was never committed
    assert one(other, "SELECT current_setting('application_name')") != "killed"
    other.rollback()
    wait_until(lambda: pg.admin(SLEEPING) == "0", what="the killed statement cancelled")
    pg.admin(f"DROP TABLE {table}")


def _from_the_hub(call):
    """Run ``call`` in a hub callback (as a garbage-collection callback may); its outcome."""
    outcome = []

    def callback():
        try:
            in_hub = gevent.getcurrent() is gevent.get_hub()
            outcome.append(("ok", call(), in_hub))
        except BaseException as exc:
            outcome.append(("error", exc, None))

    gevent.get_hub().loop.run_callback(callback)
    wait_until(lambda: outcome, what="the hub callback")
    return outcome[0]


def test_rollback_without_a_lease_from_the_hub_is_a_no_op(connect):
    conn = connect()
    assert _from_the_hub(conn.rollback) == ("ok", None, True)
    conn.autocommit = True
    one(conn, "SELECT 1")
    assert _from_the_hub(conn.rollback) == ("ok", None, True)


def test_rollback_from_the_hub_hands_the_work_to_a_greenlet(connect, pg):
    table = f"h_{uuid.uuid4().hex[:8]}"
    pg.admin(f"CREATE TABLE {table} (a int)")
    conn = connect(pinned_size=1)
    conn.cursor().execute(f"INSERT INTO {table} VALUES (1)")
    assert _from_the_hub(conn.rollback) == ("ok", None, True)
    wait_until(lambda: pinned(conn) == 0, what="the rollback in the background")
    assert _inserted(conn, table) == 0
    conn.rollback()
    pg.admin(f"DROP TABLE {table}")


def test_close_from_the_hub_gives_the_connection_back(connect):
    conn = connect()
    one(conn, "SELECT 1")
    assert _from_the_hub(conn.close) == ("ok", None, True)
    wait_until(lambda: pinned(conn) == 0, what="the close in the background")
    assert conn.closed


def test_a_dropped_handle_gives_its_pinned_connection_back(pg):
    conn = pgmux.dbapi.connect(pg.dsn, application_name=f"dropped-{uuid.uuid4().hex[:8]}",
                               deferred_pinning=False)
    client = conn.client
    try:
        one(conn, "SELECT 1")
        assert client.stats()["pinned"]["active"] == 1
        del conn
        gc.collect()
        wait_until(lambda: client.stats()["pinned"]["active"] == 0, what="the lease's return")
    finally:
        client.close()


def test_closed_handles_and_cursors_refuse_work(connect):
    conn = connect()
    cur = conn.cursor()
    conn.close()
    with pytest.raises(pgmux.dbapi.InterfaceError):
        cur.execute("SELECT 1")
    with pytest.raises(pgmux.dbapi.InterfaceError):
        conn.commit()
    with pytest.raises(pgmux.dbapi.InterfaceError):
        conn.close()


def test_settings_apply_to_the_next_transaction(connect):
    conn = connect()
    conn.isolation_level = "SERIALIZABLE"
    conn.read_only = True
    assert one(conn, "SHOW transaction_isolation") == "serializable"
    with pytest.raises(pgmux.dbapi.ProgrammingError, match="inside a transaction"):
        conn.autocommit = True
    with pytest.raises(errors.ReadOnlySqlTransaction):
        conn.cursor().execute("CREATE TEMP TABLE ro (a int)")
    conn.rollback()
    with pytest.raises(pgmux.InterfaceError, match="unknown isolation level"):
        conn.isolation_level = "chaotic"


def test_a_sticky_connection_whose_server_went_away_says_so(connect, pg):
    conn = connect(autocommit=True)
    pid = one(conn, "SELECT pg_backend_pid() FROM (SELECT set_config('a.b', 'c', false)) s")
    pg.admin(f"SELECT pg_terminate_backend({pid})")
    with pytest.raises(pgmux.dbapi.OperationalError):
        one(conn, "SELECT 1")
    assert conn.broken
    with pytest.raises(pgmux.dbapi.OperationalError, match="session state"):
        one(conn, "SELECT 1")
    assert pinned(conn) == 0


def test_named_cursor_whose_rows_fit_one_batch_gives_its_connection_back(connect):
    conn = connect(autocommit=True)
    cur = conn.cursor("small")
    cur.execute("SELECT g FROM generate_series(1, 5) g")
    assert pinned(conn) == 0  # read to the end with the first batch
    assert cur.fetchmany(2) == [(1,), (2,)] and cur.fetchall() == [(3,), (4,), (5,)]


def test_a_named_cursor_ends_with_its_transaction(connect):
    conn = connect()
    cur = conn.cursor("ends")
    cur.itersize = 10
    cur.execute("SELECT g FROM generate_series(1, 1000) g")
    assert cur.fetchone() == (1,)
    conn.commit()
    assert pinned(conn) == 0
    with pytest.raises(pgmux.dbapi.InterfaceError):
        cur.fetchall()


def test_a_forked_child_gets_its_own_shared_client(connect):
    conn = connect(autocommit=True)
    parent_client = conn.client
    assert one(conn, "SELECT 1") == 1

    def child() -> dict:
        fresh = connect(autocommit=True)  # the same dsn and options as the parent's
        report = {"own_client": fresh.client is not parent_client,
                  "fresh": one(fresh, "SELECT 2"),
                  "inherited": one(conn, "SELECT 3")}  # the parent's client reconnects
        fresh.client.close()
        parent_client.close()
        return report

    assert run_in_child(child) == {"own_client": True, "fresh": 2, "inherited": 3}
    assert one(conn, "SELECT 4") == 4  # the child never touched the parent's connections
    assert connect(autocommit=True).client is parent_client


def test_without_a_pipeline_autocommit_runs_pinned(connect):
    conn = connect(autocommit=True, pipeline_size=0)
    assert one(conn, "SELECT %s::int", (5,)) == 5
    conn.ping()
    assert pinned(conn) == 0
