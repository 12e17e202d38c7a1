"""Explicit pipelines on a session, against a real server."""

from __future__ import annotations

import uuid

import gevent
import pytest
from support.pinned import raised_elsewhere

from pgmux import errors
from pgmux.errors import InterfaceError, PipelineAborted, QueryTimeout


@pytest.fixture
def db(pinned_client):
    return pinned_client(pinned_size=1)


@pytest.fixture
def session(db):
    with db.session() as s:
        yield s


def test_results_come_back_in_order(session):
    session.execute("CREATE TEMP TABLE t (x int)")
    with session.pipeline() as p:
        values = [p.query("SELECT $1::int AS n", [i]) for i in range(50)]
        insert = p.execute("INSERT INTO t SELECT generate_series(1, 3)")
        count = p.query("SELECT count(*) FROM t")
        p.sync()
        assert [op.result()[0][0] for op in values] == list(range(50))
        assert values[0].result().columns == ("n",)
        assert insert.result() == 3
        assert count.result()[0][0] == 3
    assert session.fetchval("SELECT count(*) FROM t") == 3


def test_with_telemetry_off_it_keeps_no_operation_once_run(session):
    with session.pipeline() as p:
        handle = p.query("SELECT $1::int", [1])
        p.sync()
        assert p._ops is None  # (kept, params and results, only for telemetry)
    assert handle.result()[0][0] == 1


def test_an_error_aborts_only_the_rest_of_its_group(session):
    session.execute("CREATE TEMP TABLE t (x int)")
    with session.pipeline() as p:
        first = p.query("SELECT 1")
        failing = p.query("SELECT 1/0")
        skipped = p.query("SELECT 3")
        p.sync()
        later = p.query("SELECT $1::int", [4])
        kept = p.execute("INSERT INTO t VALUES (1)")
        p.sync()
    assert first.result()[0][0] == 1
    with pytest.raises(errors.DivisionByZero) as failure:
        failing.result()
    assert failure.value.sqlstate == "22012"
    with pytest.raises(PipelineAborted):
        skipped.result()
    assert later.result()[0][0] == 4
    assert kept.result() == 1
    assert session.fetchval("SELECT count(*) FROM t") == 1


def test_a_group_is_one_implicit_transaction(session):
    """Without BEGIN, an error rolls back the operations before it in the same group."""
    session.execute("CREATE TEMP TABLE t (x int)")
    with session.pipeline() as p:
        rolled_back = p.execute("INSERT INTO t VALUES (1)")
        p.query("SELECT 1/0")
        p.sync()
        p.execute("INSERT INTO t VALUES (2)")
    assert rolled_back.result() == 1  # it ran, then its group was rolled back
    assert [row[0] for row in session.query("SELECT x FROM t")] == [2]


def test_commit_time_error_at_the_sync_fails_every_operation_of_the_group(session):
    session.execute("CREATE TEMP TABLE t (id int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
    with session.pipeline() as p:
        a = p.execute("INSERT INTO t VALUES (1)")
        b = p.execute("INSERT INTO t VALUES (1)")
        p.sync()
        after = p.query("SELECT count(*) FROM t")
    for op in (a, b):
        with pytest.raises(errors.UniqueViolation):
            op.result()
    assert after.result()[0][0] == 0


def test_leaving_the_block_early_sends_the_final_sync(session):
    session.execute("CREATE TEMP TABLE t (x int)")

    def queue_and_return():
        with session.pipeline() as p:
            insert = p.execute("INSERT INTO t VALUES (1), (2)")
            select = p.query("SELECT count(*) FROM t")
            return insert, select  # no sync(): leaving the block does it

    insert, select = queue_and_return()
    assert insert.result() == 2
    assert select.result()[0][0] == 2
    assert session.transaction_status == "I"
    assert session.fetchval("SELECT count(*) FROM t") == 2


def test_an_exception_in_the_block_still_drains_what_was_queued(session):
    session.execute("CREATE TEMP TABLE t (x int)")
    with pytest.raises(ValueError), session.pipeline() as p:
        insert = p.execute("INSERT INTO t VALUES (1)")
        p.sync()
        also = p.query("SELECT 2")
        raise ValueError("user code failed")
    assert insert.result() == 1
    assert also.result()[0][0] == 2
    assert session.fetchval("SELECT count(*) FROM t") == 1


def test_error_inside_an_explicit_transaction_leaves_it_failed_until_rollback(session):
    session.execute("CREATE TEMP TABLE t (x int)")
    with session.pipeline() as p:
        p.execute("BEGIN")
        inserted = p.execute("INSERT INTO t VALUES (1)")
        failing = p.query("SELECT 1/0")
        skipped = p.query("SELECT 1")
        p.sync()
        in_failed = p.query("SELECT 2")  # a new group, but the transaction is failed
        p.sync()
    assert inserted.result() == 1
    with pytest.raises(errors.DivisionByZero):
        failing.result()
    with pytest.raises(PipelineAborted):
        skipped.result()
    with pytest.raises(errors.InFailedSqlTransaction):
        in_failed.result()
    assert session.transaction_status == "E"
    with pytest.raises(errors.InFailedSqlTransaction):
        session.fetchval("SELECT 1")
    with session.pipeline() as p:
        rollback = p.execute("ROLLBACK")
        count = p.query("SELECT count(*) FROM t")
    assert rollback.result() == -1
    assert count.result()[0][0] == 0
    assert session.transaction_status == "I"


def test_pipeline_inside_a_transaction_block(db):
    with db.transaction() as tx:
        tx.execute("CREATE TEMP TABLE t (x int)")
        with tx.pipeline() as p:
            for i in range(5):
                p.execute("INSERT INTO t VALUES ($1)", [i])
            p.sync()
        assert tx.fetchval("SELECT sum(x) FROM t") == 10
        assert tx.session.transaction_status == "T"


def test_misuse_is_refused(session):
    with session.pipeline() as p:
        pending = p.query("SELECT 1")
        with pytest.raises(InterfaceError, match="sync"):
            pending.result()
        with pytest.raises(InterfaceError, match="pipeline is open"):
            session.fetchval("SELECT 1")
        assert "greenlet" in str(raised_elsewhere(p.query, "SELECT 2"))
        p.sync()
        assert pending.result()[0][0] == 1
    with pytest.raises(InterfaceError, match="not open"):
        p.query("SELECT 3")
    assert session.fetchval("SELECT 4") == 4


def test_large_pipelines_do_not_deadlock(session):
    """Megabytes of requests and replies: written while the replies are read."""
    payload = "x" * 200
    with session.pipeline() as p:
        ops = [p.query("SELECT $1::int, $2::text", [i, payload]) for i in range(20_000)]
        p.sync()
        grouped = []
        for i in range(2_000):
            grouped.append(p.query("SELECT $1::int", [i]))
            if i % 10 == 9:
                p.sync()
    assert [op.result()[0] for op in ops[::997]] == [(i, payload) for i in range(0, 20_000, 997)]
    assert [op.result()[0][0] for op in grouped] == list(range(2_000))


def test_pipeline_timeout_cancels_the_running_operation(session):
    with session.pipeline(timeout=0.2) as p:
        slow = p.query("SELECT pg_sleep(5)")
        skipped = p.query("SELECT 1")
        p.sync()
        after = p.query("SELECT 2")
    with pytest.raises(QueryTimeout) as failure:
        slow.result()
    assert failure.value.sqlstate == "57014"
    with pytest.raises(PipelineAborted):
        skipped.result()
    assert after.result()[0][0] == 2
    assert session.fetchval("SELECT 3") == 3


def test_interrupted_pipeline_replaces_the_connection(db):
    with db.session() as s:
        pid = s.pid
        with pytest.raises(gevent.Timeout), gevent.Timeout(0.2), s.pipeline() as p:
            op = p.query("SELECT pg_sleep(5)")
            p.sync()
            op.result()
    assert db.stats()["pinned"] == {"size": 1, "active": 0, "free": 1, "waiting": 0}
    with db.session() as s:
        assert s.pid != pid
        assert s.fetchval("SELECT 1") == 1


def test_pipeline_data_is_not_left_for_the_next_borrower(db):
    name = f"pl_{uuid.uuid4().hex[:8]}"
    with db.session() as s, s.pipeline() as p:
        p.execute(f"CREATE TEMP TABLE {name} (x int)")
        p.execute("SET application_name = 'pipelined'")
    with db.session() as s:
        assert s.fetchval(f"SELECT to_regclass('pg_temp.{name}')::text") is None
        assert s.fetchval("SHOW application_name") != "pipelined"


def test_a_group_larger_than_the_buffer_stays_aborted_across_its_flushes(session):
    """A group over PIPELINE_BUFFER is written in several flushes; an error read after
    the first aborts what the later ones would have written, and nothing else."""
    session.execute("CREATE TEMP TABLE t (x int)")
    chunk = "x" * 300_000
    with session.pipeline(timeout=10) as p:  # a flush waiting for skipped replies fails
        before = p.execute("INSERT INTO t VALUES (1)")
        failing = p.query("SELECT 1/0")
        later = [p.execute("INSERT INTO t SELECT length($1::text)", [chunk]) for _ in range(8)]
        p.sync()
        after = p.query("SELECT count(*) FROM t")
    assert before.result() == 1
    with pytest.raises(errors.DivisionByZero):
        failing.result()
    for op in later:
        with pytest.raises(PipelineAborted):
            op.result()
    assert after.result()[0][0] == 0  # the group's implicit transaction rolled back whole
    assert session.fetchval("SELECT 2") == 2
