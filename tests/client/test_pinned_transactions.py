"""Transactions and savepoints on pinned connections, against a real server."""

from __future__ import annotations

import gc
import time
import uuid
import weakref
from decimal import Decimal

import gevent
import pytest
from gevent.event import Event
from support.pinned import record_writes

from pgmux import errors
from pgmux.errors import IndeterminateResultError, InterfaceError


class Interrupt(BaseException):
    """A BaseException that is not an Exception (like KeyboardInterrupt)."""


@pytest.fixture
def db(pinned_client):
    return pinned_client(pinned_size=2)


@pytest.fixture
def table(db):
    name = f"tx_{uuid.uuid4().hex[:10]}"
    with db.session() as s:
        s.execute(f"CREATE TABLE {name} (x int)")
    yield name
    with db.session() as s:
        s.execute(f"DROP TABLE {name}")


def rows(db, table):
    with db.session() as s:
        return sorted(row[0] for row in s.query(f"SELECT x FROM {table}"))


def test_commit_makes_the_work_visible(db, table):
    with db.transaction() as tx:
        assert tx.execute(f"INSERT INTO {table} VALUES ($1), ($2)", [1, 2]) == 2
        assert tx.session.transaction_status == "T"
    assert rows(db, table) == [1, 2]


@pytest.mark.parametrize("exception", [ValueError, Interrupt])
def test_any_exception_rolls_back_and_propagates(db, table, exception):
    with pytest.raises(exception), db.transaction() as tx:
        tx.execute(f"INSERT INTO {table} VALUES ($1)", [1])
        raise exception()
    assert rows(db, table) == []
    assert db.stats()["reconnects"] == 0  # rolled back in place, not replaced
    assert db.stats()["pinned"]["active"] == 0


def test_savepoint_rolls_back_only_its_own_work(db, table):
    with db.transaction() as tx:
        tx.execute(f"INSERT INTO {table} VALUES (1)")
        with pytest.raises(ZeroDivisionError), tx.savepoint():
            tx.execute(f"INSERT INTO {table} VALUES (2)")
            raise ZeroDivisionError
        with tx.savepoint() as sp:
            sp.execute(f"INSERT INTO {table} VALUES (3)")
            with pytest.raises(errors.UniqueViolation), tx.savepoint():
                tx.execute("CREATE TEMP TABLE dup (x int primary key)")
                tx.execute("INSERT INTO dup VALUES (1), (1)")
            tx.execute(f"INSERT INTO {table} VALUES (4)")
        assert tx.fetchval(f"SELECT count(*) FROM {table}") == 3
    assert rows(db, table) == [1, 3, 4]


def test_savepoint_after_a_failed_statement_recovers_the_transaction(db, table):
    with db.transaction() as tx:
        tx.execute(f"INSERT INTO {table} VALUES (1)")
        with pytest.raises(errors.DivisionByZero), tx.savepoint():
            tx.execute("SELECT 1/0")
        assert tx.session.transaction_status == "T"  # not failed: only the savepoint was
        tx.execute(f"INSERT INTO {table} VALUES (2)")
    assert rows(db, table) == [1, 2]


def test_savepoint_rolls_back_even_with_a_stream_left_open(db, table):
    with db.transaction() as tx:
        with pytest.raises(LookupError), tx.savepoint():
            tx.execute(f"INSERT INTO {table} VALUES (1)")
            rows_left = tx.stream("SELECT generate_series(1, 100000)", batch=10)
            next(rows_left)
            raise LookupError
        tx.execute(f"INSERT INTO {table} VALUES (2)")
    assert rows(db, table) == [2]


def test_isolation_and_access_mode_are_applied(db):
    with db.transaction(isolation="serializable", readonly=True, deferrable=True) as tx:
        assert tx.fetchval("SHOW transaction_isolation") == "serializable"
        assert tx.fetchval("SELECT current_setting('transaction_read_only')") == "on"
        assert tx.fetchval("SHOW transaction_deferrable") == "on"
        with pytest.raises(errors.ReadOnlySqlTransaction), tx.savepoint():
            tx.execute("CREATE TEMP TABLE nope (x int)")
    with db.transaction(isolation="REPEATABLE_READ") as tx:
        assert tx.fetchval("SHOW transaction_isolation") == "repeatable read"
        assert tx.fetchval("SELECT current_setting('transaction_read_only')") == "off"
    with db.session() as s, s.transaction(isolation="read committed") as tx:
        assert tx.fetchval("SHOW transaction_isolation") == "read committed"


def test_unknown_isolation_level_is_refused_before_borrowing(db):
    with pytest.raises(InterfaceError, match="isolation"):
        db.transaction(isolation="snapshot")
    assert db.stats()["pinned"]["active"] == 0


def test_deferred_constraint_fails_at_commit_with_its_sqlstate(db):
    name = f"defer_{uuid.uuid4().hex[:10]}"
    with db.session() as s:
        s.execute(f"CREATE TABLE {name} (id int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
    try:
        with pytest.raises(errors.UniqueViolation) as failure, db.transaction() as tx:
            tx.execute(f"INSERT INTO {name} VALUES (1)")
            tx.execute(f"INSERT INTO {name} VALUES (1)")  # accepted until COMMIT
        assert failure.value.sqlstate == "23505"
        with db.session() as s:
            assert s.fetchval(f"SELECT count(*) FROM {name}") == 0
    finally:
        with db.session() as s:
            s.execute(f"DROP TABLE {name}")


def test_serialization_failure_surfaces_at_commit(db, table):
    """Write skew between two serializable transactions, every statement accepted:
    the first COMMIT wins, the second fails with 40001."""
    steps = {name: Event() for name in ("first_read", "second_read", "first_wrote",
                                        "second_wrote", "first_done")}
    reached_commit = []

    def first():
        with db.transaction(isolation="serializable") as tx:
            tx.fetchval(f"SELECT count(*) FROM {table} WHERE x = 2")
            steps["first_read"].set()
            steps["second_read"].wait()
            tx.execute(f"INSERT INTO {table} VALUES (1)")
            steps["first_wrote"].set()
            steps["second_wrote"].wait()
        steps["first_done"].set()

    def second():
        try:
            with db.transaction(isolation="serializable") as tx:
                steps["first_read"].wait()
                tx.fetchval(f"SELECT count(*) FROM {table} WHERE x = 1")
                steps["second_read"].set()
                steps["first_wrote"].wait()
                tx.execute(f"INSERT INTO {table} VALUES (2)")
                steps["second_wrote"].set()
                steps["first_done"].wait()
                reached_commit.append(True)
        except errors.SerializationFailure as exc:
            return exc

    jobs = [gevent.spawn(first), gevent.spawn(second)]
    gevent.joinall(jobs, raise_error=True)
    assert isinstance(jobs[1].value, errors.SerializationFailure)
    assert jobs[1].value.sqlstate == "40001"
    assert reached_commit == [True]  # every statement succeeded: the COMMIT failed
    assert rows(db, table) == [1]


def test_commit_of_a_failed_transaction_raises(db, table):
    with pytest.raises(errors.InFailedSqlTransaction), db.transaction() as tx:
        tx.execute(f"INSERT INTO {table} VALUES (1)")
        with pytest.raises(errors.DivisionByZero):
            tx.execute("SELECT 1/0")
    assert rows(db, table) == []


def test_connection_lost_during_commit_is_indeterminate(db, table):
    """A deferred trigger makes COMMIT slow; the backend is terminated meanwhile."""
    function = f"{table}_slow"
    with db.session() as s:
        s.execute(f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS "
                  "$$ BEGIN PERFORM pg_sleep(5); RETURN NULL; END $$")
        s.execute(f"CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON {table} "
                  f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {function}()")
    pids = []

    def committer():
        try:
            with db.transaction() as tx:
                pids.append(tx.session.pid)
                tx.execute(f"INSERT INTO {table} VALUES (1)")
        except IndeterminateResultError as exc:
            return exc

    job = gevent.spawn(committer)
    with db.session() as s:
        deadline = time.monotonic() + 5
        while s.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 "
                         "AND query = 'COMMIT' AND state = 'active'", pids or [0]) == 0:
            assert time.monotonic() < deadline
            gevent.sleep(0.02)
        assert s.fetchval("SELECT pg_terminate_backend($1)", pids) is True
    assert isinstance(job.get(), IndeterminateResultError)
    assert db.stats()["pinned"]["active"] == 0
    with db.session() as s:
        assert s.fetchval("SELECT 1") == 1
        s.execute(f"DROP TRIGGER slow ON {table}")
        s.execute(f"DROP FUNCTION {function}()")


def test_nested_transaction_on_a_session_is_refused(db):
    with db.session() as s:
        with s.transaction() as tx:
            with pytest.raises(InterfaceError, match="savepoint"), s.transaction():
                pass
            assert tx.fetchval("SELECT 1") == 1
        s.execute("BEGIN")
        with pytest.raises(InterfaceError), s.transaction():
            pass
        s.execute("ROLLBACK")


def test_handles_are_dead_after_their_block(db):
    with db.transaction() as tx:
        with tx.savepoint() as sp:
            sp.fetchval("SELECT 1")
        with pytest.raises(InterfaceError):
            sp.fetchval("SELECT 1")
    with pytest.raises(InterfaceError):
        tx.fetchval("SELECT 1")
    with pytest.raises(InterfaceError):
        tx.savepoint()


def test_begin_travels_with_the_first_statement(db, monkeypatch):
    with db.session() as s:  # opens the connection (which checks once for a pooler) and
        s.fetchval("SELECT 1")  # describes: from now on it needs no round trip of its own
    writes = record_writes(monkeypatch)
    with db.transaction() as tx, tx.savepoint():
        pass  # nothing ran: nothing is sent at all, not even a reset
    assert writes == []
    with db.transaction() as tx, tx.savepoint():
        tx.fetchval("SELECT 1")
    assert len(writes) == 3  # BEGIN+SAVEPOINT+SELECT, RELEASE, COMMIT: no reset after it
    assert b"BEGIN" in writes[0] and b"SAVEPOINT" in writes[0] and b"SELECT 1" in writes[0]
    assert b"RELEASE" in writes[1] and writes[2] == b"Q\x00\x00\x00\x0bCOMMIT\x00"


def test_the_reset_rides_with_commit_and_leaves_nothing_for_the_next_borrower(db):
    for _ in range(3):  # every pinned connection, each reset with its COMMIT
        with db.transaction() as tx:
            tx.execute("SET application_name = 'left-by-a-transaction'")
            tx.execute("CREATE TEMP TABLE tx_scratch (x int)")
        with db.transaction() as tx:
            assert tx.fetchval("SELECT current_setting('application_name')") != (
                "left-by-a-transaction")
            assert tx.fetchval("SELECT to_regclass('pg_temp.tx_scratch')::text") is None
    assert db.stats()["pinned"]["active"] == 0 and db.stats()["reconnects"] == 0


def test_a_commit_time_error_still_resets_and_keeps_the_connection(db):
    name = f"tx_deferred_{uuid.uuid4().hex[:8]}"
    with db.session() as s:
        s.execute(f"CREATE TABLE {name} (x int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
    try:
        for _ in range(3):
            with pytest.raises(errors.UniqueViolation), db.transaction() as tx:  # at COMMIT
                tx.execute("SET application_name = 'doomed'")
                tx.execute(f"INSERT INTO {name} VALUES (1), (1)")
            with db.transaction() as tx:
                assert tx.fetchval("SELECT current_setting('application_name')") != "doomed"
                assert tx.fetchval(f"SELECT count(*) FROM {name}") == 0
        assert db.stats()["reconnects"] == 0
    finally:
        with db.session() as s:
            s.execute(f"DROP TABLE {name}")


def test_after_a_session_a_known_statement_is_parsed_again_in_its_own_request(db, monkeypatch):
    sql = "SELECT $1::int + 1"
    with db.session() as s:
        assert s.fetchval(sql, [1]) == 2  # described and prepared
    writes = record_writes(monkeypatch)
    for i in range(4):  # every pinned connection, DISCARD ALL between borrowers
        with db.session() as s:
            assert s.fetchval(sql, [i]) == i + 1
    statement_writes = [w for w in writes if b"DISCARD ALL" not in w]
    assert len(statement_writes) == 4, "one request per execution: no description again"
    assert all(sql.encode() in w for w in statement_writes)  # parsed again, in that request


@pytest.mark.parametrize("change", ["drop", "alter", "rollback"])
def test_a_drop_alter_or_rollback_closes_the_cached_statements(db, change):
    """The same SQL may name a table with other columns afterwards (psycopg does the same)."""
    table = f"tx_drop_{uuid.uuid4().hex[:8]}"
    sql = f"SELECT x FROM {table} WHERE x > $1"
    with db.session() as s:
        if change == "rollback":  # prepared against a table that the rollback takes away
            s.execute("BEGIN")
            s.execute(f"CREATE TABLE {table} (x real)")
            assert s.fetchval(sql, [1.0]) is None
            s.execute("ROLLBACK")
            s.execute(f"CREATE TABLE {table} (x numeric)")
        else:
            s.execute(f"CREATE TABLE {table} (x real)")
            assert s.fetchval(sql, [1.0]) is None
            if change == "drop":
                s.execute(f"DROP TABLE {table}")
                s.execute(f"CREATE TABLE {table} (x numeric)")
            else:
                s.execute(f"ALTER TABLE {table} ALTER x TYPE numeric")
        s.execute(f"INSERT INTO {table} VALUES (1.5)")
        with s.transaction() as tx:  # no retry is possible in here: it must just work
            assert tx.fetchval(sql, [1.0]) == Decimal("1.5")
        s.execute(f"DROP TABLE {table}")


def test_sessions_transactions_and_savepoints_can_be_weakly_referenced(db):
    """As in pure Python, so are the compiled classes (a registry of open sessions, a
    framework's per-request bookkeeping, may hold them weakly)."""
    with db.session() as s, s.transaction() as tx, tx.savepoint() as sp:
        refs = [weakref.ref(obj) for obj in (s, tx, sp)]
        assert [ref() for ref in refs] == [s, tx, sp]
        assert sp.fetchval("SELECT 1") == 1
    del s, tx, sp
    gc.collect()
    assert [ref() for ref in refs] == [None, None, None]
