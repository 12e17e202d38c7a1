"""Known-slow statements are kept from holding fast ones hostage (head-of-line blocking).

A statement whose server time was long (``slow_query_threshold``) is remembered; from
then on fast statements avoid the connections where one is in flight, and slow ones
spread over the connections free of slow work but always leave one to the fast.
"""

from __future__ import annotations

import gevent
from support.mux import driver_stats, drivers, join_all, total, wait_until, warm

from pgmux.engine.costs import StatementCosts

SLOW = "SELECT pg_sleep($1::float8)"


def learn_slow(db, seconds: float = 0.05) -> None:
    """Run the slow statement on every connection, one at a time, so it is known slow."""
    for _ in drivers(db):
        db.fetchval(SLOW, [seconds])
    assert db._costs.is_slow((SLOW, db.types.encode_params([seconds])[0]))


def test_a_statement_is_known_slow_after_a_slow_execution_and_fast_ones_are_not(clients):
    db = clients(pipeline_size=2)
    warm(db, "SELECT $1::int", [0])
    for i in range(200):
        db.fetchval("SELECT $1::int", [i])
    costs = db._costs
    assert not costs.is_slow(("SELECT $1::int", (23,)))
    learn_slow(db)
    assert not costs.is_slow(("SELECT $1::int", (23,)))


def test_fast_statements_avoid_connections_with_slow_work_in_flight(clients):
    db = clients(pipeline_size=4)
    warm(db, "SELECT $1::int", [0])
    learn_slow(db)
    sleepers = [gevent.spawn(db.fetchval, SLOW, [2.0]) for _ in range(6)]
    wait_until(lambda: total(db, "slow_in_flight") == 6, what="the slow ones in flight")
    lanes = [d for d in driver_stats(db) if d["slow_in_flight"] == 0]
    assert len(lanes) == 1, "slow work leaves one connection to the fast ones"
    before = [d["units"] for d in driver_stats(db)]
    for i in range(100):  # while every sleeper still sleeps
        assert db.fetchval("SELECT $1::int", [i]) == i
    assert not any(job.ready() for job in sleepers)
    after = [d["units"] for d in driver_stats(db)]
    grew = [i for i, (b, a) in enumerate(zip(before, after, strict=True)) if a > b]
    assert len(grew) == 1 and driver_stats(db)[grew[0]]["slow_in_flight"] == 0
    gevent.killall(sleepers)


def test_slow_work_spreads_over_the_connections_free_of_it_first(clients):
    db = clients(pipeline_size=4)
    learn_slow(db)
    sleepers = [gevent.spawn(db.fetchval, SLOW, [2.0]) for _ in range(2)]
    wait_until(lambda: total(db, "slow_in_flight") == 2, what="two slow ones in flight")
    assert sorted(d["slow_in_flight"] for d in driver_stats(db)) == [0, 0, 1, 1]
    gevent.killall(sleepers)


def test_a_statement_fast_again_is_forgotten():
    costs = StatementCosts(slow_after=0.01)
    key = ("SELECT 1", ())
    costs.note(key, 0.05)
    assert costs.is_slow(key) and costs.known
    for _ in range(20):
        costs.note(key, 0.0001)
    assert not costs.is_slow(key) and not costs.tracks(key) and not costs.known


def test_slow_statements_at_a_10_ms_round_trip_are_told_from_the_round_trip(pg, clients):
    """The network's round trip is not server time: at 10 ms, a fast statement is fast."""
    from pgmux.tooling.proxy import DelayProxy

    proxy = DelayProxy(("127.0.0.1", pg.embedded_server.port), 0.01).start()
    try:
        db = clients(pipeline_size=2, host="127.0.0.1", port=proxy.port)
        join_all([gevent.spawn(db.fetchval, "SELECT $1::int", [i]) for i in range(50)])
        for i in range(20):  # one at a time: each pays the whole round trip
            db.fetchval("SELECT $1::int", [i])
        assert not db._costs.known, db._costs
        learn_slow(db)
    finally:
        proxy.stop()
