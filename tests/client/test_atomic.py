"""Atomic units (contract 11) against the real server: several statements, one Sync, on the
multiplexed path; results per statement, all or nothing, refusals before anything is sent,
isolation scoped to the unit, retries of conflicting units only, neighbours undisturbed,
and atomicity while the server terminates the pipelined backends."""

from __future__ import annotations

import gevent
import pytest
from support.mux import drivers, join_all, outcome, sampled, unique_name, wait_until

from pgmux import Pending
from pgmux.engine.result import first_value
from pgmux.engine.units import UnitExchange
from pgmux.errors import (
    DivisionByZero,
    IndeterminateResultError,
    InterfaceError,
    NotDispatchedError,
    OperationalError,
    ReadOnlySqlTransaction,
    SerializationFailure,
    UniqueViolation,
    UnsafeMultiplexError,
)


@pytest.fixture
def accounts(clients):
    table = unique_name("acc")
    with clients(pipeline_size=0, pinned_size=1, start=False).session() as s:
        s.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, balance int NOT NULL)")
        s.execute(f"INSERT INTO {table} SELECT g, 100 FROM generate_series(1, 10) g")
    return table


def balances(db, table) -> list[int]:
    return [row[0] for row in db.query(f"SELECT balance FROM {table} ORDER BY id")]


def test_each_statement_gets_what_its_direct_call_returns(clients, accounts):
    db = clients()
    with db.atomic() as unit:
        moved = unit.execute(f"UPDATE {accounts} SET balance = balance - $1 WHERE id = $2",
                             [10, 1])
        unit.execute(f"UPDATE {accounts} SET balance = balance + $1 WHERE id = $2", [10, 2])
        value = unit.fetchval(f"SELECT balance FROM {accounts} WHERE id = $1", [1])
        row = unit.fetchone(f"SELECT id, balance FROM {accounts} WHERE id = $1", [2])
        none = unit.fetchone(f"SELECT id FROM {accounts} WHERE id = $1", [99])
        rows = unit.query(f"SELECT id FROM {accounts} WHERE id <= $1 ORDER BY id", [3])
        with pytest.raises(InterfaceError, match="not been sent"):
            value.result()
        assert isinstance(moved, Pending) and not moved.done
    assert moved.result() == 1 and value.result() == 90 and row.result() == (2, 110)
    assert none.result() is None and rows.result().rows == [(1,), (2,), (3,)]
    assert balances(db, accounts)[:2] == [90, 110]


def test_a_unit_is_one_exchange_and_takes_the_slots_it_costs_the_pipeline(clients, accounts):
    db = clients(pipeline_size=1)
    db.fetchval("SELECT 1")
    driver = drivers(db)[0]
    units = driver.units
    statements = ["SELECT pg_sleep(0.3), $1::int", f"SELECT count(*) FROM {accounts}"]
    runner = gevent.spawn(lambda: _unit(db, statements))
    wait_until(lambda: isinstance(driver.engine.head, UnitExchange), what="the unit in flight")
    assert len(driver.engine.fifo) == 1
    assert driver.load == driver.times.slots(2) and 1 <= driver.load <= 2
    runner.get(timeout=10)
    assert driver.units == units + 3  # its description, then the unit itself...
    assert driver.load == 0


def test_units_at_a_10_ms_round_trip_cost_one_slot_each(pg, clients, accounts):
    """Over a slow network a unit's life in the pipeline is its round trip, as a query's
    is: 64 five-statement units fit one connection's 64 slots together, one round trip."""
    from pgmux.tooling.proxy import DelayProxy

    proxy = DelayProxy(("127.0.0.1", pg.embedded_server.port), 0.01).start()
    try:
        db = clients(pipeline_size=1, max_in_flight=64, host="127.0.0.1", port=proxy.port)
        transfer(db, accounts, 0)  # described, and the round trip measured
        driver = drivers(db)[0]
        jobs = [gevent.spawn(transfer, db, accounts, i) for i in range(64)]
        wait_until(lambda: db._pipeline.queued == 0 and len(driver.engine.fifo) == 64,
                   what="every unit in flight at once")
        assert driver.load == 64
        join_all(jobs)
        assert [job.value for job in jobs] == [1] * 64
    finally:
        proxy.stop()
    assert sum(balances(clients.admin, accounts)) == 1000


SLEEPY = "SELECT $1::int FROM pg_sleep(0.004)"  # server time well above the round trip


def sleepy_unit(db) -> list[int]:
    with db.atomic() as unit:
        pending = [unit.fetchval(SLEEPY, [j]) for j in range(5)]
    return [p.result() for p in pending]


def measured(db) -> int:
    """``db`` (one connection) after enough sleepy units and queries for its server times
    to be known: what a sleepy unit costs there (locally: about one slot per statement)."""
    for _ in range(5):
        sleepy_unit(db)
    join_all([gevent.spawn(lambda: [db.fetchval(SLEEPY, [1]) for _ in range(30)])
              for _ in range(4)])
    return drivers(db)[0].times.slots(5)


def test_a_unit_is_admitted_only_when_the_slots_it_costs_are_free(clients):
    """Where the server time dominates a five-statement unit costs several slots: it is
    admitted only when they fit under max_in_flight with what is in flight, so units mixed
    with queries never put more in flight than max_in_flight (before: admitted at any load
    below it, then charged its slots: up to max_in_flight - 1 + its cost)."""
    db = clients(pipeline_size=1, max_in_flight=6)
    cost = measured(db)
    assert cost >= 2
    driver = drivers(db)[0]
    with sampled(lambda: driver.load) as loads:
        units = [gevent.spawn(sleepy_unit, db) for _ in range(20)]
        queries = [gevent.spawn(db.fetchval, SLEEPY, [i]) for i in range(200)]
        join_all(units + queries)
    assert [job.value for job in units] == [list(range(5))] * 20
    assert [job.value for job in queries] == list(range(200))
    assert max(loads) == 6 and driver.load == 0


def test_a_read_your_writes_view_admits_a_unit_by_the_slots_it_costs(clients, accounts):
    """The same through a read_your_writes view once a write is fenced (white box: a view
    refuses atomic(), but its run_unit routes a unit as the view routes reads): admitted
    where its slots fit, in line too (before: one slot was reserved for it, then it was
    submitted at its full cost, past max_in_flight)."""
    db = clients(pipeline_size=1, max_in_flight=6)
    view = db.with_target("any", read_your_writes=True, pipeline_size=1)
    db.execute(f"UPDATE {accounts} SET balance = balance WHERE id = $1", [1])  # fenced

    def view_unit() -> list[int]:
        items = [view.unit_item(SLEEPY, [j]) for j in range(5)]
        return [first_value(r) for r in view.run_unit(items, [], None, writes=False)]

    for _ in range(5):  # the view's connection learns its server times, as measured() does
        view_unit()
    join_all([gevent.spawn(lambda: [view.fetchval(SLEEPY, [1]) for _ in range(30)])
              for _ in range(4)])
    driver = drivers(view)[0]
    assert driver.times.slots(5) >= 2
    with sampled(lambda: driver.load) as loads:
        units = [gevent.spawn(view_unit) for _ in range(20)]
        queries = [gevent.spawn(view.fetchval, SLEEPY, [i]) for i in range(200)]
        join_all(units + queries)
    assert [job.value for job in units] == [list(range(5))] * 20
    assert [job.value for job in queries] == list(range(200))
    assert max(loads) <= 6 and driver.load == 0
    assert view.stats()["read_your_writes"]["primary"] >= 220  # (they went by the fence)


def test_a_unit_that_costs_more_than_max_in_flight_runs_alone(clients):
    db = clients(pipeline_size=1, max_in_flight=2)
    cost = measured(db)
    assert cost > 2
    driver = drivers(db)[0]

    def in_flight() -> tuple[int, int, int]:
        """(the driver's load, units in flight, other exchanges in flight)"""
        exchanges = [*driver._pending, *driver.engine.fifo]
        units = sum(isinstance(e, UnitExchange) for e in exchanges)
        return driver.load, units, len(exchanges) - units

    with sampled(in_flight) as seen:
        queries = [gevent.spawn(db.fetchval, SLEEPY, [i]) for i in range(20)]
        units = [gevent.spawn(sleepy_unit, db) for _ in range(3)]
        queries += [gevent.spawn(db.fetchval, SLEEPY, [i]) for i in range(20, 40)]
        join_all(queries + units)
    assert [job.value for job in units] == [list(range(5))] * 3
    assert [job.value for job in queries] == list(range(40))
    with_unit = [(load, units, others) for load, units, others in seen if units]
    assert with_unit  # seen in flight
    # alone: one unit, nothing beside it, charged its cost (which the server's times keep
    # refining while it runs: above max_in_flight, not necessarily the first figure)
    assert {(units, others) for _, units, others in with_unit} == {(1, 0)}
    assert min(load for load, _, _ in with_unit) > 2
    assert max(load for load, units, _ in seen if not units) <= 2


def transfer(db, accounts, i) -> int:
    """A TPC-B-like unit of five statements: two moves, two reads, one more move back."""
    a, b = i % 10 + 1, (i * 7 + 3) % 10 + 1
    with db.atomic() as unit:
        moved = unit.execute(f"UPDATE {accounts} SET balance = balance - 1 WHERE id = $1", [a])
        unit.execute(f"UPDATE {accounts} SET balance = balance + 1 WHERE id = $1", [b])
        unit.fetchval(f"SELECT balance FROM {accounts} WHERE id = $1", [a])
        unit.fetchval(f"SELECT balance FROM {accounts} WHERE id = $1", [b])
        unit.execute(f"UPDATE {accounts} SET balance = balance WHERE id = $1", [a])
    return moved.result()


def _unit(db, statements):
    with db.atomic() as unit:
        for sql in statements:
            unit.query(sql, [1] if "$1" in sql else [])


def test_a_unit_of_more_new_statements_than_the_description_limit(clients):
    """Each new statement of a unit is described first, one after another: 20 first
    descriptions are not schema churn (before: 'the description changed 16 times')."""
    db = clients(pipeline_size=1)
    with db.atomic() as unit:
        pending = [unit.fetchval(f"SELECT $1::int + {k}", [k]) for k in range(20)]
    assert [p.result() for p in pending] == [2 * k for k in range(20)]


def test_a_failing_statement_rolls_back_the_whole_unit(clients, accounts):
    db = clients()
    before = balances(db, accounts)
    with pytest.raises(DivisionByZero) as caught, db.atomic() as unit:
        first = unit.execute(f"UPDATE {accounts} SET balance = 0 WHERE id = $1", [1])
        unit.execute(f"UPDATE {accounts} SET balance = 1 / (balance - 100) WHERE id = $1",
                     [2])
        last = unit.execute(f"UPDATE {accounts} SET balance = 0 WHERE id = $1", [3])
    assert caught.value.statement_index == 1 and caught.value.sqlstate == "22012"
    for pending in (first, last):
        with pytest.raises(DivisionByZero):
            pending.result()
    assert balances(db, accounts) == before
    assert db.fetchval("SELECT $1::int", [7]) == 7  # the connection is fine


def test_an_error_at_commit_has_no_statement_index(clients):
    table = unique_name("deferred")
    db = clients()
    with db.session() as s:
        s.execute(f"CREATE TABLE {table} (x int UNIQUE DEFERRABLE INITIALLY DEFERRED, "
                  "y int UNIQUE)")
    with pytest.raises(UniqueViolation) as caught, db.atomic() as unit:
        unit.execute(f"INSERT INTO {table} VALUES ($1, $1)", [1])
        unit.execute(f"INSERT INTO {table} VALUES ($1, $1)", [1])
    assert caught.value.statement_index == 1  # y: checked by the statement itself
    with pytest.raises(UniqueViolation) as caught, db.atomic() as unit:
        unit.execute(f"INSERT INTO {table} VALUES ($1, $2)", [1, 1])
        unit.execute(f"INSERT INTO {table} VALUES ($1, $2)", [1, 2])
    assert caught.value.statement_index is None  # x: checked by the implicit COMMIT
    assert db.fetchval(f"SELECT count(*) FROM {table}") == 0


def test_an_exception_in_the_block_sends_nothing(clients, accounts):
    db = clients(pipeline_size=1)
    db.fetchval("SELECT 1")
    units = drivers(db)[0].units
    with pytest.raises(KeyError), db.atomic() as unit:
        pending = unit.execute(f"UPDATE {accounts} SET balance = 0", [])
        raise KeyError("the app changed its mind")
    with pytest.raises(InterfaceError, match="not sent"):
        pending.result()
    assert drivers(db)[0].units == units and balances(db, accounts) == [100] * 10


@pytest.mark.parametrize("sql", [
    "BEGIN", "START TRANSACTION", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT a",
    "RELEASE SAVEPOINT a", "PREPARE TRANSACTION 'x'", "COMMIT PREPARED 'x'",
    "ROLLBACK PREPARED 'x'",
])
@pytest.mark.parametrize("guard", ["default", "off"])
def test_transaction_control_is_refused_before_anything_is_sent(clients, sql, guard):
    db = clients(pipeline_size=1, guard=guard)
    db.fetchval("SELECT 1")
    units = drivers(db)[0].units
    with pytest.raises(UnsafeMultiplexError), db.atomic() as unit:
        unit.execute("SELECT 1")
        unit.execute(sql)
    assert drivers(db)[0].units == units


@pytest.mark.parametrize("sql", [
    "VACUUM", "VACUUM pg_class", "CREATE DATABASE nope", "DROP DATABASE nope",
    "CREATE INDEX CONCURRENTLY i ON t (a)", "DROP INDEX CONCURRENTLY i",
    "REINDEX TABLE CONCURRENTLY t", "ALTER SYSTEM SET work_mem = '1MB'",
    "CREATE TABLESPACE x LOCATION '/tmp'", "DISCARD ALL",
])
@pytest.mark.parametrize("guard", ["default", "off"])
def test_what_cannot_run_in_a_transaction_block_is_refused(clients, sql, guard):
    db = clients(pipeline_size=1, guard=guard)
    with pytest.raises(UnsafeMultiplexError), db.atomic() as unit:
        unit.execute(sql)


@pytest.mark.parametrize("sql", [
    "SET work_mem = '1MB'", "SELECT set_config('work_mem', '1MB', false)", "LISTEN x",
    "CREATE TEMP TABLE t (a int)", "SELECT pg_advisory_lock(1)",
])
def test_what_the_guard_refuses_is_refused(clients, sql):
    db = clients(pipeline_size=1)
    with pytest.raises(UnsafeMultiplexError), db.atomic() as unit:
        unit.execute(sql)


def test_isolation_and_read_only_apply_to_the_unit_alone(clients):
    notices = []
    db = clients(pipeline_size=1, notice_handler=notices.append)
    modes = "SELECT current_setting('transaction_isolation'), " \
            "current_setting('transaction_read_only'), $1::int"
    with db.atomic(isolation="serializable", read_only=True) as unit:
        inside = unit.fetchone(modes, [1])
    with db.atomic() as unit:
        after = unit.fetchone(modes, [1])
    assert inside.result() == ("serializable", "on", 1)
    assert after.result() == ("read committed", "off", 1)
    assert db.fetchone(modes, [1]) == ("read committed", "off", 1)
    assert not [n for n in notices if n.get("C") == "25P01"]  # pgmux's own: not passed on
    with db.session() as s, s.pipeline() as p:  # the same statement of the user's: passed on
        p.execute("SET TRANSACTION READ ONLY")
    assert [n.get("C") for n in notices] == ["25P01"]
    sequence = unique_name("seq")
    with db.session() as s:
        s.execute(f"CREATE SEQUENCE {sequence}")
    with pytest.raises(ReadOnlySqlTransaction), db.atomic(read_only=True) as unit:
        unit.fetchval(f"SELECT nextval('{sequence}')")
    assert db.fetchval(f"SELECT nextval('{sequence}')") == 1
    with pytest.raises(InterfaceError, match="unknown isolation"):
        db.atomic(isolation="chaotic")


def test_retries_replay_exactly_the_conflicting_units(clients):
    table = unique_name("counter")
    db = clients()
    with db.session() as s:
        s.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, n int)")
        s.execute(f"INSERT INTO {table} VALUES (1, 0)")
    sent: list[int] = []
    real = db.run_unit

    def counting(items, leading, timeout, **kw):
        sent.append(len(items))
        return real(items, leading, timeout, **kw)

    db.run_unit = counting  # type: ignore[method-assign]

    def increment():
        with db.atomic(isolation="serializable", retries=20) as unit:
            unit.fetchval(f"SELECT n FROM {table} WHERE id = $1", [1])
            unit.execute(f"UPDATE {table} SET n = n + 1 WHERE id = $1", [1])

    jobs = [gevent.spawn(increment) for _ in range(20)]
    join_all(jobs)
    for job in jobs:
        job.get()
    assert db.fetchval(f"SELECT n FROM {table} WHERE id = $1", [1]) == 20
    assert len(sent) >= 20  # 20 units, plus one send per conflict

    def no_retries():
        with db.atomic(isolation="serializable") as unit:
            unit.fetchval(f"SELECT n FROM {table} WHERE id = $1", [1])
            unit.execute(f"UPDATE {table} SET n = n + 1 WHERE id = $1", [1])

    sent.clear()
    jobs = [gevent.spawn(outcome, no_retries) for _ in range(20)]
    join_all(jobs)
    failures = [value for kind, value in (job.get() for job in jobs) if kind == "error"]
    assert all(isinstance(f, SerializationFailure) for f in failures)
    assert db.fetchval(f"SELECT n FROM {table} WHERE id = $1", [1]) == 40 - len(failures)
    assert len(sent) == 20  # without retries=: one send each, whatever happened
    sent.clear()
    with pytest.raises(DivisionByZero), db.atomic(retries=5) as unit:  # never other errors
        unit.fetchval("SELECT 1 / $1::int", [0])
    assert sent == [1]


def test_neighbours_are_undisturbed_while_units_fail(clients, accounts):
    db = clients(pipeline_size=2)
    results = []

    def neighbour(i):
        for _ in range(20):
            results.append(db.fetchval("SELECT $1::int", [i]) == i)

    def failing():
        for _ in range(20):
            with pytest.raises(DivisionByZero), db.atomic() as unit:
                unit.execute(f"UPDATE {accounts} SET balance = 0 WHERE id = $1", [1])
                unit.execute("SELECT 1 / $1::int", [0])

    jobs = [gevent.spawn(neighbour, i) for i in range(20)] + [
        gevent.spawn(failing) for _ in range(5)]
    join_all(jobs)
    for job in jobs:
        job.get()
    assert len(results) == 400 and all(results)
    assert balances(db, accounts) == [100] * 10


def test_all_or_nothing_while_the_server_terminates_the_pipelined_backends(clients, accounts):
    db = clients(pipeline_size=2)
    outcomes = []
    running = True

    def transfer(i):
        while running:
            a, b = i % 10 + 1, (i * 7 + 3) % 10 + 1
            try:
                with db.atomic() as unit:
                    unit.execute(f"UPDATE {accounts} SET balance = balance - 1 WHERE id = $1",
                                 [a])
                    unit.execute(f"UPDATE {accounts} SET balance = balance + 1 WHERE id = $1",
                                 [b])
                outcomes.append("ok")
            except (IndeterminateResultError, NotDispatchedError, OperationalError) as exc:
                outcomes.append(type(exc).__name__)
            gevent.sleep(0)

    jobs = [gevent.spawn(transfer, i) for i in range(16)]
    try:
        for _ in range(5):
            gevent.sleep(0.15)
            clients.terminate_backends(db)
    finally:
        running = False
        join_all(jobs, timeout=30)
    assert "ok" in outcomes and len(set(outcomes)) > 1, set(outcomes)
    assert sum(balances(clients.admin, accounts)) == 1000  # no unit was partly applied


def test_units_admitted_by_their_cost_stay_all_or_nothing_while_backends_die(pg, clients,
                                                                              accounts):
    """At a 10 ms round trip a five-statement unit costs one slot: 128 callers keep far more
    units in flight per connection than five slots each would allow, and the books still
    balance while the server terminates the pipelined backends under them."""
    from pgmux.tooling.proxy import DelayProxy

    proxy = DelayProxy(("127.0.0.1", pg.embedded_server.port), 0.01).start()
    outcomes: list[str] = []
    peak = [0]
    running = True

    def caller(i):
        while running:
            try:
                transfer(db, accounts, i)
                outcomes.append("ok")
            except (IndeterminateResultError, NotDispatchedError, OperationalError) as exc:
                outcomes.append(type(exc).__name__)
            gevent.sleep(0)

    def watch():
        while running:
            for driver in drivers(db):
                peak[0] = max(peak[0], sum(isinstance(e, UnitExchange)
                                           for e in driver.engine.fifo))
            gevent.sleep(0.001)

    try:
        db = clients(pipeline_size=2, max_in_flight=64, host="127.0.0.1", port=proxy.port)
        transfer(db, accounts, 0)
        jobs = [gevent.spawn(caller, i) for i in range(128)] + [gevent.spawn(watch)]
        try:
            for _ in range(3):
                gevent.sleep(0.3)
                clients.terminate_backends(db)
            gevent.sleep(0.3)
        finally:
            running = False
            join_all(jobs, timeout=30)
    finally:
        proxy.stop()
    assert peak[0] > 64 // 5, f"at most {peak[0]} units in flight on a connection"
    assert "ok" in outcomes and "IndeterminateResultError" in outcomes, set(outcomes)
    assert sum(balances(clients.admin, accounts)) == 1000  # no unit was partly applied


def test_units_without_pinned_connections_and_with_prepared_handles(clients, accounts):
    db = clients(pinned_size=0)
    stmt = db.prepare(unique_name("debit"),
                      f"UPDATE {accounts} SET balance = balance - $1 WHERE id = $2")
    with db.atomic() as unit:
        first = unit.execute(stmt, [5, 1])
        second = unit.execute(stmt, [5, 2])
        total = unit.fetchval(f"SELECT sum(balance) FROM {accounts} WHERE id <= $1", [2])
    assert (first.result(), second.result(), total.result()) == (1, 1, 190)


def test_an_empty_unit_sends_nothing(clients):
    db = clients(pipeline_size=1)
    db.fetchval("SELECT 1")
    units = drivers(db)[0].units
    with db.atomic():
        pass
    assert drivers(db)[0].units == units


def test_units_through_pgbouncer_transaction_mode(pgbouncer):
    from pgmux.client import Client

    table = unique_name("bounced")
    with Client(**pgbouncer.params("transaction"), pooler="transaction",
                pipeline_size=2) as db:
        with db.transaction() as tx:
            tx.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v int)")
        with db.atomic() as unit:
            unit.execute(f"INSERT INTO {table} VALUES ($1, $2)", [1, 10])
            unit.execute(f"INSERT INTO {table} VALUES ($1, $2)", [2, 20])
        with pytest.raises(UniqueViolation) as caught, db.atomic() as unit:
            unit.execute(f"INSERT INTO {table} VALUES ($1, $2)", [3, 30])
            unit.execute(f"INSERT INTO {table} VALUES ($1, $2)", [1, 10])
        assert caught.value.statement_index == 1
        assert db.fetchval(f"SELECT sum(v) FROM {table} WHERE id > $1", [0]) == 30


def test_a_prepared_handle_of_transaction_control_is_refused_in_a_unit(clients, accounts):
    db = clients(guard="off")  # prepare() then lets COMMIT through: the unit must not
    commit = db.prepare(unique_name("commit"), "COMMIT")
    with pytest.raises(UnsafeMultiplexError, match="transaction control"), db.atomic() as unit:
        unit.execute(f"UPDATE {accounts} SET balance = 0 WHERE id = $1", [1])
        unit.execute(commit)
        unit.execute("SELECT 1 / $1::int", [0])
    assert balances(db, accounts) == [100] * 10


def test_verdicts_on_repeated_statements_are_the_same(clients, accounts):
    db = clients(pipeline_size=1, guard="off")  # only the unit's own refusals apply
    for _ in range(3):  # the first judges the SQL text, the others find its verdict
        with pytest.raises(UnsafeMultiplexError, match="VACUUM"), db.atomic() as unit:
            unit.execute(f"VACUUM {accounts}")
        with db.atomic() as unit:
            count = unit.fetchval(f"SELECT count(*) FROM {accounts} WHERE id > $1", [0])
        assert count.result() == 10
