"""Streaming results through a portal (Execute with a row limit), against a real server."""

from __future__ import annotations

import os
import time

import pytest
from support.pinned import raised_elsewhere

from pgmux import errors
from pgmux.errors import InterfaceError, QueryTimeout


@pytest.fixture
def db(pinned_client):
    return pinned_client(pinned_size=1)


@pytest.fixture
def session(db):
    with db.session() as s:
        yield s


def resident_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def stream_growth(session, count, keep=False):
    """(rows seen, peak growth of resident memory while streaming ``count`` rows).

    Sampled every 10,000 rows; tracemalloc would cost ~10x the run time at 2M rows.
    ``keep`` holds on to every row: the control that shows the measure can see growth.
    """
    baseline = peak = resident_bytes()
    kept = []
    seen = total = 0
    for row in session.stream("SELECT generate_series(1, $1)", [count], batch=1000):
        seen += 1
        total += row[0]
        if keep:
            kept.append(row)
        if seen % 10_000 == 0:
            peak = max(peak, resident_bytes())
    assert total == count * (count + 1) // 2
    return seen, peak - baseline


def test_stream_memory_is_independent_of_the_row_count(session):
    stream_growth(session, 50_000)  # warm the allocator and the statement cache
    growth = {}
    for count in (200_000, 2_000_000):
        seen, growth[count] = stream_growth(session, count)
        assert seen == count
    _, control = stream_growth(session, 500_000, keep=True)
    print("\nstream() peak resident-memory growth (KiB): " + ", ".join(
        f"{count:,} rows: {grown / 1024:.0f}" for count, grown in growth.items())
        + f"; control, 500,000 rows kept in a list: {control / 1024:.0f}")
    assert control > 20 * 1024 * 1024  # the measure does see rows that are held
    # 2M rows held in memory would be well over 100 MiB; streamed, both stay tiny
    assert growth[2_000_000] < 16 * 1024 * 1024
    assert growth[2_000_000] < 3 * growth[200_000] + 4 * 1024 * 1024


def test_rows_come_in_order_across_batches(session):
    rows = list(session.stream("SELECT g, g * $1::int FROM generate_series(1, 2500) g", [2],
                               batch=7))
    assert rows == [(g, 2 * g) for g in range(1, 2501)]
    assert list(session.stream("SELECT 1 WHERE false")) == []
    assert list(session.stream("SELECT 'no params'")) == [("no params",)]


def test_leaving_a_stream_early_frees_the_session(session):
    started = time.monotonic()
    for i, _ in enumerate(session.stream("SELECT generate_series(1, 50000000)", batch=500)):
        if i == 3:
            break
    assert session.fetchval("SELECT 1") == 1
    assert time.monotonic() - started < 1.0
    assert session.transaction_status == "I"


def test_another_statement_closes_an_open_stream(session):
    rows = session.stream("SELECT generate_series(1, 100000)", batch=100)
    assert next(rows) == (1,)
    assert session.fetchval("SELECT 2") == 2
    with pytest.raises(InterfaceError, match="another statement"):
        list(rows)


def test_an_error_before_any_row_is_raised_by_the_call(session):
    with pytest.raises(errors.DivisionByZero):
        session.stream("SELECT 1/0")
    with pytest.raises(errors.UndefinedTable):
        session.stream("SELECT * FROM no_such_table")
    assert session.fetchval("SELECT 1") == 1


def test_an_error_mid_stream_is_raised_during_iteration(session):
    seen = []
    with pytest.raises(errors.DivisionByZero):
        for (value,) in session.stream(
                "SELECT 1 / (1000 - g) FROM generate_series(1, 2000) g", batch=100):
            seen.append(value)
    assert len(seen) >= 900  # the rows before the failing one came through
    assert session.transaction_status == "I"
    assert session.fetchval("SELECT 1") == 1


def test_stream_inside_a_transaction(db):
    with db.transaction() as tx:
        tx.execute("CREATE TEMP TABLE t AS SELECT generate_series(1, 5000) AS x")
        assert sum(x for (x,) in tx.stream("SELECT x FROM t", batch=300)) == 12_502_500
        tx.execute("INSERT INTO t VALUES (0)")
        assert tx.session.transaction_status == "T"


def test_stream_timeout_applies_to_each_round_trip(session):
    started = time.monotonic()
    with pytest.raises(QueryTimeout) as failure:
        session.stream("SELECT pg_sleep(5)", timeout=0.2)
    assert time.monotonic() - started < 1.0
    assert failure.value.sqlstate == "57014"
    assert session.fetchval("SELECT 1") == 1


def test_stream_is_dead_after_its_session(db):
    with db.session() as s:
        rows = s.stream("SELECT generate_series(1, 10000)", batch=10)
        assert next(rows) == (1,)
    with pytest.raises(InterfaceError):
        next(rows)
    with db.session() as s:
        assert s.fetchval("SELECT 1") == 1


def test_stream_is_refused_from_another_greenlet(session):
    rows = session.stream("SELECT generate_series(1, 10000)", batch=10)
    assert "greenlet" in str(raised_elsewhere(next, rows))
    assert session.fetchval("SELECT 1") == 1
