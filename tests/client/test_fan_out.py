"""Fan-out: independent queries handed to the multiplexer at once from one
greenlet (``db.gather``, ``db.batch()``), against the real server: results in order, each
with its own error, spread by queue depth with one writer wake-up per connection and no
greenlet spawned, and a killed caller's queries abandoned with their rows dropped."""

from __future__ import annotations

import gevent
import greenlet
import pytest
from support.mux import (
    drivers,
    join_all,
    outcome,
    sampled,
    total,
    unique_name,
    wait_until,
    warm,
)

from pgmux import Pending, Result
from pgmux.errors import (
    DivisionByZero,
    IndeterminateResultError,
    InterfaceError,
    NotDispatchedError,
    OperationalError,
    QueryTimeout,
    UndefinedTable,
    UnsafeMultiplexError,
)

SQL = "SELECT $1::int"


def test_gather_returns_the_results_in_order_each_with_its_own_error(clients):
    db = clients(pipeline_size=4)
    by_id = db.prepare(unique_name("gather_by"), "SELECT $1::int * 10")
    statements = []
    for i in range(60):
        if i % 7 == 3:
            statements.append(("SELECT 1 / $1::int", [0]))
        elif i % 7 == 5:
            statements.append((by_id, [i]))
        else:
            statements.append((SQL, [i]))
    statements.append("SELECT 'no parameters'")
    statements.append(by_id)  # a prepared handle without parameters: its own error
    answers = db.gather(statements, return_exceptions=True)
    assert len(answers) == len(statements)
    for i, answer in enumerate(answers[:60]):
        if i % 7 == 3:
            assert isinstance(answer, DivisionByZero) and answer.sqlstate == "22012"
        else:
            assert isinstance(answer, Result)
            assert answer.rows == [(i * 10 if i % 7 == 5 else i,)]
    assert answers[60].rows == [("no parameters",)]
    assert isinstance(answers[61], InterfaceError)  # takes 1 parameter, 0 given
    with pytest.raises(DivisionByZero):  # without return_exceptions: the first, in order
        db.gather([(SQL, [1]), ("SELECT 1 / $1::int", [0]), ("SELECT * FROM nowhere_x", [])])
    assert db.gather([]) == []
    assert total(db, "load") == 0 and db.fetchval(SQL, [5]) == 5


def test_a_batch_gives_each_pending_what_its_direct_call_returns(clients):
    db = clients(pipeline_size=2)
    table = unique_name("batch")
    with db.session() as s:  # (DDL goes through a session)
        s.execute(f"CREATE TABLE {table} AS SELECT g AS id FROM generate_series(1, 5) g")
    with db.batch() as batch:
        value = batch.fetchval(SQL, [7])
        row = batch.fetchone(f"SELECT id, id * 2 FROM {table} WHERE id = $1", [2])
        none = batch.fetchone(f"SELECT id FROM {table} WHERE id = $1", [99])
        rows = batch.query(f"SELECT id FROM {table} WHERE id <= $1 ORDER BY id", [3])
        moved = batch.execute(f"UPDATE {table} SET id = id WHERE id > $1", [3])
        failed = batch.fetchval("SELECT 1 / $1::int", [0])
        missing = batch.query("SELECT * FROM no_such_table_at_all")
        with pytest.raises(InterfaceError, match="not been sent"):
            value.result()
        assert isinstance(value, Pending) and not value.done
    assert (value.result(), row.result(), none.result()) == (7, (2, 4), None)
    assert rows.result().rows == [(1,), (2,), (3,)] and moved.result() == 2
    with pytest.raises(DivisionByZero):
        failed.result()
    with pytest.raises(UndefinedTable):
        missing.result()
    with pytest.raises(InterfaceError, match="not open"):
        batch.fetchval(SQL, [1])


def test_a_batch_is_vetted_as_it_is_built_and_an_exception_in_it_sends_nothing(clients):
    db = clients(pipeline_size=1)
    db.fetchval(SQL, [0])
    units = drivers(db)[0].units
    with pytest.raises(UnsafeMultiplexError), db.batch() as batch:
        first = batch.fetchval(SQL, [1])
        batch.execute("SET search_path = public")  # refused at the call, before sending
    with pytest.raises(InterfaceError, match="not sent"):
        first.result()
    with pytest.raises(UnsafeMultiplexError):
        db.gather([(SQL, [1]), "SET search_path = public"])
    with db.batch():
        pass  # an empty batch sends nothing
    assert drivers(db)[0].units == units


def test_a_fan_out_is_spread_by_queue_depth_in_one_writer_wake_up_each_and_no_greenlet(
        clients):
    db = clients(pipeline_size=4)
    warm(db, SQL, [0])
    before = [(d.units, d.flush_calls) for d in drivers(db)]
    switched_to: set[greenlet.greenlet] = set()

    def trace(event, args):
        if event in ("switch", "throw"):
            switched_to.add(args[1])

    previous = greenlet.settrace(trace)
    try:
        answers = db.gather([(SQL, [i]) for i in range(20)])
    finally:
        greenlet.settrace(previous)
    assert [answer.rows for answer in answers] == [[(i,)] for i in range(20)]
    grew = [(d.units - units, d.flush_calls - flushes)
            for d, (units, flushes) in zip(drivers(db), before, strict=True)]
    assert grew == [(5, 1)] * 4  # five each, written by one send per connection
    ours = {gevent.get_hub(), gevent.getcurrent()} | {
        g for d in drivers(db) for g in (d._writer, d._reader)}
    assert switched_to <= ours, "the fan-out ran in a greenlet it spawned"


def test_a_fan_out_waits_in_line_when_every_slot_is_taken(clients):
    db = clients(pipeline_size=1, max_in_flight=4)
    warm(db, SQL, [0])
    with sampled(lambda: total(db, "load")) as seen:
        others = [gevent.spawn(db.gather, [(SQL, [i]) for i in range(30)]) for _ in range(3)]
        answers = db.gather([(SQL, [i]) for i in range(100)])
        join_all(others)
    assert [answer[0][0] for answer in answers] == list(range(100))
    assert all([a[0][0] for a in job.value] == list(range(30)) for job in others)
    assert max(seen) <= 4
    assert db._pipeline.queued == 0 and total(db, "load") == 0


def test_a_killed_callers_queries_are_abandoned_and_their_rows_dropped(clients):
    db = clients(pipeline_size=2)
    slow = "SELECT g FROM generate_series(1, $1::int) g, pg_sleep(0.2)"
    warm(db, slow, [1])
    caller = gevent.spawn(db.gather, [(slow, [1000]) for _ in range(6)])
    wait_until(lambda: total(db, "in_flight") == 6, what="the fan-out in flight")
    in_flight = [exchange for d in drivers(db) for exchange in d.engine.fifo]
    caller.kill()
    assert caller.dead and isinstance(caller.value, gevent.GreenletExit)
    assert all(not exchange.wanted for exchange in in_flight)
    neighbours = [gevent.spawn(db.fetchval, SQL, [i]) for i in range(20)]
    join_all(neighbours)
    assert [job.value for job in neighbours] == list(range(20))
    wait_until(lambda: total(db, "load") == 0, what="the abandoned queries drained")
    assert all(exchange.done and exchange.reply.rows == [] for exchange in in_flight)


def test_a_fan_out_timeout_abandons_what_is_outstanding(clients):
    db = clients(pipeline_size=2)
    warm(db, "SELECT pg_sleep($1::float8)", [0.0])
    with pytest.raises(QueryTimeout):
        db.gather([(SQL, [1]), ("SELECT pg_sleep($1::float8)", [0.5])], timeout=0.1)
    assert db.fetchval(SQL, [2]) == 2
    wait_until(lambda: total(db, "load") == 0, what="the abandoned query drained")


def test_a_fan_out_on_lost_connections_says_which_ran_and_which_never_left(clients):
    db = clients(pipeline_size=2)
    sleeper = "SELECT $1::int FROM pg_sleep(0.5)"
    warm(db, sleeper, [0])
    caller = gevent.spawn(outcome, lambda: db.gather(
        [(sleeper, [i]) for i in range(8)], return_exceptions=True))
    wait_until(lambda: total(db, "in_flight") == 8, what="the fan-out in flight")
    assert clients.terminate_backends(db) == 2
    join_all([caller])
    kind, answers = caller.value
    assert kind == "ok" and all(isinstance(a, IndeterminateResultError) for a in answers)

    db = clients(pipeline_size=1)
    warm(db, SQL, [0])
    victim = drivers(db)[0]
    caller = gevent.spawn(db.gather, [(SQL, [i]) for i in range(10)], return_exceptions=True)
    # Runs after the fan-out queued its exchanges and before the writer wakes up.
    killer = gevent.spawn(lambda: (victim.load, victim.fail(OperationalError("test: cut"))))
    join_all([caller, killer])
    assert killer.value[0] == 10, "nothing was pending: the test proved nothing"
    assert all(isinstance(a, NotDispatchedError) for a in caller.value)  # one connection


def test_unsent_queries_of_a_fan_out_go_to_another_connection(clients):
    db = clients(pipeline_size=2)
    warm(db, SQL, [0])
    victim = drivers(db)[0]
    caller = gevent.spawn(db.gather, [(SQL, [i]) for i in range(10)])
    killer = gevent.spawn(lambda: (victim.load, victim.fail(OperationalError("test: cut"))))
    join_all([caller, killer])
    assert killer.value[0] > 0
    assert [answer[0][0] for answer in caller.value] == list(range(10))


def test_a_view_fans_out_over_its_own_connections(clients):
    db = clients(pipeline_size=1)
    view = db.with_target("any", pipeline_size=2)
    answers = view.gather([(SQL, [i]) for i in range(10)])
    assert [answer[0][0] for answer in answers] == list(range(10))
    assert db.stats()["pipeline"]["drivers"][0]["units"] < 10  # not on the client's own
