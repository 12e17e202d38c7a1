"""The pipelined connection driver: one socket, a writer greenlet, a reader greenlet.

Theory of operation
-------------------
Callers never touch the socket. A caller asks the connection's engine for an
exchange (the encoded messages of one Sync-terminated request), hands it to
``submit`` with a token (a gevent ``Waiter``, or anything with a ``switch`` called
from the hub) and sleeps on it.

The writer greenlet owns sending. Each time it wakes it moves every pending
exchange to the engine's in-flight FIFO *before* writing (a reply may arrive while
``send`` yields), joins their bytes and writes them with one call: a burst of
callers costs one syscall, not one each. Bytes the engine itself must send (a
CopyFail) go first.

The reader greenlet owns receiving. It reads large chunks, frames every complete
message and hands the batch to the engine, which routes each message to the head
of the FIFO and completes an exchange at its ReadyForQuery (one Sync per request),
so an error can only abort its own request, and a result is released only once
it is final. After each batch the reader wakes the callers of the exchanges it
completed, resumes the requests whose prerequisite (a description, a type lookup)
completed (a ``Resumable`` token: it builds and submits its next attempt here at once,
in the slot it kept) and, when callers wait for a slot, tells the pool once
(``on_slot_freed``), which hands the freed slots on. A batch that broke the connection
hands no slot on: its answers are handed over, and the requests it would have resumed
are woken instead, to go elsewhere.

A waiter that gives up (timeout, kill) abandons its exchange: it stays in the
FIFO, its rows are skipped, its completion wakes nobody. When the connection dies,
exchanges already handed to the writer fail with ``IndeterminateResultError``;
exchanges still pending fail with ``NotDispatchedError`` so the caller can retry
elsewhere.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sized
from typing import Any

import gevent
from gevent.event import Event
from gevent.hub import Waiter, get_hub

from pgmux._native import adopt
from pgmux.engine.core import Engine, PoisonedConnection
from pgmux.engine.costs import ServerTimes, StatementCosts
from pgmux.engine.exchanges import Exchange
from pgmux.engine.settings import SettingRefused
from pgmux.engine.statements import Descriptions
from pgmux.errors import (
    IndeterminateResultError,
    NotDispatchedError,
    OperationalError,
    ProtocolError,
)
from pgmux.io.wire import Link, Wire
from pgmux.types.registry import TypeRegistry

log = logging.getLogger("pgmux")
_now = time.monotonic

CONNECTING, READY, CLOSING, DEAD = "connecting", "ready", "closing", "dead"


def wait_for(exchange: Exchange, timeout: float | None,
             timeout_error: BaseException | None = None, waiter: Waiter | None = None) -> None:
    """Sleep until ``exchange`` completes; on timeout (``timeout_error``) or kill, abandon it.

    ``waiter``: a follower's (see ``PipelineDriver.follow``), instead of the submitter's.
    """
    if timeout is None:
        try:
            (waiter or exchange.token).get()
        except BaseException:
            if waiter is None:
                exchange.wanted = False  # its rows are dropped as they arrive
            raise
        return
    timer = gevent.Timeout._start_new_or_dummy(timeout, timeout_error)
    try:
        (waiter or exchange.token).get()
    except BaseException:
        if waiter is None:
            exchange.wanted = False
        raise
    finally:
        timer.close()


class Resumable:
    """A token resumed, rather than switched from the hub, when its exchange (a
    prerequisite: ``Exchange.DESCRIBES``) completes: ``resume(driver, exchange)`` is called
    in the reader, once the batch's slots are freed and before the line is served, so the
    request it stands for builds its next attempt in the slot it kept (a follower keeps
    one too, from ``follow`` on). ``switch`` when it cannot be resumed there (the
    connection failed, or the batch broke it)."""

    __slots__ = ()

    def resume(self, driver: PipelineDriver, exchange: Exchange) -> None:
        raise NotImplementedError

    def switch(self, value: Any) -> None:
        raise NotImplementedError


def switch_all(tokens: list[Any]) -> None:
    """(In the hub) wake the callers of a batch's exchanges, in FIFO order."""
    for token in tokens:
        try:
            token.switch(None)
        except BaseException:
            get_hub().handle_error(token, *sys.exc_info())


class PipelineDriver:
    """Owns one pipelined connection: submit exchanges, get them answered in FIFO order."""

    def __init__(self, conn: Link, registry: TypeRegistry, *,
                 descriptions: Descriptions | None = None,
                 statement_cache_size: int = 512,
                 named_statements: bool = True,
                 on_dead: Callable[[PipelineDriver], None] | None = None,
                 on_slot_freed: Callable[[PipelineDriver], None] | None = None,
                 slot_waiters: Sized = (),
                 costs: StatementCosts | None = None,
                 on_notice: Callable[[dict[str, str]], None] | None = None,
                 index: int = 0):
        self.conn = conn
        self.index = index
        self.state = CONNECTING
        self.failure: BaseException | None = None
        self._done: list[Exchange] = []  # completed by the engine during the current batch
        self.engine = Engine(conn.parameters, registry, shared=True, descriptions=descriptions,
                             statement_cache_size=statement_cache_size,
                             named_statements=named_statements, on_done=self._done.append,
                             on_notice=on_notice)
        self._pending: list[Exchange] = []
        self._followers: dict[Exchange, list[Any]] = {}  # tokens waiting for another's exchange
        self.load = 0  # exchanges pending plus in flight: the routing signal
        self._wake_writer = Event()
        self._writer_parked = False
        self._on_dead = on_dead
        self._on_slot_freed = on_slot_freed
        self._slot_waiters = slot_waiters  # the pool's queue of callers waiting for a slot
        self.costs = costs if costs is not None else StatementCosts()
        self.times = ServerTimes(self.costs)  # round trip and server time per statement
        self.slow_in_flight = 0  # exchanges known to be slow, pending or in flight
        # The hub of the client's thread (every caller runs there): a caller's Waiter is
        # made with it, not by the thread-local lookup of the hub.
        self._hub = hub = get_hub()
        self._loop = hub.loop
        self._sock = conn.transport
        self._writer: gevent.Greenlet | None = None
        self._reader: gevent.Greenlet | None = None
        self._idle: Event | None = None  # while closing: set once nothing is left in flight
        # counters for stats()
        self.units = 0
        self.readables = 0
        self.flush_calls = 0
        self.flush_incomplete = 0
        self.reconnects = 0

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        self._writer = gevent.spawn(self._write_loop)
        self._reader = gevent.spawn(self._read_loop)
        self.state = READY

    @property
    def alive(self) -> bool:
        return self.state is READY

    def close(self, timeout: float = 5.0) -> None:
        """Finish in-flight work (bounded by ``timeout``), then Terminate and close."""
        if self.state is DEAD:
            return
        if self.state is READY:
            self.state = CLOSING
            if self.load:
                self._idle = Event()
                self._idle.wait(timeout)
        self._shutdown(NotDispatchedError("the client is closing"), terminate=True)

    def abandon_after_fork(self) -> None:
        """In a forked child: forget the socket without sending a byte on it."""
        self.state = DEAD
        self._pending, self.load = [], 0
        self.engine.fifo.clear()
        self.conn.close(terminate=False)

    # -- submitting -------------------------------------------------------------------
    def submit(self, exchange: Exchange, token: Any = None) -> Any:
        """Queue ``exchange`` for the writer; the token its completion wakes (a new
        ``Waiter`` unless one is given). Raises NotDispatchedError if not accepting work.

        An exchange of several statements (an atomic unit) takes the slots it costs this
        connection's pipeline (``ServerTimes.slots``)."""
        if self.state is not READY:
            raise NotDispatchedError(f"pipeline connection {self.index} is {self.state}")
        if token is None:
            token = Waiter(self._hub)
        exchange.token = token
        self._pending.append(exchange)
        if exchange.statements > 1:
            exchange.weight = self.times.slots(exchange.statements)
        self.load += exchange.weight
        if exchange.slow:
            self.slow_in_flight += 1
        if self._writer_parked:
            self._writer_parked = False
            self._wake_writer.set()
        return token

    def follow(self, exchange: Exchange, token: Any = None) -> Any:
        """A token (a new ``Waiter`` unless one is given) woken when ``exchange``, already
        submitted by another caller, completes. A ``Resumable`` token keeps a slot here
        meanwhile (counted with the exchange's), for its next attempt."""
        if self.state is not READY:
            raise NotDispatchedError(f"pipeline connection {self.index} is {self.state}")
        if token is None:
            token = Waiter(self._hub)
        elif isinstance(token, Resumable):
            exchange.weight += 1
            self.load += 1
        self._followers.setdefault(exchange, []).append(token)
        return token

    def _wake_followers(self, exchange: Exchange,
                        resumed: list[tuple[Resumable, Exchange]] | None = None) -> None:
        """Wake the followers of ``exchange``; its ``Resumable`` ones go to ``resumed``
        instead, if given."""
        for token in self._followers.pop(exchange, ()):
            if resumed is not None and isinstance(token, Resumable):
                resumed.append((token, exchange))
            else:
                self._loop.run_callback(token.switch, None)

    def _nudge_writer(self) -> None:
        if self._writer_parked:
            self._writer_parked = False
            self._wake_writer.set()

    # -- writer -----------------------------------------------------------------------
    def _write_loop(self) -> None:
        sock = self._sock
        engine = self.engine
        inflight = engine.fifo
        wake = self._wake_writer
        try:
            while True:
                pending = self._pending
                if not pending and not engine.outgoing:
                    self._writer_parked = True
                    wake.wait()
                    wake.clear()
                    continue
                self._pending = []
                urgent = engine.take_outgoing() if engine.outgoing else b""
                now = _now()
                for exchange in pending:
                    exchange.sent_at = now
                inflight.extend(pending)
                if len(pending) == 1 and not urgent:
                    data = pending[0].data
                else:
                    data = urgent + b"".join([exchange.data for exchange in pending])
                self.flush_calls += 1
                sent = sock.send(data)
                if sent < len(data):
                    self.flush_incomplete += 1
                    sock.sendall(memoryview(data)[sent:])
                # Not kept alive while parked: a completed exchange holds its rows.
                del pending, exchange, data
        except gevent.GreenletExit:
            pass
        except BaseException as exc:
            self._die(OperationalError(f"sending to the server failed: {exc}"))

    # -- reader -----------------------------------------------------------------------
    def _read_loop(self) -> None:
        wire = Wire(self._sock, self.conn.frames)
        engine = self.engine
        done = self._done
        try:
            while True:
                messages = wire.receive()
                self.readables += 1
                if messages:
                    try:
                        engine.receive(messages)
                    except BaseException:
                        if done:  # answered before the batch broke the connection
                            self._completed(done, hand_on=False)
                        raise
                    if done:
                        self._completed(done)
                    del messages  # not kept alive while the next recv waits
                    if engine.outgoing:
                        self._nudge_writer()
        except gevent.GreenletExit:
            pass
        except PoisonedConnection as exc:
            self._die(exc)
        except (ProtocolError, SettingRefused) as exc:  # blame the exchange it answered
            self._die(exc, culprit=engine.head)
        except OperationalError as exc:
            self._die(exc)
        except Exception as exc:
            if self.state is DEAD:  # our shutdown closed the socket under this read
                return
            log.exception("pgmux: pipeline reader failed")
            self._die(ProtocolError(f"reading from the server failed: {exc!r}"))

    def _completed(self, done: list[Exchange], hand_on: bool = True) -> None:
        """(After a batch) the engine completed ``done``: wake their callers, free their
        slots, resume the requests whose prerequisite completed (``Resumable``), and let
        the pool hand the slots left on if callers wait for one. ``hand_on`` False: the
        batch broke the connection, which is about to fail; nothing is handed on here."""
        self.times.answered_all(done, _now())
        self.units += len(done)
        tokens = []
        resumed: list[tuple[Resumable, Exchange]] | None = None  # (made when one is met)
        load = self.load
        for exchange in done:
            load -= exchange.weight
            if exchange.slow:
                self.slow_in_flight -= 1
            token = exchange.token
            if token is not None:
                if exchange.describes and isinstance(token, Resumable):
                    if resumed is None:
                        resumed = []
                    resumed.append((token, exchange))
                else:
                    tokens.append(token)
        self.load = load
        if tokens:  # one hub callback for the batch (a callback each allocates two objects)
            self._loop.run_callback(switch_all, tokens)
        if self._followers:
            if resumed is None:
                resumed = []
            for exchange in done:
                self._wake_followers(exchange, resumed)
        done.clear()
        if resumed:  # in FIFO order, ahead of the line: they keep their place
            if hand_on:
                self._resume(resumed)
            else:
                for token, _ in resumed:
                    self._loop.run_callback(token.switch, None)
        if self._idle is not None and not self.load:
            self._idle.set()
        if hand_on and self._slot_waiters and self._on_slot_freed is not None:
            self._on_slot_freed(self)  # callers wait for a slot: hand the freed ones on

    def _resume(self, resumed: list[tuple[Resumable, Exchange]]) -> None:
        """Resume each request whose prerequisite completed; one whose resume raises is
        reported to the hub (as ``switch_all`` does) and its caller woken, to settle it:
        it strands neither itself nor the others of the batch."""
        for token, exchange in resumed:
            try:
                token.resume(self, exchange)
            except Exception:
                get_hub().handle_error(token, *sys.exc_info())
                self._loop.run_callback(token.switch, None)

    # -- failure ----------------------------------------------------------------------
    def fail(self, exc: BaseException) -> None:
        """Declare the connection dead (probe timeout, poisoning found by the owner)."""
        self._die(exc)

    def _die(self, exc: BaseException, culprit: Exchange | None = None) -> None:
        if self.state is DEAD:
            return
        log.warning("pgmux: pipeline connection %d failed: %s", self.index, exc)
        self._shutdown(exc, terminate=False, culprit=culprit)

    def _shutdown(self, exc: BaseException, terminate: bool,
                  culprit: Exchange | None = None) -> None:
        if self.state is DEAD:
            return
        was_ready = self.state in (READY, CLOSING)
        self.state = DEAD
        self.failure = exc
        fifo = self.engine.fifo
        inflight = list(fifo)
        fifo.clear()
        pending, self._pending = self._pending, []
        self.load = self.slow_in_flight = 0
        self.conn.close(terminate=terminate and not inflight)
        for exchange in inflight:
            if exchange is culprit:  # its own answer broke the protocol: it gets that error
                self._fail(exchange, exc)
                continue
            self._fail(exchange, IndeterminateResultError(
                f"the connection was lost before the result arrived ({exc}); "
                "the query may or may not have run"))
        for exchange in pending:
            self._fail(exchange, NotDispatchedError(f"not sent: {exc}"))
        if self._idle is not None:
            self._idle.set()
        current = gevent.getcurrent()
        for greenlet in (self._writer, self._reader):
            if greenlet is not None and greenlet is not current:
                greenlet.kill(block=False)
        if was_ready and self._on_dead is not None:
            self._on_dead(self)

    def _fail(self, exchange: Exchange, exc: BaseException) -> None:
        """(The connection is dead) ``exchange`` failed with ``exc``: wake its caller."""
        exchange.lose(exc)
        token = exchange.token
        if token is not None:
            self._loop.run_callback(token.switch, None)
        if self._followers:
            self._wake_followers(exchange)

    # -- observability ----------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        readables = self.readables or 1
        units = self.units or 1
        return {
            "load": self.load,
            "pending": len(self._pending),
            "in_flight": len(self.engine.fifo),
            "units": self.units,
            "readables": self.readables,
            "units_per_readable": round(self.units / readables, 2),
            "results_per_readable": round(self.engine.messages / readables, 2),
            "flush_calls_per_unit": round(self.flush_calls / units, 3),
            "flush_incomplete": self.flush_incomplete,
            "slow_in_flight": self.slow_in_flight,
            "reconnects": self.reconnects,
        }

    def __repr__(self) -> str:
        return f"<PipelineDriver {self.index} {self.state} load={self.load} pid={self.conn.pid}>"

adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
