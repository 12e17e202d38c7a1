"""What a transaction on a pinned connection costs in calls, counted against the real server.

The pinned path (``Transaction`` -> ``PinnedConnection.query`` -> the engine -> the socket)
is kept short on purpose; these tests count the calls it makes, with telemetry off, so
that a change that adds one is seen and has to say so here. They count pgmux's own work
only (``support.calls``). A reply the server flushes in two parts (the deferred BEGIN's,
then the statement's) costs one read more, whatever pgmux does: the counts are taken
as if every request's reply came in one read.
"""

from __future__ import annotations

import gevent
from support.calls import CallCounter

import pgmux

# (Python calls, C calls) by implementation: per statement of a transaction (a cached
# statement with parameters, its reply read at once) ... Compiled functions (the control
# path's twins, pgmux._native: the session, the pinned pool and connection, the engine, the
# wire) are invisible to sys.setprofile: the compiled counts are what stays Python (the pool's
# counters, the transport) and the C calls made from it.
PER_STATEMENT = {"execute": {"compiled": (4, 3), "python": (38, 52)},
                 "fetchval": {"compiled": (4, 3), "python": (35, 44)}}
# ... and per transaction beyond its statements: the transaction's objects, the pool's
# acquire and release, the deferred BEGIN, the COMMIT and its read.
PER_TRANSACTION = {"compiled": (5, 5), "python": (80, 55)}
# What one read costs beyond a statement's reply in one read: the receive loop's calls
# (PinnedConnection.receive_more, Wire.receive, Transport.recv, Engine.receive; the
# framing buffer's recv_target, feed, read_messages and len, which are C calls when the
# framing twin is compiled, and Python ones, with _consumed, when it is not); compiled,
# only Transport.recv is seen, and its len() of a TLS read.
PER_READ = {"compiled": (1, 1), "python": (8, 4)}
# ... and on a TLS connection (the suite's server), one call more of each kind: the
# transport takes the records that arrived with the first (Transport._arrived_records).
PER_TLS_READ = (1, 1)
ROUNDS = 100


def count_transactions(db: pgmux.Client, statements: int, run) -> tuple[float, float]:
    """(Python calls, C calls) per transaction of ``statements`` calls of ``run(tx, i)``,
    over ROUNDS transactions, with every reply counted as read at once."""
    def transaction(i: int) -> None:
        with db.transaction() as tx:
            for _ in range(statements):
                run(tx, i)

    for i in range(20):
        transaction(i)
    me = gevent.getcurrent()
    with CallCounter(lambda greenlet: "caller" if greenlet is me else "other") as counter:
        for i in range(ROUNDS):
            transaction(i)
    reads = counter.functions["Transport.recv"] + counter.functions["Transport.recv_into"]
    extra_reads = reads - ROUNDS * (statements + 1)
    assert extra_reads >= 0
    python, c = counter.per(ROUNDS, "caller")
    read_python, read_c = PER_READ[pgmux.implementation]
    if counter.functions["Transport._arrived_records"]:
        read_python, read_c = read_python + PER_TLS_READ[0], read_c + PER_TLS_READ[1]
    return python - extra_reads * read_python / ROUNDS, c - extra_reads * read_c / ROUNDS


def assert_per_transaction(transaction: tuple[float, float]) -> None:
    """The calls per transaction beyond its statements: Python calls exactly; C calls one
    fewer allowed, when over TLS the COMMIT's reply was already decrypted as the wait began
    (the wait is skipped: the server's timing, not pgmux's work)."""
    python, c = whole(transaction)
    expected_python, expected_c = PER_TRANSACTION[pgmux.implementation]
    assert python == expected_python and expected_c - 1 <= c <= expected_c, (python, c)


def whole(calls: tuple[float, ...]) -> tuple[int, ...]:
    """Counts per operation, to the nearest call (a call made once in a run, such as a
    cache's refill, is not the path's)."""
    return tuple(round(n) for n in calls)


def statement_and_transaction_costs(db: pgmux.Client, run) -> tuple[tuple[float, float],
                                                                       tuple[float, float]]:
    """(per statement, per transaction beyond its statements), each (Python, C) calls."""
    one = count_transactions(db, 1, run)
    five = count_transactions(db, 5, run)
    statement = tuple((f - o) / 4 for f, o in zip(five, one, strict=True))
    return statement, tuple(o - s for o, s in zip(one, statement, strict=True))


def test_a_pinned_transaction_costs_a_fixed_number_of_calls(pinned_client):
    """A transaction of cached UPDATEs: every statement costs the same, and so does
    everything around them, the pool's part included."""
    db = pinned_client(pinned_size=1, telemetry=False)
    with db.transaction() as tx:
        tx.execute("CREATE TABLE IF NOT EXISTS pinned_counted (id int PRIMARY KEY, n int)")
        tx.execute("INSERT INTO pinned_counted VALUES (1, 0) ON CONFLICT DO NOTHING")

    statement, transaction = statement_and_transaction_costs(
        db, lambda tx, i: tx.execute("UPDATE pinned_counted SET n = n + $1 WHERE id = $2",
                                     (i, 1)))
    print(f"\n{pgmux.implementation}: {statement} per statement, {transaction} per "
          "transaction (Python, C)")
    assert whole(statement) == PER_STATEMENT["execute"][pgmux.implementation]
    assert_per_transaction(transaction)


def test_a_pinned_read_costs_a_fixed_number_of_calls(pinned_client):
    """fetchval of a cached SELECT: the row's decoding and the first value's, beside what
    every statement costs."""
    db = pinned_client(pinned_size=1, telemetry=False)
    statement, transaction = statement_and_transaction_costs(
        db, lambda tx, i: tx.fetchval("SELECT $1::int + 1", (i,)))
    print(f"\n{pgmux.implementation}: {statement} per statement, {transaction} per "
          "transaction (Python, C)")
    assert whole(statement) == PER_STATEMENT["fetchval"][pgmux.implementation]
    assert_per_transaction(transaction)
