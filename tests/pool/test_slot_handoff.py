"""Slots handed over in line, against the real server: when every slot is taken,
the driver that frees one builds and submits the next caller's request itself, in
arrival order (on one connection and across several), by the router's rule for
known-slow statements, under 4,096 callers; a statement in line that waits too long
leaves it with its own PoolTimeout, a killed caller's leave it at once; and a request
described while the caches churn keeps its place and what it learned."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import gevent
from support.mux import (
    driver_stats,
    drivers,
    join_all,
    outcome,
    sampled,
    total,
    wait_until,
    warm,
)

from pgmux.engine import Engine, Exchange
from pgmux.errors import PoolTimeout
from pgmux.pool import dispatch

SQL = "SELECT $1::int"
SLOW = "SELECT pg_sleep($1::float8)"
CALLERS = 4096


def test_callers_in_line_are_served_in_arrival_order(clients):
    """On one connection the answers come in the order the requests were written, so the
    order callers return in is the order their slots were handed over: arrival order."""
    db = clients(pipeline_size=1, max_in_flight=64)
    warm(db, SQL, [0])
    returned: list[int] = []

    def caller(i: int) -> None:
        assert db.fetchval(SQL, [i]) == i
        returned.append(i)

    jobs = [gevent.spawn(caller, i) for i in range(CALLERS)]
    wait_until(lambda: db._pipeline.queued > CALLERS // 2, what="callers in line")
    join_all(jobs)
    assert returned == list(range(CALLERS))
    assert db._pipeline.queued == 0 and total(db, "load") == 0


def test_callers_in_line_are_served_in_arrival_order_across_connections(clients):
    """Four connections answer in no common order, but the slots they free go to callers
    in the order they joined the line: each request is built (served) in arrival order,
    whichever connection builds it."""
    db = clients(pipeline_size=4, max_in_flight=8)
    warm(db, SQL, [0])
    served: list[int] = []
    engines: Counter[Engine] = Counter()

    def build(engine: Engine, i: int) -> Exchange:
        served.append(i)
        engines[engine] += 1
        return Engine.query(engine, SQL, *db.types.encode_params([i]))

    jobs = [gevent.spawn(dispatch.run, db._pipeline, build, (i,), None)
            for i in range(CALLERS)]
    wait_until(lambda: db._pipeline.queued > CALLERS // 2, what="callers in line")
    join_all(jobs)
    assert [job.value.result().rows[0][0] for job in jobs] == list(range(CALLERS))
    assert served == list(range(CALLERS))
    assert len(engines) == 4 and min(engines.values()) > CALLERS // 8, engines
    assert db._pipeline.queued == 0 and total(db, "load") == 0


def test_each_statement_of_a_fan_out_in_line_gets_its_own_pool_timeout(clients):
    """Every slot held by slow statements: a fan-out's statements wait in line, and each
    that is not served within acquire_timeout leaves it with a PoolTimeout of its own."""
    db = clients(pipeline_size=1, max_in_flight=2, acquire_timeout=0.2)
    warm(db, SQL, [0])
    warm(db, SLOW, [0.0])
    holders = [gevent.spawn(db.fetchval, SLOW, [0.5]) for _ in range(2)]
    wait_until(lambda: total(db, "in_flight") == 2, what="the slow ones in flight")
    started = time.monotonic()
    answers = db.gather([(SQL, [i]) for i in range(5)], return_exceptions=True)
    assert time.monotonic() - started >= 0.15
    assert all(isinstance(answer, PoolTimeout) for answer in answers)
    assert len({id(answer) for answer in answers}) == 5
    assert db._pipeline.queued == 0
    join_all(holders)
    assert db.gather([(SQL, [i]) for i in range(5)]) == [[(i,)] for i in range(5)]
    assert total(db, "load") == 0 and db.stats()["counters"]["pipeline"]["waiting"] == 0


def test_killing_a_fan_out_whose_statements_wait_in_line_empties_the_line(clients):
    db = clients(pipeline_size=1, max_in_flight=2)
    warm(db, SQL, [0])
    warm(db, SLOW, [0.0])
    holders = [gevent.spawn(db.fetchval, SLOW, [0.5]) for _ in range(2)]
    wait_until(lambda: total(db, "in_flight") == 2, what="the slow ones in flight")
    caller = gevent.spawn(db.gather, [(SQL, [i]) for i in range(50)])
    wait_until(lambda: db._pipeline.queued == 50, what="the fan-out in line")
    caller.kill()
    assert db._pipeline.queued == 0 and db.stats()["counters"]["pipeline"]["waiting"] == 0
    join_all(holders)
    assert db.fetchval(SQL, [7]) == 7
    assert total(db, "load") == 0 and total(db, "pending") == 0


def test_a_slot_is_never_taken_past_the_line(clients):
    """Newcomers queue behind the line even while slots free: 4,096 callers on two
    connections with 8 slots each never put more than 8 in flight on either."""
    db = clients(pipeline_size=2, max_in_flight=8)
    warm(db, SQL, [0])
    with sampled(lambda: [driver.load for driver in drivers(db)]) as loads:
        jobs = [gevent.spawn(db.fetchval, SQL, [i]) for i in range(CALLERS)]
        join_all(jobs)
    assert [job.value for job in jobs] == list(range(CALLERS))
    assert [max(column) for column in zip(*loads, strict=True)] == [8, 8]
    units = [d["units"] for d in driver_stats(db)]
    assert min(units) > CALLERS // 4, f"both connections should take their share: {units}"


def test_routing_around_slow_work_holds_for_callers_in_line(clients):
    """Known-slow statements on three of four connections: 4,096 fast callers in line are
    served only by the connection free of slow work, and slow callers that come while the
    fast ones wait are served by the slow lanes, not the fast one."""
    db = clients(pipeline_size=4, max_in_flight=16)
    warm(db, SQL, [0])
    for _ in drivers(db):  # known slow everywhere
        db.fetchval(SLOW, [0.05])
    sleepers = [gevent.spawn(db.fetchval, SLOW, [3.0]) for _ in range(6)]
    wait_until(lambda: total(db, "slow_in_flight") == 6, what="the slow ones in flight")
    lanes = [d for d in drivers(db) if d.slow_in_flight == 0]
    assert len(lanes) == 1, "slow work leaves one connection to the fast ones"
    (fast_lane,) = lanes
    before = {d: d.units for d in drivers(db)}
    returned: list[int] = []

    def fast(i: int) -> None:
        assert db.fetchval(SQL, [i]) == i
        returned.append(i)

    jobs = [gevent.spawn(fast, i) for i in range(CALLERS)]
    wait_until(lambda: db._pipeline.queued > 100, what="fast callers in line")
    late_slow = [gevent.spawn(db.fetchval, SLOW, [0.1]) for _ in range(3)]
    join_all(jobs)
    assert returned == list(range(CALLERS))  # one lane: served in arrival order
    assert not any(job.ready() for job in sleepers)
    grew = {d: d.units - units for d, units in before.items()}
    assert grew[fast_lane] == CALLERS
    assert all(grew[d] == 0 for d in drivers(db) if d is not fast_lane)
    join_all(late_slow)
    assert fast_lane.units - before[fast_lane] == CALLERS, "a slow caller took the fast lane"
    gevent.killall(sleepers)


TEXTS = 400  # distinct SQL texts: far more than the caches below hold


def churning(clients):
    """A client whose caches hold far fewer statements than ``TEXTS``: 8 per connection
    and 32 descriptions client-wide (white box: the default is 4,096), with 8 slots."""
    db = clients(pipeline_size=2, max_in_flight=4, statement_cache_size=8)
    db._descriptions.limit = 32
    return db


def test_a_description_is_never_taken_for_schema_churn_under_a_long_line(clients):
    """2,000 callers in line for 8 slots, each with one of 400 SQL texts: a statement's
    description is dropped from the caches long before its caller's turn would come again.
    The request keeps its slot and what the description said, and runs next, so no caller
    fails as if the schema kept changing (before: back in line, described again, 16 times
    over, then "the statement's description changed 16 times in a row")."""
    db = churning(clients)

    def caller(i: int) -> tuple[str, Any]:
        return outcome(lambda: db.fetchval(f"SELECT $1::int + {i % TEXTS}", [i]))

    jobs = [gevent.spawn(caller, i) for i in range(5 * TEXTS)]
    join_all(jobs)
    assert [job.value for job in jobs] == [("ok", i + i % TEXTS) for i in range(5 * TEXTS)]
    assert db._pipeline.queued == 0 and total(db, "load") == 0


def test_a_fan_out_never_takes_a_description_for_schema_churn_under_a_long_line(clients):
    """The same for fan-outs: 100 callers gather 20 statements each, of 400 texts."""
    db = churning(clients)

    def caller(i: int) -> list[Any]:
        statements = [(f"SELECT $1::int + {(i * 20 + j) % TEXTS}", [i]) for j in range(20)]
        answers = db.gather(statements, return_exceptions=True)
        return [a if isinstance(a, BaseException) else a[0][0] for a in answers]

    jobs = [gevent.spawn(caller, i) for i in range(100)]
    join_all(jobs)
    assert [job.value for job in jobs] == [
        [i + (i * 20 + j) % TEXTS for j in range(20)] for i in range(100)]
    assert db._pipeline.queued == 0 and total(db, "load") == 0
