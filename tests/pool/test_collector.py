"""The collector policy: the youngest generation's threshold raised while pipelined
connections are open (over the interpreter's defaults only, restored by the last pool to
close, off with tune_gc=False or PGMUX_TUNE_GC=0); what a caller waiting in line for a
slot adds to what the collector tracks; and how often it collects per 1,000 queries with
64 and with 4,096 callers, against the real server."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import gevent
import pytest
from gevent.hub import Waiter
from support.mux import drivers, join_all, wait_until, warm

from pgmux.errors import QueryCanceled
from pgmux.pool.collector import DEFAULT_THRESHOLDS, ENV, POLICY, TUNED_THRESHOLDS

SQL = "SELECT $1::int"
SLOW = "SELECT pg_sleep($1::float8)::text"


@pytest.fixture(autouse=True)
def default_thresholds(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts from the interpreter's defaults, the collector on, and no policy
    held; whatever it leaves is put back."""
    monkeypatch.delenv(ENV, raising=False)
    found, was_enabled = gc.get_threshold(), gc.isenabled()
    assert POLICY.holders == 0, "a client of an earlier test is still open"
    gc.set_threshold(*DEFAULT_THRESHOLDS)
    gc.enable()
    yield
    gc.set_threshold(*found)
    (gc.enable if was_enabled else gc.disable)()


def test_applied_while_the_pipeline_is_open_and_restored_at_close(clients):
    db = clients(start=False)
    assert gc.get_threshold() == DEFAULT_THRESHOLDS  # made, nothing opened yet
    assert db.fetchval(SQL, [1]) == 1  # the pipelined connections open on first use
    assert gc.get_threshold() == TUNED_THRESHOLDS and POLICY.applied
    db.close()
    assert gc.get_threshold() == DEFAULT_THRESHOLDS and not POLICY.applied


def test_held_until_the_last_client_closes(clients):
    first, second = clients(), clients()
    assert POLICY.holders == 2 and gc.get_threshold() == TUNED_THRESHOLDS
    first.close()
    assert gc.get_threshold() == TUNED_THRESHOLDS
    second.close()
    assert gc.get_threshold() == DEFAULT_THRESHOLDS and POLICY.holders == 0


def test_opt_out_by_option_and_by_environment(clients, monkeypatch):
    db = clients(tune_gc=False)
    assert db.fetchval(SQL, [1]) == 1
    assert gc.get_threshold() == DEFAULT_THRESHOLDS and POLICY.holders == 0
    monkeypatch.setenv(ENV, "0")
    other = clients()
    assert other.fetchval(SQL, [2]) == 2
    assert gc.get_threshold() == DEFAULT_THRESHOLDS and POLICY.holders == 0


def test_pinned_only_client_leaves_the_collector_alone(pinned_client):
    db = pinned_client()
    with db.session() as session:
        assert session.fetchval(SQL, [1]) == 1
    assert gc.get_threshold() == DEFAULT_THRESHOLDS


def test_application_thresholds_and_a_disabled_collector_are_kept(clients):
    gc.set_threshold(2000, 20, 20)
    db = clients()
    assert gc.get_threshold() == (2000, 20, 20) and not POLICY.applied
    db.close()
    assert gc.get_threshold() == (2000, 20, 20)
    gc.set_threshold(*DEFAULT_THRESHOLDS)
    gc.disable()
    db = clients()
    assert gc.get_threshold() == DEFAULT_THRESHOLDS and not POLICY.applied
    db.close()
    assert not gc.isenabled()


def test_thresholds_the_application_sets_meanwhile_are_not_undone(clients):
    db = clients()
    assert gc.get_threshold() == TUNED_THRESHOLDS
    gc.set_threshold(5000, 10, 10)
    db.close()
    assert gc.get_threshold() == (5000, 10, 10)


def _tracked_per_parked(park, callers: int) -> float:
    """Tracked objects each of ``callers`` greenlets adds once parked in ``park(i)``."""
    gc.collect()
    before = len(gc.get_objects())
    jobs = [gevent.spawn(park, i) for i in range(callers)]
    gevent.sleep(0)  # each runs until it parks
    gc.collect()
    added = len(gc.get_objects()) - before
    return added / callers, jobs


def test_a_caller_waiting_in_line_adds_few_tracked_objects(clients):
    """Against a greenlet parked on a Waiter of its own (gevent's cost of a waiting
    caller: about 15 tracked objects here), a caller in line for a slot adds 4: its
    parameter list, and pgmux's request, argument tuple and encoded values."""
    callers = 1000
    db = clients(pipeline_size=1, pinned_size=1, max_in_flight=1, acquire_timeout=60.0)
    warm(db, SQL, [0])
    waiters: list[Waiter] = []

    def bare(i: int) -> None:
        waiter = Waiter()
        waiters.append(waiter)
        waiter.get()

    gevent_own, parked = _tracked_per_parked(bare, callers)
    loop = gevent.get_hub().loop
    for waiter in waiters:
        loop.run_callback(waiter.switch, None)
    join_all(parked)
    warm(db, SLOW, [0.0])  # (described: what holds the slot is the statement itself)

    def block() -> BaseException | None:
        try:
            db.fetchval(SLOW, [60.0])
        except QueryCanceled as exc:
            return exc
        return None

    blocker = gevent.spawn(block)  # holds the only slot until cancelled
    wait_until(lambda: drivers(db)[0].load == 1)
    in_line, parked = _tracked_per_parked(lambda i: db.fetchval(SQL, [i]), callers)
    assert db.stats()["counters"]["pipeline"]["waiting"] == callers
    assert in_line - gevent_own < 4.5, (in_line, gevent_own)
    with db.session() as session:  # the line is served once the sleep is cancelled
        assert session.fetchval(
            "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity"
            " WHERE query = $1 AND pid <> pg_backend_pid()", [SLOW]) == 1
    join_all(parked + [blocker])
    assert isinstance(blocker.value, QueryCanceled)
    assert sorted(job.value for job in parked) == list(range(callers))


def _collections_per_1000(db, callers: int, queries: int) -> list[float]:
    """Collections of each generation per 1,000 queries, with ``callers`` greenlets
    running ``queries`` queries of SQL in all."""
    counts = [0, 0, 0]

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            counts[info["generation"]] += 1

    def caller(offset: int) -> None:
        for i in range(offset, queries, callers):
            db.fetchval(SQL, [i])

    jobs = [gevent.spawn(caller, offset) for offset in range(callers)]
    gc.callbacks.append(count)
    try:
        join_all(jobs)
    finally:
        gc.callbacks.remove(count)
    return [round(n * 1000 / queries, 2) for n in counts]


@pytest.mark.parametrize("callers", [64, 4096])
def test_collections_per_1000_queries(clients, callers):
    """With the policy the collector runs at most about once per 1,000 queries and never
    walks the oldest generation, with few callers or with thousands in line (at 4,096
    callers the interpreter's defaults collect about 3 times per 1,000 queries, once
    in 10 the middle generation too)."""
    db = clients(pipeline_size=4, max_in_flight=64, acquire_timeout=60.0)
    warm(db, SQL, [0])
    assert gc.get_threshold() == TUNED_THRESHOLDS
    _collections_per_1000(db, callers, 4 * callers)  # every caller has run (warm-up)
    young, middle, oldest = _collections_per_1000(db, callers, 24_576)
    assert young <= 1.0 and middle <= 0.1 and oldest == 0, (young, middle, oldest)
