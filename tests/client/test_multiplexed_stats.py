"""``db.stats()``: the shape api.md promises and counters that are actually counted."""

from __future__ import annotations

import gevent
import pytest
from support.mux import driver_stats, join_all, wait_until

from pgmux.client import Client

TOP_KEYS = {"pipeline", "pinned", "counters", "prepared_statements", "reconnects", "hosts"}
PIPELINE_KEYS = {"size", "live", "rotations", "draining", "drivers"}
PINNED_KEYS = {"size", "active", "free", "waiting"}
DRIVER_KEYS = {
    "load", "pending", "in_flight", "units", "readables", "units_per_readable",
    "results_per_readable", "flush_calls_per_unit", "flush_incomplete", "reconnects",
    "host", "standby", "slow_in_flight", "index",
}


def test_stats_shape_before_start(pg):
    db = Client(pg.dsn, pipeline_size=3, pinned_size=1)
    stats = db.stats()
    assert set(stats) == TOP_KEYS
    assert stats["pipeline"] == {"size": 3, "live": 0, "rotations": 0, "draining": 0,
                                 "drivers": []}
    assert stats["hosts"] == {}
    assert set(stats["pinned"]) == PINNED_KEYS
    assert (stats["prepared_statements"], stats["reconnects"]) == (0, 0)
    db.close()


def test_stats_shape_when_running(clients):
    db = clients(pipeline_size=3)
    db.prepare("mux_stats", "SELECT 1")
    stats = db.stats()
    assert set(stats) == TOP_KEYS
    assert set(stats["pipeline"]) == PIPELINE_KEYS
    assert (stats["pipeline"]["size"], stats["pipeline"]["live"]) == (3, 3)
    assert len(stats["pipeline"]["drivers"]) == 3
    for driver in stats["pipeline"]["drivers"]:
        assert set(driver) == DRIVER_KEYS
        assert driver["load"] == driver["pending"] + driver["in_flight"] == 0
        assert (driver["host"], driver["standby"]) == (f"127.0.0.1:{db.conninfo.ports[0]}", False)
    assert stats["hosts"] == {f"127.0.0.1:{db.conninfo.ports[0]}": {"down_for": 0.0,
                                                                     "standby": False}}
    assert stats["prepared_statements"] == 1
    assert stats["reconnects"] == 0


def test_sequential_queries_are_counted_one_by_one(clients):
    db = clients(pipeline_size=1)
    for i in range(10):
        assert db.fetchval("SELECT $1::int", [i]) == i
    driver = driver_stats(db)[0]
    assert driver["units"] == 11  # the first execution is described first
    # nothing else was in flight: every unit needed its own write and its own read
    assert driver["readables"] == 11
    assert driver["units_per_readable"] == 1.0
    assert driver["flush_calls_per_unit"] == 1.0
    assert driver["results_per_readable"] >= 3  # BindComplete, DataRow, CommandComplete, RFQ
    assert driver["flush_incomplete"] == 0


def test_a_burst_of_64_callers_costs_a_handful_of_writes(clients):
    db = clients(pipeline_size=1)
    jobs = [gevent.spawn(db.fetchval, "SELECT $1::int", [i]) for i in range(64)]
    join_all(jobs)
    assert [job.value for job in jobs] == list(range(64))
    driver = driver_stats(db)[0]
    assert driver["units"] == 65  # one description, shared by every caller, then 64 queries
    flushes = round(driver["flush_calls_per_unit"] * 65)
    assert flushes <= 5, f"{flushes} writes for 64 callers"


@pytest.mark.parametrize("sslmode", ["disable", "require"])
def test_large_writes_and_reads_at_once_do_not_deadlock(clients, sslmode):
    db = clients(pipeline_size=1, sslmode=sslmode)
    payload = "w" * (8 * 1024 * 1024)
    writes = [gevent.spawn(db.fetchval, "SELECT length($1::text)", [payload]) for _ in range(4)]
    reads = [gevent.spawn(db.fetchval, "SELECT repeat('r', 8 * 1024 * 1024)") for _ in range(4)]
    join_all(writes + reads)
    assert [job.value for job in writes] == [len(payload)] * 4
    assert all(job.value == "r" * (8 * 1024 * 1024) for job in reads)
    if sslmode == "disable":  # (a TLS send writes everything or waits: never incomplete)
        assert driver_stats(db)[0]["flush_incomplete"] >= 1  # the socket buffer filled up


def test_reconnects_are_counted_per_client_and_per_driver(clients):
    db = clients(pipeline_size=2)
    victim = db.fetchval("SELECT pg_backend_pid()")
    assert clients.admin.fetchval("SELECT pg_terminate_backend($1)", [victim]) is True
    wait_until(lambda: db.stats()["reconnects"] == 1 and db.stats()["pipeline"]["live"] == 2,
               what="the connection replaced")
    per_driver = sorted(d["reconnects"] for d in driver_stats(db))
    assert per_driver == [0, 1]
    assert db.fetchval("SELECT 1") == 1
