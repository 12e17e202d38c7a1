"""The slot line under faults, against the real server: callers killed at random moments and
the pipelined backends terminated while hundreds of callers wait for slots (single queries,
fan-outs, batches, timeouts; fresh descriptions all along, the statement cache being
small). Nothing hangs, nothing leaks (load, pending, in flight, followers, the line and
stats() all back to zero), and no caller gets an answer that is not its own."""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any

import gevent
from support.mux import drivers, join_all, wait_until

from pgmux.client import Client
from pgmux.errors import (
    IndeterminateResultError,
    NotDispatchedError,
    OperationalError,
    PoolTimeout,
    QueryTimeout,
)

STORM = 3.0  # seconds
CALLERS = 300
TEXTS = 60  # distinct SQL texts, for a statement cache of 8 per connection
EXPECTED = (QueryTimeout, PoolTimeout, NotDispatchedError, IndeterminateResultError)


def sql(k: int) -> str:
    return f"SELECT $1::int + {k}"


def leaks(db: Client) -> list[str]:
    """What is still held or counted once every caller is done (none of it should be)."""
    pool = db._pipeline
    found = [f"driver {d.index}: {name} {value}" for d in drivers(db) for name, value in (
        ("load", d.load), ("pending", len(d._pending)), ("in flight", len(d.engine.fifo)),
        ("slow", d.slow_in_flight), ("followers", len(d._followers))) if value]
    found += [f"{name} {value}" for name, value in (
        ("queued", pool.queued), ("reserved", pool.reserved),
        ("waiting", db.stats()["counters"]["pipeline"]["waiting"])) if value]
    found += [f"stats {d}" for d in db.stats()["pipeline"]["drivers"]
              if d["load"] or d["pending"] or d["in_flight"]]
    return found


def test_random_kills_and_terminated_backends_while_callers_wait_for_slots(clients):
    db = clients(pipeline_size=3, max_in_flight=2, statement_cache_size=8, acquire_timeout=20)
    wrong: list[Any] = []
    counts: Counter[str] = Counter()
    running = True

    def check(what: str, got: Any, want: int) -> None:
        counts[what] += 1
        if got != want:
            wrong.append((what, got, want))

    def caller(seed: int) -> None:
        r = random.Random(seed)
        while running:
            k, i, kind = r.randrange(TEXTS), r.randrange(10**6), r.random()
            try:
                if kind < 0.45:
                    check("one", db.fetchval(sql(k), [i]), i + k)
                elif kind < 0.65:
                    items = [(sql(k + j), [i]) for j in range(r.randrange(1, 12))]
                    for j, answer in enumerate(db.gather(items, return_exceptions=True)):
                        if isinstance(answer, EXPECTED):
                            counts[type(answer).__name__] += 1
                        else:
                            check("gather", answer[0][0], i + k + j)
                elif kind < 0.75:
                    with db.batch() as batch:
                        pending = [batch.fetchval(sql(k + j), [i]) for j in range(3)]
                    for j, value in enumerate(pending):
                        check("batch", value.result(), i + k + j)
                else:
                    timeout = r.choice([0.002, 0.01, 0.05])
                    check("timeout", db.fetchval(sql(k), [i], timeout=timeout), i + k)
            except EXPECTED as exc:
                counts[type(exc).__name__] += 1
            except OperationalError as exc:  # the connection ended under it
                assert "description" not in str(exc), exc
                counts["OperationalError"] += 1

    rng = random.Random(27)
    jobs = {n: gevent.spawn(caller, n) for n in range(CALLERS)}
    started = last_kill = time.monotonic()
    born = CALLERS
    while time.monotonic() - started < STORM:
        gevent.sleep(rng.choice([0, 0.001, 0.003]))
        for _ in range(rng.randrange(1, 4)):  # a few callers killed wherever they are
            jobs.pop(rng.choice(list(jobs))).kill(block=False)
            jobs[born] = gevent.spawn(caller, born)
            born += 1
        if time.monotonic() - last_kill > 0.4:  # and the backends, one or all of them
            last_kill = time.monotonic()
            clients.terminate_backends(db) if rng.random() < 0.5 else clients.admin.fetchval(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM (SELECT pid "
                "FROM pg_stat_activity WHERE application_name = $1 ORDER BY random() LIMIT 1) s",
                [db.conninfo.application_name])
    running = False
    join_all(jobs.values(), timeout=30)  # no caller hangs
    assert [job.exception for job in jobs.values() if job.exception is not None] == []
    assert wrong == [], wrong[:5]
    assert counts["one"] and counts["gather"] and counts["batch"], counts
    assert db._pipeline.counter_stats()["reconnects"] >= 4
    wait_until(lambda: db._pipeline.live == 3 and not leaks(db), what="the pool drained")
    answers = db.gather([(sql(k), [k]) for k in range(TEXTS)])
    assert [answer[0][0] for answer in answers] == [2 * k for k in range(TEXTS)]
    assert leaks(db) == []
