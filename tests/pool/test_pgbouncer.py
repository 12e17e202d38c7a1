"""pgmux behind a stock PgBouncer 1.18 (Debian's), transaction and session pool modes."""

from __future__ import annotations

import logging
import time
from contextlib import closing, contextmanager

import gevent
import psycopg2
import pytest
from support.mux import PATIENCE, drivers, join_all, unique_name

from pgmux.client import Client
from pgmux.errors import DivisionByZero, Error, InterfaceError, OperationalError
from pgmux.io.connect import BASE_STARTUP_PARAMS

MODES = ["transaction", "session"]


@pytest.fixture
def bounced(pgbouncer):
    """bounced(mode, **options) -> a started Client through PgBouncer, closed after the test."""
    made: list[Client] = []

    def make(mode: str = "transaction", **options) -> Client:
        db = Client(**pgbouncer.params(mode), **options)
        made.append(db)
        return db.start() if db.pipeline_size else db

    yield make
    for db in made:
        db.close()


# connecting -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_connects_with_default_options(bounced, mode):
    db = bounced(mode, pipeline_size=2)
    assert db.fetchval("SELECT $1::int + 1", [41]) == 42
    assert [d.conn.protocol for d in drivers(db)] == ["3.0", "3.0"]


def test_startup_parameters_are_ones_pgbouncer_tracks():
    """PgBouncer refuses any other startup parameter unless ignore_startup_parameters says."""
    tracked = {"client_encoding", "datestyle", "timezone", "standard_conforming_strings",
               "application_name"}
    assert {name.lower() for name in BASE_STARTUP_PARAMS} <= tracked


def test_protocol_3_2_opt_in_is_refused_by_pgbouncer_1_18_with_a_hint(pgbouncer):
    db = Client(**pgbouncer.params("session"), pipeline_size=1, max_protocol_version="3.2")
    with pytest.raises(OperationalError, match="max_protocol_version=3.0") as caught:
        db.start()
    assert caught.value.sqlstate == "08P01"
    assert pgbouncer.password not in str(caught.value)


# pooler= ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "session", "transaction"])
def test_pooler_option_is_kept_for_the_engine(value):
    assert Client("host=localhost", pooler=value).pooler == value


def test_pooler_option_is_validated():
    with pytest.raises(InterfaceError, match="pooler must be None, 'session' or 'transaction'"):
        Client("host=localhost", pooler="statement")


def test_session_setting_is_refused_under_transaction_pooling():
    with pytest.raises(InterfaceError, match="idle_transaction_timeout"):
        Client("host=localhost", pooler="transaction", idle_in_transaction_timeout=5)


def test_session_is_refused_under_pooler_transaction_saying_why(bounced):
    db = bounced("transaction", pooler="transaction", pipeline_size=1)
    with pytest.raises(InterfaceError, match="pooler='transaction'.*session state"):
        db.session()
    assert db.stats()["pinned"]["active"] == 0


def test_listen_is_refused_in_a_transaction_under_pooler_transaction(bounced):
    db = bounced("transaction", pooler="transaction", pipeline_size=1)
    with db.transaction() as tx:
        with pytest.raises(InterfaceError, match="LISTEN .*notifications would never arrive"):
            tx.session.listen("pgmux_channel")
        assert tx.fetchval("SELECT 1") == 1


def test_transactions_commit_and_roll_back_under_pooler_transaction(bounced, pg_admin):
    table = unique_name("bounced")
    pg_admin(f"CREATE TABLE {table} (n int); GRANT ALL ON {table} TO scram_user")
    db = bounced("transaction", pooler="transaction", pipeline_size=1)
    for n in range(5):
        with db.transaction() as tx:
            tx.execute(f"INSERT INTO {table} VALUES ({n})")
    with pytest.raises(DivisionByZero), db.transaction() as tx:
        tx.execute(f"INSERT INTO {table} VALUES (100)")
        tx.execute("SELECT 1 / 0")
    assert pg_admin(f"SELECT sum(n) FROM {table}") == "10"
    assert db.stats()["pinned"]["active"] == 0


@contextmanager
def statement_left_on_the_single_server_connection(pgbouncer):
    """A psycopg2 client's ``PREPARE`` and ``SET work_mem``, left on the one server
    connection of the "single" pool; yields a function that executes the statement there,
    and one that reads the setting."""
    name = unique_name("keep")
    with closing(psycopg2.connect(**pgbouncer.params("single"))) as conn:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"PREPARE {name} AS SELECT 7")
            cur.execute("SET work_mem = '7MB'")

            def execute() -> int:
                cur.execute(f"EXECUTE {name}")
                return cur.fetchone()[0]

            def work_mem() -> str:
                cur.execute("SHOW work_mem")
                return cur.fetchone()[0]

            try:
                yield execute, work_mem
            finally:
                cur.execute("DISCARD ALL")


def test_pooler_transaction_resets_without_discard_all(pgbouncer, bounced):
    """The pinned reset must not DISCARD ALL on whatever server connection the pooler lends
    next: here there is one, shared with a psycopg2 client whose PREPARE survives."""
    with statement_left_on_the_single_server_connection(pgbouncer) as (execute_other, setting):
        db = bounced("single", pooler="transaction", pipeline_size=0)
        with db.transaction() as tx:
            tx.execute("SELECT 1")
            tx.execute("SELECT set_config('application_name', 'mine', false)")
        assert db.stats()["pinned"] == {"size": 2, "active": 0, "free": 2, "waiting": 0}
        assert execute_other() == 7 and setting() == "7MB"


def test_without_pooler_option_the_reset_discards_on_a_shared_server_connection(
        pgbouncer, bounced):
    """What pooler='transaction' avoids: a reset pgmux sends after session state runs on a
    server connection the pooler shares, and wipes another client's state there. (A clean
    transaction sends no reset, so even without the option it leaves the other's alone.)"""
    with statement_left_on_the_single_server_connection(pgbouncer) as (execute_other, setting):
        db = bounced("single", pipeline_size=0)
        with db.transaction() as tx:
            tx.execute("SELECT 1")
        assert execute_other() == 7 and setting() == "7MB"
        with db.transaction() as tx:
            tx.execute("SET application_name = 'mine'")  # session state: reset on return
        assert setting() != "7MB"
        with db.transaction() as tx:
            tx.execute("PREPARE mine AS SELECT 1")  # the user's own statements: DISCARD ALL
        with pytest.raises(psycopg2.errors.InvalidSqlStatementName):
            execute_other()


# noticing a pooler -----------------------------------------------------------------------


def test_pooler_is_noticed_and_sessions_refused_until_told(bounced, caplog):
    db = bounced("transaction", pipeline_size=1)
    assert db.pooler_detected is None
    with caplog.at_level(logging.WARNING, logger="pgmux"), db.transaction() as tx:
        assert tx.fetchval("SELECT 1") == 1
    assert db.pooler_detected is True
    assert [r for r in caplog.records if "connection pooler" in r.getMessage()]
    with pytest.raises(InterfaceError, match="pooler='session' if it pools sessions"):
        db.session()


def test_first_session_is_refused_once_its_connection_notices_the_pooler(bounced):
    db = bounced("transaction", pipeline_size=1)
    session = db.session()  # nothing opened yet: the check happens on the first connection
    with pytest.raises(InterfaceError, match="connection pooler"):
        session.__enter__()
    assert db.stats()["pinned"] == {"size": 2, "active": 0, "free": 2, "waiting": 0}
    with db.transaction() as tx:  # the connection went back clean and is lent again
        assert tx.fetchval("SELECT 2") == 2


def test_direct_connection_is_not_mistaken_for_a_pooler(clients):
    db = clients(pipeline_size=1)
    with db.session() as s:
        assert s.fetchval("SELECT pg_backend_pid()") == s.pid
    assert db.pooler_detected is False


def test_pooler_session_gives_sessions_with_their_state_and_listen(bounced):
    db = bounced("session", pooler="session", pipeline_size=1)
    assert db.pooler_detected is None  # told, so not checked
    with db.session() as s:
        s.execute("SET work_mem = '7MB'")
        assert s.fetchval("SHOW work_mem") == "7MB"
        s.listen("pgmux_bounced")
        db.fetchval("SELECT pg_notify('pgmux_bounced', 'hi')")
        note = s.wait_notify(timeout=PATIENCE)
        assert note is not None and note.payload == "hi"
    with db.session() as s:
        assert s.fetchval("SHOW work_mem") != "7MB"  # DISCARD ALL ran on its own connection


# acceptance: two applications through one transaction pooler ------------------------------

GREENLETS = 64
RUN_SECONDS = 3.0
# Two "processes" with different SQL: under a transaction pooler they share server
# connections, so a statement name that means one thing to one client must never be
# executed for the other.
SQL_A = "SELECT $1::int + 1000000"
SQL_B = "SELECT $1::int"


def two_clients_hammering(pgbouncer, seconds: float = RUN_SECONDS, **options) -> dict:
    """Two clients through transaction pooling, 64 greenlets in all, for ``seconds``:
    counts of right and wrong answers and the errors raised."""
    a = Client(**pgbouncer.params("transaction"), **options)
    b = Client(**pgbouncer.params("transaction"), **options)
    tally = {"right": 0, "wrong": 0, "errors": []}
    until = time.monotonic() + seconds

    def worker(index: int) -> None:
        db, sql, offset = (a, SQL_A, 1_000_000) if index % 2 else (b, SQL_B, 0)
        n = index
        while time.monotonic() < until:
            n += GREENLETS
            try:
                value = db.fetchval(sql, [n], timeout=PATIENCE)
            except Exception as exc:  # counted and checked for type below
                tally["errors"].append(exc)
                continue
            tally["right" if value == n + offset else "wrong"] += 1

    try:
        join_all([gevent.spawn(worker, i) for i in range(GREENLETS)],
                 timeout=seconds + 2 * PATIENCE)
    finally:
        a.close()
        b.close()
    return tally


def test_two_clients_with_defaults_never_get_each_others_rows(pgbouncer):
    """Behind a transaction pooler with pgmux defaults: zero wrong results, under 1 % errors,
    all typed. Needs the engine's content-addressed statement names (contract 10)."""
    tally = two_clients_hammering(pgbouncer)
    answered = tally["right"] + tally["wrong"]
    assert tally["wrong"] == 0
    assert len(tally["errors"]) < 0.01 * (answered + len(tally["errors"]))
    assert all(isinstance(exc, Error) for exc in tally["errors"]), tally["errors"][:3]
    assert answered > GREENLETS


def test_two_clients_with_pooler_transaction_get_no_error(pgbouncer):
    """With pooler='transaction': zero wrong results and zero errors (unnamed statements,
    from the engine)."""
    tally = two_clients_hammering(pgbouncer, pooler="transaction")
    assert (tally["wrong"], tally["errors"]) == (0, [])
    assert tally["right"] > GREENLETS


def test_prepared_statements_of_two_clients_under_pooler_transaction(pgbouncer, bounced):
    """prepare() works behind a transaction pooler, even with the same name in two clients
    for different SQL."""
    a = bounced("transaction", pooler="transaction")
    b = bounced("transaction", pooler="transaction")
    add = a.prepare("calc", "SELECT $1::int + 1000")
    neg = b.prepare("calc", "SELECT -$1::int")

    def worker(i: int) -> tuple[int, int]:
        return add.fetchval([i]), neg.fetchval([i])

    jobs = [gevent.spawn(worker, i) for i in range(GREENLETS)]
    join_all(jobs)
    assert [job.value for job in jobs] == [(i + 1000, -i) for i in range(GREENLETS)]


def test_two_clients_without_a_statement_cache_are_correct_today(pgbouncer):
    """The safe setting before the engine: unnamed statements everywhere."""
    tally = two_clients_hammering(pgbouncer, seconds=1.0, statement_cache_size=0)
    assert (tally["wrong"], tally["errors"]) == (0, [])


def test_deferred_db_api_transactions_through_transaction_pooling(pgbouncer, pg_admin):
    """A DB-API transaction behind PgBouncer's transaction mode: its plain reads ride the
    multiplexed connections, its first write pins with BEGIN in front, its commit ends one
    server transaction; concurrent transfers keep the books, and every committed one (and
    no other) left its row in the log."""
    import pgmux.dbapi

    table = unique_name("bounced_books")
    log = f"{table}_log"
    pg_admin(f"CREATE TABLE {table} (id int PRIMARY KEY, n int); "
             f"INSERT INTO {table} SELECT g, 100 FROM generate_series(1, 10) g; "
             f"CREATE TABLE {log} (source int, target int); "
             f"GRANT ALL ON {table}, {log} TO scram_user")
    params = {**pgbouncer.params("transaction"), "pooler": "transaction",
              "pipeline_size": 2, "pinned_size": 2, "application_name": unique_name("bb")}
    committed = []

    def transfer(seed: int) -> None:
        conn = pgmux.dbapi.connect(**params)
        try:
            for i in range(10):
                source, target = (seed + i) % 10 + 1, (seed + 3 * i + 1) % 10 + 1
                if source == target:
                    continue
                cur = conn.cursor()
                cur.execute(f"SELECT n FROM {table} WHERE id = %s", (source,))  # unpinned
                assert conn.info.backend_pid is None
                cur.execute(f"UPDATE {table} SET n = n - 1 WHERE id = %s", (source,))
                cur.execute(f"UPDATE {table} SET n = n + 1 WHERE id = %s", (target,))
                cur.execute(f"INSERT INTO {log} VALUES (%s, %s)", (source, target))
                if i % 4 == 3:  # some roll back: nothing of theirs may stay
                    conn.rollback()
                    continue
                conn.commit()
                committed.append(source * 11 + target)
        finally:
            conn.close()

    try:
        join_all([gevent.spawn(transfer, seed) for seed in range(8)])
        assert pg_admin(f"SELECT sum(n) FROM {table}") == "1000"
        assert len(committed) > 0
        assert pg_admin(f"SELECT count(*) FROM {log}") == str(len(committed))
        assert pg_admin(f"SELECT sum(source * 11 + target) FROM {log}") == str(sum(committed))
        moved = pg_admin(f"SELECT sum(abs(n - 100)) FROM {table}")
        assert 0 < int(moved) <= 2 * len(committed)
        conn = pgmux.dbapi.connect(**params)
        assert conn.client.stats()["pinned"]["active"] == 0
        conn.cursor().execute(f"SELECT count(*) FROM {table}")
        conn.rollback()  # never pinned: nothing sent
        conn.close()
    finally:
        pgmux.dbapi.close_shared_clients()
        pg_admin(f"DROP TABLE {table}, {log}")
