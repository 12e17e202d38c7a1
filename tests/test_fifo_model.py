"""A driver's FIFO against a model: hypothesis drives submits, answers, errors, kills and
connection loss on a PipelineDriver whose server end is a socket the test controls, and
the model predicts every caller's outcome."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import gevent
from gevent import socket
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from support.fakeserver import (
    command_complete,
    data_row,
    error,
    notice,
    parameter_status,
    ready,
    row_description,
)
from support.mux import wait_until

from pgmux.engine import QueryExchange
from pgmux.errors import (
    DatabaseError,
    IndeterminateResultError,
    NotDispatchedError,
    OperationalError,
    QueryTimeout,
)
from pgmux.io.connect import ServerConnection
from pgmux.io.conninfo import Endpoint, make_conninfo
from pgmux.io.pipeline import PipelineDriver, wait_for
from pgmux.io.transport import Transport
from pgmux.protocol import frontend
from pgmux.protocol.framing import FrameBuffer
from pgmux.types import default_registry

SETTLE = 5.0  # seconds: bound for anything the model says must happen now


class Peer:
    """The server end of the driver's socket: reads units (tag in a Parse), writes answers."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.tags: list[str] = []  # tags of the units received, in order
        self._buffer = b""
        self._reader = gevent.spawn(self._read)

    def _read(self) -> None:
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return
                self._buffer += data
                self._take()
        except OSError:
            return

    def _take(self) -> None:
        buffer, pos = self._buffer, 0
        while len(buffer) - pos >= 5:
            length = int.from_bytes(buffer[pos + 1 : pos + 5], "big")
            if pos + 1 + length > len(buffer):
                break
            if buffer[pos : pos + 1] == b"P":
                body = buffer[pos + 5 : pos + 1 + length]
                self.tags.append(body[1 : body.index(b"\0", 1)].decode())
            pos += 1 + length
        self._buffer = buffer[pos:]

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        self._reader.kill(block=False)
        self.sock.close()


def connected_driver(notices: list) -> tuple[PipelineDriver, Peer]:
    ours, theirs = socket.socketpair()
    handshake = SimpleNamespace(
        backend_pid=4242, backend_key=b"\0\0\0\1", parameters={"client_encoding": "UTF8"},
        protocol_version=frontend.PROTOCOL_3_0, auth_method="trust", transaction_status="I")
    conn = ServerConnection(Transport(ours, "peer", 5432), FrameBuffer(), handshake,
                            make_conninfo(host="peer"), Endpoint("peer", 5432))
    driver = PipelineDriver(conn, default_registry, on_notice=notices.append)
    driver.start()
    return driver, Peer(theirs)


def ok_answer(tag: str) -> bytes:
    return row_description(["tag"]) + data_row([tag.encode()]) + command_complete("SELECT 1")


class Caller:
    """One greenlet that submits a unit and waits for it; records what it saw."""

    def __init__(self, driver: PipelineDriver, tag: str):
        self.tag = tag
        self.unit = QueryExchange(frontend.parse(b"", tag) + frontend.SYNC)
        self.seen: tuple | None = None
        self.greenlet = gevent.spawn(self._run, driver)

    def _run(self, driver: PipelineDriver) -> None:
        try:
            driver.submit(self.unit)
            wait_for(self.unit, None)
        except NotDispatchedError:
            self.seen = ("not_dispatched",)
            return
        except (gevent.GreenletExit, QueryTimeout) as exc:
            self.seen = ("gave_up", type(exc).__name__)
            return
        failure = self.unit.failure
        if failure is not None:
            self.seen = ("failed", type(failure).__name__)
            return
        try:
            self.seen = ("ok", list(self.unit.reply.result()))
        except DatabaseError as exc:
            self.seen = ("error", exc.message)


class FifoModel(RuleBasedStateMachine):
    """Model: ``written`` is the driver's in-flight FIFO (tags); ``expected`` each caller's
    predicted outcome (None while it waits)."""

    @initialize()
    def connect(self) -> None:
        self.notices: list = []
        self.driver, self.peer = connected_driver(self.notices)
        self.written: deque[str] = deque()  # on the wire, not yet answered
        self.wire: list[str] = []  # every unit written on this connection, in order
        self.callers: dict[str, Caller] = {}
        self.expected: dict[str, tuple | None] = {}
        self.alive = True
        self.generation = 0
        self.count = 0
        self.notices_sent = 0

    def teardown(self) -> None:
        for caller in self.callers.values():
            caller.greenlet.kill(block=False)
        self.driver.close(timeout=0)
        self.peer.close()

    # -- helpers ----------------------------------------------------------------------
    def _new_callers(self, count: int) -> list[Caller]:
        made = []
        for _ in range(count):
            self.count += 1
            tag = f"g{self.generation}-u{self.count}"
            caller = Caller(self.driver, tag)
            self.callers[tag] = caller
            self.expected[tag] = None if self.alive else ("not_dispatched",)
            made.append(caller)
        gevent.sleep(0)  # every new caller submits; the writer has not run yet
        return made

    def _waiting(self) -> list[str]:
        return [tag for tag, outcome in self.expected.items() if outcome is None]

    def _settle(self) -> None:
        """Wait until every caller the model says is done has finished, then compare."""
        done = [tag for tag, outcome in self.expected.items() if outcome is not None]
        wait_until(lambda: all(self.callers[t].greenlet.ready() for t in done),
                   timeout=SETTLE, what="the callers the model says are done")
        if self.alive:
            wait_until(lambda: len(self.peer.tags) >= len(self.wire), timeout=SETTLE,
                       what="the written units to reach the server")
            assert self.peer.tags == self.wire, "units reached the server out of order"
            wait_until(lambda: self.driver.load == len(self.written), timeout=SETTLE,
                       what="the driver to read every answer sent")
        for tag in done:
            assert self.callers[tag].seen == self.expected[tag], tag
            if self.expected[tag][0] == "gave_up":  # an abandoned unit's rows are dropped
                assert self.callers[tag].unit.reply.rows == [], tag

    def _answer_head(self, answer: bytes) -> str:
        tag = self.written.popleft()
        if self.expected[tag] is None:
            self.expected[tag] = answer
        return tag

    # -- rules ------------------------------------------------------------------------
    @rule(count=st.integers(1, 4))
    def submit(self, count: int) -> None:
        for caller in self._new_callers(count):
            if self.alive:
                self.written.append(caller.tag)
                self.wire.append(caller.tag)
        self._settle()

    @precondition(lambda self: self.alive and self.written)
    @rule(fails=st.booleans(), asyncs=st.integers(0, 2), batch=st.integers(1, 3))
    def answer(self, fails: bool, asyncs: int, batch: int) -> None:
        out = []
        for _ in range(min(batch, len(self.written))):
            tag = self.written[0]
            if fails:
                body, outcome = error("22012", f"division by zero in {tag}"), (
                    "error", f"division by zero in {tag}")
            else:
                body, outcome = ok_answer(tag), ("ok", [(tag,)])
            extra = b"".join(notice(f"note {i}") if i % 2 == 0
                             else parameter_status("application_name", "x")
                             for i in range(asyncs))
            self.notices_sent += (asyncs + 1) // 2
            out.append(extra + body + ready())
            self._answer_head(outcome)
        self.peer.send(b"".join(out))
        self._settle()

    @precondition(lambda self: any(o is None for o in self.expected.values()))
    @rule(data=st.data(), timeout=st.booleans())
    def kill_waiter(self, data: st.DataObject, timeout: bool) -> None:
        tag = data.draw(st.sampled_from(self._waiting()))
        exc = QueryTimeout("test") if timeout else gevent.GreenletExit
        self.callers[tag].greenlet.kill(exc, block=False)
        self.expected[tag] = ("gave_up", "QueryTimeout" if timeout else "GreenletExit")
        self._settle()

    @precondition(lambda self: self.alive)
    @rule()
    def lose_connection(self) -> None:
        self.peer.close()
        self._lost(("failed", IndeterminateResultError.__name__))
        wait_until(lambda: not self.driver.alive, timeout=SETTLE, what="the driver to die")
        self._settle()

    @precondition(lambda self: self.alive)
    @rule(count=st.integers(1, 3))
    def fail_with_units_pending(self, count: int) -> None:
        """The owner fails the driver (a probe timeout) while new units are still pending."""
        made = self._new_callers(count)
        assert len(self.driver._pending) == count, "callers should be pending, not written"
        self.driver.fail(OperationalError("test: probe timed out"))
        for caller in made:
            self.expected[caller.tag] = ("failed", NotDispatchedError.__name__)
        self._lost(("failed", IndeterminateResultError.__name__))
        self._settle()

    def _lost(self, outcome: tuple) -> None:
        for tag in self.written:
            if self.expected[tag] is None:
                self.expected[tag] = outcome
        self.written.clear()
        self.alive = False

    @precondition(lambda self: not self.alive)
    @rule()
    def replace(self) -> None:
        self.peer.close()
        self.driver, self.peer = connected_driver(self.notices)
        self.wire = []
        self.generation += 1
        self.alive = True
        self._settle()

    # -- invariants -------------------------------------------------------------------
    @invariant()
    def load_matches_the_fifo(self) -> None:
        if not hasattr(self, "driver"):
            return
        assert self.driver.load == (len(self.written) if self.alive else 0)
        if self.alive:
            assert [u is self.callers[t].unit for u, t in
                    zip(self.driver.engine.fifo, self.written, strict=True)] == [True] * len(
                        self.written)

    @invariant()
    def nobody_finished_early(self) -> None:
        if not hasattr(self, "driver"):
            return
        for tag in self._waiting():
            assert not self.callers[tag].greenlet.ready(), f"{tag} finished; model says waiting"

    @invariant()
    def notices_reach_the_handler(self) -> None:
        if hasattr(self, "driver"):
            assert len(self.notices) == self.notices_sent


TestFifoModel = FifoModel.TestCase
TestFifoModel.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

