"""The failure model: lost backends, NotDispatched retries, timeouts and kills, slot limits."""

from __future__ import annotations

import time

import gevent
import pytest
from support.mux import (
    PATIENCE,
    driver_stats,
    drivers,
    join_all,
    outcome,
    sampled,
    spawn_described,
    total,
    unique_name,
    wait_until,
    warm,
)

from pgmux.errors import (
    IndeterminateResultError,
    InterfaceError,
    NotDispatchedError,
    OperationalError,
    PoolTimeout,
    QueryTimeout,
)


def live(db) -> int:
    return db.stats()["pipeline"]["live"]


def no_stuck_turns(db) -> bool:
    """No queued caller and no turn handed to a caller that never took it (white box)."""
    pool = db._pipeline
    return pool.queued == 0 and pool.reserved == 0


# -- a connection dies under load -------------------------------------------------------


def test_terminating_every_backend_with_200_queries_in_flight(clients):
    db = clients(pipeline_size=2, max_in_flight=64)
    stmt = db.prepare("mux_add_one", "SELECT $1::int + 1", types=["int"])
    assert stmt.fetchval([1]) == 2
    old_pids = clients.backend_pids(db)
    assert old_pids == {d.conn.pid for d in drivers(db)} and len(old_pids) == 2
    reconnects = db.stats()["reconnects"]
    outcomes: dict[int, tuple[str, object, float]] = {}

    def caller(i, sql):
        kind, value = outcome(lambda: db.fetchval(sql, [i]))
        outcomes[i] = (kind, value, time.monotonic())

    sleeper = "SELECT $1::int FROM pg_sleep(60 * $1::int)"
    warm(db, sleeper, [0])
    warm(db, "SELECT $1::int", [0])
    # A pg_sleep at the head of each FIFO keeps everything written behind it in flight.
    sleepers = [gevent.spawn(caller, 1 + k, sleeper) for k in range(2)]
    wait_until(lambda: [d["in_flight"] for d in driver_stats(db)] == [1, 1],
               what="one sleeper per connection")
    fast = [gevent.spawn(caller, 10 + i, "SELECT $1::int") for i in range(200)]
    wait_until(lambda: total(db, "in_flight") == 128, what="both connections full")
    in_flight = total(db, "in_flight")
    queued = db._pipeline.queued
    assert queued == 202 - in_flight

    started = time.monotonic()
    assert clients.terminate_backends(db) == 2
    join_all(sleepers + fast)

    indeterminate = {i: t - started for i, (kind, value, t) in outcomes.items()
                     if kind == "error" and isinstance(value, IndeterminateResultError)}
    assert len(indeterminate) == in_flight
    slowest = max(indeterminate.values())
    assert slowest < 1.0, f"IndeterminateResultError took {slowest:.2f}s"
    redispatched = not_dispatched = 0
    for i, (kind, value, _) in outcomes.items():
        if i in indeterminate:
            continue
        assert (kind == "ok" and value == i) or isinstance(value, NotDispatchedError), (i, value)
        redispatched += kind == "ok"
        not_dispatched += kind == "error"
    print(f"\n{len(indeterminate)} indeterminate (slowest {slowest * 1000:.0f} ms), "
          f"{redispatched} re-dispatched, {not_dispatched} not dispatched")

    wait_until(lambda: live(db) == 2, what="both connections replaced")
    new_pids = clients.backend_pids(db)
    assert len(new_pids) == 2 and not new_pids & old_pids
    assert db.stats()["reconnects"] >= reconnects + 2
    assert all("mux_add_one" in d.engine.catalog for d in drivers(db)), "catalog not replayed"
    replayed = [d.engine.catalog["mux_add_one"] for d in drivers(db)]
    assert all(statement.shape is not None for statement in replayed)  # described: Bind only
    checks = [gevent.spawn(stmt.fetchval, [i]) for i in range(20)]
    join_all(checks)
    assert [job.value for job in checks] == [i + 1 for i in range(20)]
    # no re-Parse happened: each connection still runs the statement its replay prepared
    assert [d.engine.catalog["mux_add_one"] for d in drivers(db)] == replayed
    assert all(d["units"] > 0 for d in driver_stats(db))
    assert db.fetchval("SELECT $1::int", [5]) == 5


def test_units_not_yet_written_are_retried_on_another_connection(clients):
    db = clients(pipeline_size=2)
    victim = drivers(db)[0]
    jobs = [gevent.spawn(db.fetchval, "SELECT $1::int", [i]) for i in range(40)]
    # Runs after every caller queued its unit and before either writer wakes up.
    killer = gevent.spawn(lambda: (victim.load, victim.fail(OperationalError("test: cut"))))
    join_all(jobs + [killer])
    pending_at_failure = killer.value[0]
    assert pending_at_failure > 0, "the victim had nothing pending: the test proved nothing"
    assert [job.value for job in jobs] == list(range(40))
    wait_until(lambda: live(db) == 2 and db.stats()["reconnects"] >= 1, what="replacement")


def test_no_live_connection_fails_fast_and_the_client_recovers(pg, clients):
    role = unique_name("mux_role")
    pg.admin(f"CREATE ROLE {role} LOGIN PASSWORD 'mux-pw'")
    db = clients(pipeline_size=2, user=role, password="mux-pw", acquire_timeout=PATIENCE)
    try:
        assert db.fetchval("SELECT current_user") == role
        pg.admin(f"ALTER ROLE {role} NOLOGIN")
        assert clients.terminate_backends(db) == 2
        wait_until(lambda: live(db) == 0, what="both connections gone")
        started = time.monotonic()
        with pytest.raises(NotDispatchedError):
            db.fetchval("SELECT 1")
        assert time.monotonic() - started < 0.5, "should fail fast, not wait for a slot"
        gevent.sleep(0.3)  # let the supervisor fail a few reconnects
        assert live(db) == 0
        pg.admin(f"ALTER ROLE {role} LOGIN")
        wait_until(lambda: live(db) == 2, what="reconnected after the role came back")
        assert db.fetchval("SELECT $1::int", [3]) == 3
    finally:
        db.close(timeout=1.0)
        pg.admin(f"DROP ROLE IF EXISTS {role}")


def test_idle_connections_are_probed(clients):
    db = clients(pipeline_size=2, probe_interval=0.05)
    assert db.fetchval("SELECT 1") == 1
    before = [d["units"] for d in driver_stats(db)]
    wait_until(lambda: all(d["units"] > b for d, b in zip(driver_stats(db), before, strict=True)),
               what="a probe (a bare Sync) answered on every idle connection")
    assert db.stats()["reconnects"] == 0
    assert db.fetchval("SELECT $1::int", [4]) == 4


def test_a_connection_left_in_a_transaction_is_replaced(clients):
    db = clients(pipeline_size=1, guard="off")
    old_pid = db.fetchval("SELECT pg_backend_pid()")
    db.execute("BEGIN")  # ReadyForQuery 'T': the connection is poisoned
    wait_until(lambda: db.stats()["reconnects"] >= 1 and live(db) == 1, what="replacement")
    reconnects = db.stats()["reconnects"]
    assert db.fetchval("SELECT pg_backend_pid()") != old_pid
    assert db.fetchval("SELECT 1") == 1
    assert db.stats()["reconnects"] == reconnects  # the new connection is idle, not poisoned


def test_a_client_encoding_change_poisons_the_connection(clients):
    db = clients(pipeline_size=1, guard="off")
    old_pid = db.fetchval("SELECT pg_backend_pid()")
    with pytest.raises(InterfaceError, match="client_encoding changed"):  # as in a session
        db.execute("SET client_encoding = 'LATIN1'")
    wait_until(lambda: db.stats()["reconnects"] >= 1 and live(db) == 1, what="replacement")
    assert db.fetchval("SELECT pg_backend_pid()") != old_pid
    assert db.fetchval("SELECT current_setting('client_encoding')") == "UTF8"
    assert db.fetchval("SELECT $1::text", ["é€"]) == "é€"


# -- timeouts and kills -----------------------------------------------------------------


def test_timeout_reaches_only_its_caller_and_its_result_is_drained(clients):
    db = clients(pipeline_size=1)
    started = time.monotonic()
    slow = gevent.spawn(outcome, lambda: db.fetchval(
        "SELECT 'late' FROM pg_sleep(0.5)", timeout=0.05))
    behind = [gevent.spawn(db.fetchval, "SELECT $1::int", [i]) for i in range(20)]
    join_all([slow])
    kind, error = slow.value
    assert kind == "error" and isinstance(error, QueryTimeout), error
    assert isinstance(error, TimeoutError)
    assert time.monotonic() - started < 0.4
    join_all(behind)
    assert [job.value for job in behind] == list(range(20))
    assert db.fetchval("SELECT 'after'") == "after"
    wait_until(lambda: total(db, "load") == 0, what="no stuck load")
    # the abandoned unit was read to its end; each of the three statements was described first
    assert total(db, "units") == (1 + 1) + (1 + 20) + (1 + 1)


def test_a_zero_timeout_raises_query_timeout(clients):
    db = clients(pipeline_size=1)
    kind, error = outcome(lambda: db.fetchval("SELECT 1", timeout=0))
    assert kind == "error" and isinstance(error, QueryTimeout), error
    assert db.fetchval("SELECT 2") == 2


def test_kills_and_timeouts_in_a_burst_never_misroute(clients):
    db = clients(pipeline_size=2, max_in_flight=16)
    sql = "SELECT $1::int, g FROM generate_series(1, $2::int) g"
    slow_sql = "SELECT $1::int, g FROM generate_series(1, $2::int) g, pg_sleep(0.01)"

    def expected(i):
        return [(i, g) for g in range(1, i % 4 + 2)]

    started = set()

    def caller(i):
        started.add(i)
        text = slow_sql if i % 40 == 0 else sql
        timeout = 0.002 if i % 6 == 0 else None
        return outcome(lambda: list(db.query(text, [i, i % 4 + 1], timeout=timeout)))

    for burst in range(3):
        base = burst * 1000
        jobs = {base + i: gevent.spawn(caller, base + i) for i in range(300)}
        doomed = [jobs[i] for i in jobs if i % 6 == 1]

        def killer(doomed=doomed):
            for job in doomed:
                gevent.sleep(0.0003)
                job.kill(block=False)

        join_all([gevent.spawn(killer)] + list(jobs.values()))
        timeouts = kills = 0
        for i, job in jobs.items():
            if isinstance(job.value, gevent.GreenletExit):
                assert i % 6 == 1
                kills += i in started  # killed while waiting, not before it ran
                continue
            kind, value = job.value
            if kind == "error":
                assert i % 6 == 0 and isinstance(value, QueryTimeout), (i, value)
                timeouts += 1
            else:
                assert value == expected(i), (i, value)
        print(f"burst {burst}: {timeouts} timeouts, {kills} kills of waiting callers")
        assert timeouts > 0 and kills > 0
    check = [gevent.spawn(lambda i=i: list(db.query(sql, [i, i % 4 + 1]))) for i in range(200)]
    join_all(check)
    assert [job.value for job in check] == [expected(i) for i in range(200)]
    wait_until(lambda: total(db, "load") == 0, what="drained")
    assert no_stuck_turns(db)


# -- slots -----------------------------------------------------------------------------


def test_max_in_flight_bounds_a_connection_and_everyone_gets_served(clients):
    db = clients(pipeline_size=1, max_in_flight=2)
    with sampled(lambda: total(db, "load"), 0.0005) as seen:
        jobs = [gevent.spawn(db.fetchval, "SELECT $1::int FROM pg_sleep(0.002)", [i])
                for i in range(50)]
        join_all(jobs)
    assert [job.value for job in jobs] == list(range(50))
    assert max(seen) == 2
    assert no_stuck_turns(db)


def test_a_waiter_gets_pool_timeout_when_no_slot_frees(clients):
    db = clients(pipeline_size=1, max_in_flight=1, acquire_timeout=0.1)
    slow = spawn_described(db, "SELECT 'slow' FROM pg_sleep($1)", 0.6)
    wait_until(lambda: total(db, "in_flight") == 1, what="the slow query in flight")
    started = time.monotonic()
    with pytest.raises(PoolTimeout):
        db.fetchval("SELECT 1")
    elapsed = time.monotonic() - started
    assert 0.08 < elapsed < 0.5
    join_all([slow])
    assert slow.value == "slow"
    assert db.fetchval("SELECT 2") == 2
    assert no_stuck_turns(db)


def test_a_call_timeout_also_bounds_the_wait_for_a_slot(clients):
    db = clients(pipeline_size=1, max_in_flight=1, acquire_timeout=PATIENCE)
    slow = spawn_described(db, "SELECT 'slow' FROM pg_sleep($1)", 1.0)
    wait_until(lambda: total(db, "in_flight") == 1, what="the slow query in flight")
    started = time.monotonic()
    kind, error = outcome(lambda: db.fetchval("SELECT 1", timeout=0.1))
    elapsed = time.monotonic() - started
    assert kind == "error" and isinstance(error, (QueryTimeout, PoolTimeout)), error
    assert elapsed < 0.6, f"timeout=0.1 returned after {elapsed:.2f}s"
    join_all([slow])
    assert no_stuck_turns(db)


def test_killed_waiters_hand_their_turn_on(clients):
    db = clients(pipeline_size=1, max_in_flight=1, acquire_timeout=PATIENCE)
    slow = spawn_described(db, "SELECT 'slow' FROM pg_sleep($1)", 0.3)
    wait_until(lambda: total(db, "in_flight") == 1, what="the slow query in flight")
    waiters = [gevent.spawn(db.fetchval, "SELECT $1::int", [i]) for i in range(20)]
    wait_until(lambda: db._pipeline.queued == 20, what="20 queued callers")
    gevent.killall(waiters[::2])
    join_all([slow] + waiters[1::2], timeout=5.0)
    assert slow.value == "slow"
    assert [job.value for job in waiters[1::2]] == list(range(1, 20, 2))
    assert no_stuck_turns(db)
    started = time.monotonic()
    assert db.fetchval("SELECT 3") == 3
    assert time.monotonic() - started < 1.0
