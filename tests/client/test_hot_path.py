"""What a multiplexed query costs in calls, counted against the real server.

The hot path (``Client._run`` -> ``dispatch.run`` -> the engine -> the pipelined driver) is
kept flat on purpose; these tests count the calls it makes, with telemetry off, so that a
change that adds one is seen and has to say so here. They count only pgmux's own work
(``support.calls``): what gevent and the hub do is not counted.
"""

from __future__ import annotations

import gevent
from support.calls import CallCounter
from support.mux import drivers, join_all, warm

import pgmux

SQL = "SELECT $1::int"

# (pgmux Python functions called, C functions called from pgmux code) per query, by
# implementation. Compiled functions (the control path's twins, pgmux._native: dispatch, the
# engine, the driver, the client's entry ``pgmux.multiplexed``) are invisible to sys.setprofile:
# the compiled counts are what stays Python (the transport's send and receive) and the C calls
# made from it; the querying greenlet itself runs no Python.
# In pure Python, Reply.new and Exchange.new each call __new__ (a C call), and the caller's
# thread check reads getcurrent() (a C call).
ONE_AT_A_TIME = {"compiled": (3, 3), "python": (27, 50)}  # the whole path, every part
IN_THE_CALLER = {"compiled": (0, 0), "python": (14, 21)}  # the querying greenlet's share
# Python calls per query the drivers make beyond their per-batch share (under one a query):
# none compiled; in pure Python the row decoder and command tag parser are calls
PER_EXCHANGE = {"compiled": 0, "python": 2}
# ... and for a request that waited in line: its build and submit (serve, Engine.query, the
# exchange and its reply, submit), none of them seen when compiled
BUILT_IN_LINE = {"compiled": 0, "python": 5}


def test_a_query_one_at_a_time_costs_a_fixed_number_of_calls(clients):
    """One greenlet, one query at a time: every query pays the whole path on its own (the
    writer's wake-up and send, the reader's receive and the batch's bookkeeping)."""
    db = clients(pipeline_size=1, telemetry=False)
    warm(db, SQL, [0])
    for i in range(50):
        db.fetchval(SQL, [i])
    (driver,) = drivers(db)
    path = {gevent.getcurrent(), driver._writer, driver._reader}  # (no other client's work)
    with CallCounter(lambda greenlet: "path" if greenlet in path else "other") as counter:
        for i in range(200):
            assert db.fetchval(SQL, [i]) == i
    print(f"\n{pgmux.implementation}: {counter.per(200, 'path')} calls per query (Python, C)")
    assert counter.per(200, "path") == ONE_AT_A_TIME[pgmux.implementation]


def test_a_query_among_64_greenlets_costs_its_caller_a_fixed_number_of_calls(clients):
    """64 greenlets on 4 connections: the querying greenlet's share is the same for every
    query whatever the batching; the drivers' share is per batch, under one call a query."""
    db = clients(pipeline_size=4, telemetry=False)
    counter, queries = count_greenlets(db, 64, 50)
    print(f"\n{pgmux.implementation}: caller {counter.per(queries, 'caller')}, drivers "
          f"{counter.per(queries, 'driver')} calls per query (Python, C)")
    assert counter.per(queries, "caller") == IN_THE_CALLER[pgmux.implementation]
    python, _ = counter.per(queries, "driver")
    assert python < PER_EXCHANGE[pgmux.implementation] + 1


def test_a_query_waiting_in_line_costs_no_more_calls_than_one_with_a_free_slot(clients):
    """4,096 greenlets, every slot taken: a caller in line is handed its slot by the driver
    that frees it, which builds and submits its request; the caller wakes once, at the
    answer."""
    db = clients(pipeline_size=4, telemetry=False)
    counter, queries = count_greenlets(db, 4096, 4)
    (caller, _), (driver, _) = counter.per(queries, "caller"), counter.per(queries, "driver")
    print(f"\n{pgmux.implementation}: caller {caller}, drivers {driver} Python calls per query")
    assert caller <= IN_THE_CALLER[pgmux.implementation][0]  # in line: no more than a free slot
    assert driver < (BUILT_IN_LINE[pgmux.implementation] + PER_EXCHANGE[pgmux.implementation]
                     + 1)  # built by the driver


def count_greenlets(db: pgmux.Client, greenlets: int, each: int) -> tuple[CallCounter, int]:
    """Calls made while ``greenlets`` greenlets run ``each`` queries (after a warm-up round
    of the same), by the callers and by ``db``'s drivers; and the number of queries."""
    warm(db, SQL, [0])
    callers: set[gevent.Greenlet] = set()

    def work() -> None:
        callers.add(gevent.getcurrent())
        for i in range(each):
            assert db.fetchval(SQL, [i]) == i

    join_all([gevent.spawn(work) for _ in range(greenlets)])  # every connection, every path
    callers.clear()
    path = {g for d in drivers(db) for g in (d._writer, d._reader)}
    counter = CallCounter(lambda greenlet: ("caller" if greenlet in callers else
                                            "driver" if greenlet in path else "other"))
    with counter:
        join_all([gevent.spawn(work) for _ in range(greenlets)])
    return counter, greenlets * each
