"""Fork safety: a child reconnects and never touches the parent's connections."""

from __future__ import annotations

import time

import gevent
import gevent.os
from support.fork import run_in_child
from support.mux import PATIENCE, drivers, join_all, wait_until


def test_child_reconnects_and_the_parents_connections_keep_working(clients):
    db = clients(pipeline_size=2)
    stmt = db.prepare("mux_fork", "SELECT $1::int * 3", types=["int"])
    parent_pids = {d.conn.pid for d in drivers(db)}
    assert clients.backend_pids(db) == parent_pids
    # parent queries in flight across the fork: the child must not steal their replies
    in_flight = [gevent.spawn(db.fetchval, "SELECT $1::int FROM pg_sleep(0.2)", [i])
                 for i in range(10)]
    wait_until(lambda: sum(d.load for d in drivers(db)) == 10, what="parent work in flight")

    def child_work():
        deadline = time.monotonic() + PATIENCE
        with gevent.Timeout(PATIENCE):
            pids = {db.fetchval("SELECT pg_backend_pid()") for _ in range(10)}
            values = [stmt.fetchval([i]) for i in range(5)]
            jobs = [gevent.spawn(db.fetchval, "SELECT $1::int", [i]) for i in range(50)]
            gevent.joinall(jobs, timeout=deadline - time.monotonic())
            burst = [job.value for job in jobs]
            db.close()
        return {"pids": sorted(pids), "values": values, "burst": burst}

    report = run_in_child(child_work)
    assert report["values"] == [0, 3, 6, 9, 12]
    assert report["burst"] == list(range(50))
    assert report["pids"] and not set(report["pids"]) & parent_pids

    join_all(in_flight)
    assert [job.value for job in in_flight] == list(range(10))
    assert {d.conn.pid for d in drivers(db)} == parent_pids
    assert {db.fetchval("SELECT pg_backend_pid()") for _ in range(10)} <= parent_pids
    assert stmt.fetchval([7]) == 21
    assert db.stats()["reconnects"] == 0
    assert clients.backend_pids(db) == parent_pids  # the child's own backends are gone too


def test_a_client_never_started_works_in_the_child(clients):
    db = clients(pipeline_size=1, start=False)
    report = run_in_child(lambda: {"value": db.fetchval("SELECT 40 + $1::int", [2])})
    assert report["value"] == 42
    assert db.fetchval("SELECT 1") == 1
