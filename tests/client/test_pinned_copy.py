"""COPY FROM STDIN / TO STDOUT on a session, against a real server."""

from __future__ import annotations

import time
import tracemalloc
from datetime import date

import gevent
import pytest

from pgmux import errors
from pgmux.errors import InterfaceError, QueryTimeout


@pytest.fixture
def db(pinned_client):
    return pinned_client(pinned_size=1)


@pytest.fixture
def session(db):
    with db.session() as s:
        s.execute("CREATE TEMP TABLE big (a int, b text)")
        yield s


def traced_peak(work):
    """(result, peak bytes allocated by Python while ``work`` ran)."""
    tracemalloc.start()
    try:
        result = work()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def lines(count):
    return (b"%d\trow\n" % i for i in range(count))


def test_copy_memory_does_not_grow_with_the_row_count(session):
    peaks = {}
    for count in (100_000, 1_000_000):
        session.execute("TRUNCATE big")
        copied, peak_in = traced_peak(lambda: session.copy_in("COPY big FROM STDIN", lines(count)))  # noqa: B023
        assert copied == count
        size, peak_out = traced_peak(
            lambda: sum(len(chunk) for chunk in session.copy_out("COPY big TO STDOUT")))
        assert size == sum(len(b"%d\trow\n" % i) for i in range(count))
        peaks[count] = (peak_in, peak_out)
    print("\nCOPY tracemalloc peaks (KiB): " + ", ".join(
        f"{count:,} rows: in {pin / 1024:.0f}, out {pout / 1024:.0f}"
        for count, (pin, pout) in peaks.items()))
    small, large = peaks[100_000], peaks[1_000_000]
    assert large[0] < 2 * small[0] and large[1] < 2 * small[1]  # not ~10x
    # The bound is one socket read (64 KiB) of ~10-byte CopyData messages as Python
    # objects (~3 MiB when the reader lags), whatever the row count.
    assert max(large) < 8 * 1024 * 1024


def test_rows_are_encoded_to_copy_text(session):
    rows = [(1, "plain"), (2, "tab\there"), (3, "new\nline"), (4, None), (5, "back\\slash")]
    session.execute("CREATE TEMP TABLE typed (n int, t text, d date)")
    copied = session.copy_in("COPY typed FROM STDIN",
                             [(n, t, date(2024, 1, n)) for n, t in rows])
    assert copied == 5
    assert session.query("SELECT n, t, d FROM typed ORDER BY n").rows == [
        (n, t, date(2024, 1, n)) for n, t in rows]
    text = b"".join(session.copy_out("COPY (SELECT n, t FROM typed ORDER BY n) TO STDOUT"))
    assert text == b"1\tplain\n2\ttab\\there\n3\tnew\\nline\n4\t\\N\n5\tback\\\\slash\n"


def test_producer_exception_sends_copyfail_and_the_session_goes_on(session):
    def failing_source():
        for i in range(20_000):
            yield (i, "x")
        raise ValueError("the source broke")

    with pytest.raises(ValueError, match="the source broke"):
        session.copy_in("COPY big FROM STDIN", failing_source())
    assert session.transaction_status == "I"
    assert session.fetchval("SELECT count(*) FROM big") == 0
    assert session.copy_in("COPY big FROM STDIN", [(1, "ok")]) == 1


def test_server_error_stops_the_upload_early(session):
    produced = []

    def source():
        for i in range(1_000_000):
            produced.append(i)
            yield b"not-a-number\trow\n" if i == 5 else b"%d\trow\n" % i

    with pytest.raises(errors.InvalidTextRepresentation):
        session.copy_in("COPY big FROM STDIN", source())
    assert len(produced) < 500_000
    assert session.fetchval("SELECT count(*) FROM big") == 0


def test_copy_in_timeout_cancels_and_recovers(session):
    def slow_source():
        for i in range(1_000):
            gevent.sleep(0.01)
            yield (i, "slow")

    started = time.monotonic()
    with pytest.raises(QueryTimeout) as failure:
        session.copy_in("COPY big FROM STDIN", slow_source(), timeout=0.2)
    assert time.monotonic() - started < 1.0
    assert failure.value.sqlstate == "57014"
    assert session.fetchval("SELECT count(*) FROM big") == 0
    assert session.copy_in("COPY big FROM STDIN", lines(10)) == 10


def test_copy_out_timeout_cancels_and_recovers(session):
    started = time.monotonic()
    with pytest.raises(QueryTimeout) as failure:
        for _ in session.copy_out("COPY (SELECT 1 FROM pg_sleep(5)) TO STDOUT", timeout=0.2):
            pass
    assert time.monotonic() - started < 1.0
    assert failure.value.sqlstate == "57014"
    assert session.fetchval("SELECT 1") == 1


def test_leaving_copy_out_early_cancels_the_rest(session):
    session.copy_in("COPY big FROM STDIN", lines(300_000))
    started = time.monotonic()
    for chunk in session.copy_out("COPY (SELECT a, b FROM big, generate_series(1, 20)) TO STDOUT"):
        assert chunk.endswith(b"\n")
        break
    assert session.fetchval("SELECT 2") == 2  # drained (by cancelling), not read to the end
    assert time.monotonic() - started < 2.0
    assert session.transaction_status == "I"


def test_copy_misuse_is_refused_and_leaves_the_session_usable(session):
    with pytest.raises(InterfaceError, match="FROM STDIN"):
        session.copy_in("SELECT 1", [b"x"])
    with pytest.raises(InterfaceError, match="TO STDOUT"):
        session.copy_out("COPY big FROM STDIN")
    with pytest.raises(InterfaceError, match="copy_in"):
        session.execute("COPY big FROM STDIN")
    session.copy_in("COPY big FROM STDIN", lines(3))
    with pytest.raises(InterfaceError, match="copy_out"):
        session.execute("COPY big TO STDOUT")
    with pytest.raises(errors.UndefinedTable):
        session.copy_in("COPY missing FROM STDIN", [b"1\n"])
    assert session.fetchval("SELECT count(*) FROM big") == 3


def test_copy_in_a_transaction_is_rolled_back_with_it(db):
    with pytest.raises(RuntimeError), db.transaction() as tx:
        tx.execute("CREATE TABLE copy_tx_probe (a int)")
        assert tx.copy_in("COPY copy_tx_probe FROM STDIN", [(i,) for i in range(100)]) == 100
        assert tx.fetchval("SELECT count(*) FROM copy_tx_probe") == 100
        raise RuntimeError("roll it back")
    with db.session() as s:
        assert s.fetchval("SELECT to_regclass('copy_tx_probe')::text") is None
