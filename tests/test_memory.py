"""Memory bounds: no growth over many multiplexed queries, abandoned results freed, read
buffers that shrink back after a 50 MB result.

The query count of the no-growth test is 100,000 by default; ``-m slow`` runs the
1,000,000-query version (or set PGMUX_MEMORY_QUERIES)."""

from __future__ import annotations

import gc
import os
import statistics
import time
import tracemalloc

import gevent
import pytest
from support.mux import drivers, join_all, outcome, total, wait_until

from pgmux.engine import Exchange, Reply
from pgmux.errors import QueryTimeout

MIB = 1024 * 1024
SHORT_QUERIES = 100_000
LONG_QUERIES = 1_000_000
WORKERS = 64




def _traced_now() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def _alive(kind: type) -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if isinstance(obj, kind))


# A few statement shapes, as an application would send them: ints, text, NULLs, rows.
STATEMENTS = [
    ("SELECT $1::int", lambda i: [i], lambda i: i),
    ("SELECT $1::text || 'x'", lambda i: [f"v{i}"], lambda i: f"v{i}x"),
    ("SELECT $1::int, NULL::text, $2::text", lambda i: [i, "t"], lambda i: i),
    ("SELECT count(*) FROM generate_series(1, $1::int)", lambda i: [i % 10 + 1],
     lambda i: i % 10 + 1),
]


def _run_queries(db, count: int, samples: list[int], sample_every: int) -> None:
    done = [0]

    def worker(n: int) -> None:
        i = n
        while i < count:
            sql, params, expect = STATEMENTS[i % len(STATEMENTS)]
            value = db.fetchval(sql, params(i))
            assert value == expect(i), (sql, i, value)
            done[0] += 1
            if done[0] % sample_every == 0:
                samples.append(tracemalloc.get_traced_memory()[0])
            i += WORKERS

    join_all([gevent.spawn(worker, n) for n in range(WORKERS)], timeout=3600)


def _no_growth(clients, count: int) -> None:
    db = clients(pipeline_size=4)
    warm = max(count // 10, 10_000)
    tracemalloc.start(1)
    try:
        _run_queries(db, warm, [], warm)
        baseline = _traced_now()
        samples: list[int] = []
        started = time.monotonic()
        _run_queries(db, count, samples, max(count // 20, 1))
        elapsed = time.monotonic() - started
        after = _traced_now()
    finally:
        tracemalloc.stop()
    growth = after - baseline
    half = len(samples) // 2
    early, late = statistics.median(samples[:half]), statistics.median(samples[half:])
    print(f"\n{count} queries in {elapsed:.1f}s (tracemalloc on): traced {baseline / 1024:.0f} KiB "
          f"after warm-up, {after / 1024:.0f} KiB after, growth {growth / 1024:.1f} KiB "
          f"({growth / count:.3f} B/query); under load: median {early / 1024:.0f} KiB in the "
          f"first half, {late / 1024:.0f} KiB in the second")
    assert total(db, "units") >= count + warm
    assert growth < 256 * 1024, f"{growth} bytes more after {count} queries"
    assert late - early < 128 * 1024, "memory under load keeps climbing"


def test_multiplexed_queries_do_not_grow_memory(clients):
    count = int(os.environ.get("PGMUX_MEMORY_QUERIES", SHORT_QUERIES))
    _no_growth(clients, count)


@pytest.mark.slow
def test_a_million_multiplexed_queries_do_not_grow_memory(clients):
    _no_growth(clients, LONG_QUERIES)


def test_an_abandoned_large_result_is_dropped_as_it_arrives(clients):
    """A timed-out caller's rows are skipped, not decoded and kept until its Sync."""
    db = clients(pipeline_size=1)
    sql = "SELECT g, repeat('x', 100) FROM pg_sleep(0.3), generate_series(1, 200000) g"
    db.fetchval("SELECT 1")
    units_before = _alive(Exchange), _alive(Reply)
    tracemalloc.start(1)
    try:
        baseline = _traced_now()
        kind, value = outcome(lambda: db.query(sql, timeout=0.1))
        assert isinstance(value, QueryTimeout), value
        del value  # its traceback holds the caller's frames, and so the unit
        tracemalloc.reset_peak()
        wait_until(lambda: total(db, "load") == 0, what="the abandoned result to drain")
        _, peak = tracemalloc.get_traced_memory()
        after = _traced_now()
    finally:
        tracemalloc.stop()
    print(f"\nabandoned 22 MB result: peak {(peak - baseline) / MIB:.2f} MiB above baseline, "
          f"{(after - baseline) / 1024:.0f} KiB left after")
    assert peak - baseline < 4 * MIB, "rows of an abandoned unit were kept"
    assert after - baseline < 256 * 1024, "the last read is kept alive while idle"
    assert (_alive(Exchange), _alive(Reply)) == units_before
    assert db.fetchval("SELECT $1::int", [5]) == 5


def test_many_timed_out_callers_leave_nothing_behind(clients):
    db = clients(pipeline_size=2)
    sql = "SELECT $1::int, repeat('y', 2000) FROM pg_sleep(0.002)"
    db.fetchval("SELECT $1::int, repeat('y', 2000) FROM pg_sleep(0.002)", [0])
    counts_before = _alive(Exchange), _alive(Reply)
    tracemalloc.start(1)
    try:
        baseline = _traced_now()
        outcomes = []

        def caller(i: int) -> None:
            outcomes.append(outcome(lambda: db.fetchval(sql, [i], timeout=0.001))[0])

        for _ in range(10):
            join_all([gevent.spawn(caller, i) for i in range(200)])
        wait_until(lambda: total(db, "load") == 0, what="every abandoned unit drained")
        after = _traced_now()
    finally:
        tracemalloc.stop()
    timeouts = outcomes.count("error")
    print(f"\n2000 callers, {timeouts} timed out: {(after - baseline) / 1024:.0f} KiB left")
    assert timeouts > 1000, "the test needs most callers to give up"
    assert after - baseline < 256 * 1024
    assert (_alive(Exchange), _alive(Reply)) == counts_before
    assert db.fetchval("SELECT $1::int", [7]) == 7


@pytest.mark.parametrize("shape", ["one 50 MB value", "51,200 rows of 1 KiB"])
def test_read_buffers_shrink_after_a_50mb_result(clients, shape):
    db = clients(pipeline_size=1)
    db.fetchval("SELECT 1")
    conn = drivers(db)[0].conn
    sql = ("SELECT repeat('x', 50 * 1024 * 1024)" if shape.startswith("one")
           else "SELECT repeat('x', 1024) FROM generate_series(1, 51200)")
    tracemalloc.start(1)
    try:
        baseline = _traced_now()
        result = db.query(sql)
        assert sum(len(row[0]) for row in result) >= 50 * MIB
        held = _traced_now()
        del result
        after = _traced_now()
    finally:
        tracemalloc.stop()
    capacity = conn.frames.capacity
    print(f"\n{shape}: result held {(held - baseline) / MIB:.1f} MiB; after release "
          f"{(after - baseline) / 1024:.0f} KiB; frame buffer {capacity} bytes")
    assert capacity <= 256 * 1024, f"the frame buffer kept {capacity} bytes"
    assert after - baseline < 256 * 1024, "the last read is kept alive while idle"
    assert db.fetchval("SELECT $1::int", [3]) == 3
