"""Client lifecycle: lazy start, ``Client.open``, and ``close()`` finishing in-flight work."""

from __future__ import annotations

import logging
import time

import gevent
import pytest
from support.mux import drivers, join_all, outcome, spawn_described, total, wait_until, warm

from pgmux.client import Client
from pgmux.errors import IndeterminateResultError, InterfaceError, NotDispatchedError
from pgmux.io.transport import Transport
from pgmux.protocol import frontend


def test_connections_open_on_first_use(clients):
    db = clients(pipeline_size=2, start=False)
    assert db.stats()["pipeline"]["live"] == 0
    assert clients.backend_pids(db) == set()
    assert db.fetchval("SELECT 1") == 1
    assert db.stats()["pipeline"]["live"] == 2
    assert len(clients.backend_pids(db)) == 2


def test_client_open_as_a_context_manager(pg):
    with Client.open(pg.dsn, pipeline_size=1) as db:
        assert db.stats()["pipeline"]["live"] == 1  # started on enter
        assert db.fetchval("SELECT 5") == 5
    assert db.closed
    with pytest.raises(InterfaceError):
        db.fetchval("SELECT 5")


def test_close_finishes_in_flight_work_and_sends_terminate(clients, monkeypatch):
    db = clients(pipeline_size=2)
    sent_terminate = []
    real_sendall = Transport.sendall

    def spy(transport, data):
        if bytes(data) == frontend.TERMINATE:
            sent_terminate.append(transport)
        return real_sendall(transport, data)

    monkeypatch.setattr(Transport, "sendall", spy)
    transports = {id(d.conn.transport) for d in drivers(db)}
    sql = "SELECT $1::int FROM pg_sleep(0.05)"
    warm(db, sql, [0])  # described: each job below is one query in flight
    jobs = [gevent.spawn(db.fetchval, sql, [i]) for i in range(20)]
    wait_until(lambda: total(db, "in_flight") == 20, what="20 queries in flight")
    started = time.monotonic()
    db.close()
    assert time.monotonic() - started < 3.0
    assert all(job.ready() for job in jobs), "close() returned before in-flight work finished"
    assert [job.value for job in jobs] == list(range(20))
    assert {id(t) for t in sent_terminate} == transports
    wait_until(lambda: not clients.backend_pids(db), what="the backends to go away")


def test_close_fails_waiting_callers_clearly(clients):
    db = clients(pipeline_size=1, max_in_flight=1)
    slow = spawn_described(db, "SELECT 'slow' FROM pg_sleep($1)", 0.2)
    wait_until(lambda: total(db, "in_flight") == 1, what="the slow query in flight")
    waiters = [gevent.spawn(outcome, lambda: db.fetchval("SELECT 1")) for _ in range(5)]
    wait_until(lambda: db._pipeline.queued == 5, what="5 queued callers")
    closer = gevent.spawn(db.close)
    join_all(waiters, timeout=1.0)
    for job in waiters:
        kind, error = job.value
        assert kind == "error" and isinstance(error, NotDispatchedError), error
        assert "closed" in str(error)
    join_all([closer, slow])
    assert slow.value == "slow"


def test_calls_after_close_raise_interface_error(clients):
    db = clients(pipeline_size=2)
    stmt = db.prepare("mux_after_close", "SELECT 1")
    db.close()
    db.close()  # idempotent
    assert db.closed
    for call in (lambda: db.query("SELECT 1"), lambda: db.fetchval("SELECT 1"),
                 lambda: db.execute("SELECT 1"), lambda: db.prepare("other", "SELECT 2"),
                 lambda: stmt.fetchval(), db.start):
        with pytest.raises(InterfaceError, match="closed"):
            call()
    assert db.stats()["pipeline"]["live"] == 0


def test_close_with_a_short_timeout_does_not_wait_for_a_stuck_query(clients):
    db = clients(pipeline_size=1)
    sleep = "SELECT 1 FROM pg_sleep($1)"
    db.fetchval(sleep, [0])  # described and prepared: the next call is the query itself
    stuck = gevent.spawn(outcome, lambda: db.fetchval(sleep, [5]))
    wait_until(lambda: total(db, "in_flight") == 1, what="the query in flight")
    started = time.monotonic()
    db.close(timeout=0.2)
    assert time.monotonic() - started < 2.0
    join_all([stuck], timeout=1.0)
    kind, error = stuck.value
    assert kind == "error" and isinstance(error, IndeterminateResultError), error


def test_close_under_load_logs_no_reader_failure(clients, caplog):
    """TLS: close() ends the reader quietly, however its last read raced the shutdown
    (a race: each round has a fair chance to hit it, twenty rounds almost surely do)."""
    for _ in range(20):
        db = clients(pipeline_size=4, sslmode="require")
        stop = gevent.event.Event()

        def worker(db=db, stop=stop):
            while not stop.is_set():
                kind, _ = outcome(lambda: db.fetchval("SELECT 1"))
                if kind == "error":
                    return

        jobs = [gevent.spawn(worker) for _ in range(64)]
        wait_until(lambda db=db: total(db, "units") > 1000, what="load")
        loops = [g for d in drivers(db) for g in (d._reader, d._writer)]
        stop.set()
        db.close()
        join_all(jobs + loops)  # the reader and writer greenlets have ended
    failures = [r for r in caplog.records if r.name == "pgmux" and r.levelno >= logging.ERROR]
    assert not failures, failures[0].getMessage() + "\n" + (failures[0].exc_text or "")
