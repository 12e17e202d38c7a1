"""The pipelined driver on its own, against the scripted server: one write per burst, FIFO
answers, one unit's error aborting only itself, and the failure model when the connection
dies (in flight: IndeterminateResultError; still pending: NotDispatchedError)."""

from __future__ import annotations

import gevent
import pytest
from support.fakeserver import FakeServer, error, fatal, ready, split_messages

from pgmux.engine import Engine
from pgmux.errors import (
    IndeterminateResultError,
    NotDispatchedError,
    ProtocolError,
)
from pgmux.io.connect import connect
from pgmux.io.conninfo import make_conninfo
from pgmux.io.pipeline import DEAD, READY, PipelineDriver, Resumable, wait_for
from pgmux.types import TypeRegistry

BOUND = 5.0  # seconds: nothing here may take longer


@pytest.fixture
def fake():
    with FakeServer() as server:
        yield server


@pytest.fixture
def driver(fake):
    made: list[PipelineDriver] = []

    def make(**options) -> PipelineDriver:
        conn = connect(make_conninfo(fake.dsn(), connect_timeout=BOUND))
        dead = options.pop("dead", None)
        made.append(d := PipelineDriver(conn, TypeRegistry(),
                                        on_dead=dead.append if dead is not None else None,
                                        **options))
        d.start()
        return d

    yield make
    for d in made:
        d.close(timeout=0.5)


def request(driver: PipelineDriver, label: str):
    """A one-parameter statement (the fake answers with the parameter), described first
    the way the dispatcher does it: the description is sent and waited for."""
    values = [label.encode()]
    exchange = Engine.query(driver.engine, "SELECT $1::text", (25,), (0,), values)
    if exchange.DESCRIBES:
        driver.submit(exchange)
        wait_for(exchange, BOUND)
        exchange = Engine.query(driver.engine, "SELECT $1::text", (25,), (0,), values)
    return exchange


def test_a_burst_is_written_at_once_and_answered_in_order(fake, driver):
    d = driver()
    request(d, "warm")  # described, so the burst is executions only
    exchanges = [request(d, f"caller-{i}") for i in range(20)]
    fake.hold()
    for exchange in exchanges:
        d.submit(exchange)
    wait_for_units(fake, 1 + 20)
    fake.release()
    for exchange in exchanges:
        wait_for(exchange, BOUND)
    assert [e.result().rows for e in exchanges] == [[(f"caller-{i}",)] for i in range(20)]
    assert d.flush_calls == 2  # the description, then the whole burst in one write
    assert d.stats()["units"] == 21 and d.load == 0


def test_an_error_aborts_its_own_unit_only(fake, driver):
    d = driver()
    request(d, "warm")
    fake.on("victim", lambda unit, answer: error("22012", "division by zero") + ready())
    exchanges = [request(d, label) for label in ("before", "victim", "after")]
    for exchange in exchanges:
        d.submit(exchange)
    for exchange in exchanges:
        wait_for(exchange, BOUND)
    before, victim, after = exchanges
    assert before.result().rows == [("before",)] and after.result().rows == [("after",)]
    with pytest.raises(Exception) as caught:
        victim.result()
    assert caught.value.sqlstate == "22012"
    assert d.engine.outcome(victim).name == "DONE"  # the server's answer: no retry
    assert d.state is READY


def test_a_lost_connection_fails_in_flight_indeterminate_and_pending_not_dispatched(
        fake, driver):
    dead: list[PipelineDriver] = []
    d = driver(dead=dead)
    request(d, "warm")
    fake.on("stall", b"", then="stall")  # no answer, and none after it
    in_flight = [request(d, "stall"), request(d, "behind")]
    for exchange in in_flight:
        d.submit(exchange)
    wait_for_units(fake, 3)
    for conn in fake.live:
        conn.close()
    for exchange in in_flight:
        wait_for(exchange, BOUND)
        assert isinstance(exchange.failure, IndeterminateResultError)
        assert d.engine.outcome(exchange).name == "LOST"
    assert d.state is DEAD and dead == [d]
    with pytest.raises(NotDispatchedError):
        d.submit(d.engine.sync())


def test_an_abandoned_exchange_is_drained_and_its_neighbours_answered(fake, driver):
    d = driver()
    request(d, "warm")
    fake.hold()
    first, second = request(d, "gives-up"), request(d, "waits")
    d.submit(first)
    d.submit(second)
    wait_for_units(fake, 3)
    first.wanted = False  # its caller timed out
    fake.release()
    wait_for(second, BOUND)
    assert first.done and first.reply.rows == []  # its rows were dropped as they came
    assert second.result().rows == [("waits",)]


def test_a_malformed_answer_blames_the_exchange_it_answered(fake, driver):
    d = driver()
    request(d, "warm")

    def garbled(unit, answer: bytes) -> bytes:
        parts = split_messages(answer)
        return parts[0] + b"\x00\x00\x00\x00\x05"  # an unknown message type

    fake.on("culprit", garbled)
    culprit, behind = request(d, "culprit"), request(d, "behind")
    d.submit(culprit)
    d.submit(behind)
    wait_for(culprit, BOUND)
    wait_for(behind, BOUND)
    assert isinstance(culprit.failure, ProtocolError)
    assert isinstance(behind.failure, IndeterminateResultError)


def test_a_batch_that_breaks_the_connection_hands_no_slot_on(fake, driver):
    """An answer and, in the same read, the FATAL that ends the connection: the answer is
    handed over, but the freed slot is not handed to a caller in line (it would be built
    and submitted on a connection about to fail, come back NotDispatched, and be sent
    again at the cost of an attempt)."""
    freed: list[PipelineDriver] = []
    d = driver(slot_waiters=["a caller in line"], on_slot_freed=freed.append)
    request(d, "warm")
    freed.clear()
    fake.on("killed", lambda unit, answer: fatal())
    answered, killed = request(d, "answered"), request(d, "killed")
    fake.hold()
    d.submit(answered)
    d.submit(killed)
    wait_for_units(fake, 3)
    fake.release()  # both answers in one write
    wait_for(answered, BOUND)
    wait_for(killed, BOUND)
    assert answered.result().rows == [("answered",)]
    assert isinstance(killed.failure, IndeterminateResultError)
    assert d.state is DEAD and freed == []


class Resumed(Resumable):
    """A request's token for its prerequisite: notes when and where it is resumed."""

    def __init__(self):
        self.resumed: list[tuple[PipelineDriver, object, int]] = []
        self.switched = 0

    def resume(self, driver, exchange):
        self.resumed.append((driver, exchange, driver.load))

    def switch(self, value):
        self.switched += 1


def test_a_prerequisites_requests_are_resumed_in_the_reader_with_the_slots_they_kept(
        fake, driver):
    """The one who sent a description and the one who follows it each keep a slot while it
    is answered (load 2 for one exchange), and are resumed in the reader with both slots
    freed, before the line is served; they are not woken from the hub."""
    freed: list[int] = []
    d = driver(slot_waiters=["a caller in line"], on_slot_freed=lambda d: freed.append(d.load))
    sender, follower = Resumed(), Resumed()
    exchange = Engine.query(d.engine, "SELECT $1::text", (25,), (0,), [b"x"])
    assert exchange.DESCRIBES
    fake.hold()
    d.submit(exchange, sender)
    d.follow(exchange, follower)
    assert d.load == 2
    fake.release()
    with gevent.Timeout(BOUND):
        while not freed:
            gevent.sleep(0.001)
    assert sender.resumed == [(d, exchange, 0)] and follower.resumed == [(d, exchange, 0)]
    assert sender.switched == follower.switched == 0 and freed == [0]
    assert d.engine.outcome(exchange).name == "DESCRIBED"


class Failing(Resumed):
    def resume(self, driver, exchange):
        raise RuntimeError("test: a resume that fails")


def test_a_resume_that_raises_strands_neither_its_caller_nor_the_others(fake, driver):
    """Two requests resumed from one batch: the first one's resume raises (reported to the
    hub); its caller is woken, to settle it, and the second is resumed all the same."""
    d = driver()
    failing, follower = Failing(), Resumed()
    exchange = Engine.query(d.engine, "SELECT $1::text", (25,), (0,), [b"x"])
    fake.hold()
    d.submit(exchange, failing)
    d.follow(exchange, follower)
    fake.release()
    with gevent.Timeout(BOUND):
        while not (follower.resumed and failing.switched):
            gevent.sleep(0.001)
    assert follower.resumed == [(d, exchange, 0)] and follower.switched == 0
    assert failing.switched == 1 and d.state is READY


def test_a_follower_wakes_with_the_exchange_it_follows(fake, driver):
    d = driver()
    exchange = Engine.query(d.engine, "SELECT $1::text", (25,), (0,), [b"x"])
    assert exchange.DESCRIBES
    d.submit(exchange)
    again = Engine.query(d.engine, "SELECT $1::text", (25,), (0,), [b"x"])
    assert again is exchange  # the description in flight is shared, not sent twice
    follower = d.follow(exchange)
    wait_for(exchange, BOUND, None, follower)
    assert exchange.done and d.engine.outcome(exchange).name == "DESCRIBED"
    assert len(fake.live[0].received) == 1


def test_close_finishes_in_flight_work_then_says_terminate(fake, driver):
    d = driver()
    request(d, "warm")
    fake.hold()
    exchange = request(d, "last")
    d.submit(exchange)
    wait_for_units(fake, 2)
    closer = gevent.spawn(d.close, BOUND)
    gevent.sleep(0)
    assert not closer.ready()  # waiting for the answer
    fake.release()
    closer.join(BOUND)
    assert closer.successful() and exchange.result().rows == [("last",)]
    assert d.state is DEAD
    server_side = fake.connections[0]
    wait_until_closed(server_side)


def wait_for_units(fake: FakeServer, count: int) -> None:
    with gevent.Timeout(BOUND, AssertionError(f"the server never saw {count} units")):
        while fake.units_received < count:
            gevent.sleep(0.001)


def wait_until_closed(conn) -> None:
    with gevent.Timeout(BOUND, AssertionError("the server side never saw Terminate")):
        while not conn.closed:
            gevent.sleep(0.001)
