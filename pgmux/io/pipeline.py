"""The pipelined connection driver: one socket, a writer greenlet, a reader greenlet.

Theory of operation
-------------------
Callers never touch the socket. A caller builds a *unit* (the encoded
Parse/Bind/Describe/Execute/Sync messages of one query, or Bind/Execute/Sync for
a cached statement), appends it to ``_pending`` and sleeps on the unit's waiter.

The writer greenlet owns sending. Each time it wakes it moves every pending unit
to the in-flight FIFO *before* writing (a reply may arrive while ``sendall``
yields), joins their bytes and writes them with one call: a burst of callers
costs one syscall, not one each.

The reader greenlet owns receiving. It reads large chunks, frames every
complete message, and routes each one to the head of the in-flight FIFO. The
head is popped only at its ReadyForQuery (one Sync per unit), so an error can
only abort its own unit, and a result is released only once it is final.
Asynchronous messages (notices, parameter status, notifications) are handled
before routing and never reach a result.

A waiter that gives up (timeout, kill) abandons its unit: the unit stays in the
FIFO, its rows are skipped, its completion is dropped. When the connection dies,
units already handed to the writer fail with ``IndeterminateResultError``; units
still pending fail with ``NotDispatchedError`` so the caller can retry elsewhere.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import gevent
from gevent.event import Event
from gevent.hub import Waiter, get_hub

from pgmux.errors import (
    DatabaseError,
    IndeterminateResultError,
    NotDispatchedError,
    OperationalError,
    ProtocolError,
)
from pgmux.io.connect import RECV_SIZE, ServerConnection
from pgmux.io.shapes import ShapeFactory
from pgmux.protocol import backend as msg
from pgmux.protocol import frontend
from pgmux.protocol.result import EMPTY_SHAPE, Reply, RowShape, decode_row
from pgmux.protocol.statements import (
    Statement,
    StatementCache,
)

log = logging.getLogger("pgmux")

_EXECUTE_SYNC = frontend.EXECUTE_SYNC
_ALL_TEXT = frontend.format_codes(())
_DESCRIBE_TAIL = frontend.DESCRIBE_UNNAMED_PORTAL + frontend.EXECUTE_SYNC

CONNECTING, READY, CLOSING, DEAD = "connecting", "ready", "closing", "dead"


class PoisonedConnection(ProtocolError):
    """Session state changed under a pipeline connection (a transaction left open, a
    new client_encoding): no unit is to blame, but the connection must go."""


class Unit:
    """One Sync-terminated request on a pipeline connection and the state of its reply."""

    __slots__ = ("data", "reply", "statement", "parses", "waiter", "failure")

    def __init__(self, data: bytes, reply: Reply, statement: Statement | None, parses: bool):
        self.data = data
        self.reply = reply
        self.statement = statement
        self.parses = parses  # this unit carries the Parse of ``statement``
        self.waiter: Waiter | None = Waiter()
        self.failure: BaseException | None = None

    def wait(self, timeout: float | None, timeout_error: BaseException | None = None) -> None:
        """Sleep until the unit completes; on timeout (``timeout_error``) or kill, abandon it."""
        waiter = self.waiter
        assert waiter is not None
        if timeout is None:
            try:
                waiter.get()
            except BaseException:
                self.waiter = None
                raise
            return
        timer = gevent.Timeout._start_new_or_dummy(timeout, timeout_error)
        try:
            waiter.get()
        except BaseException:
            self.waiter = None
            raise
        finally:
            timer.close()


class PipelineDriver:
    """Owns one pipelined connection: submit units, get them answered in FIFO order."""

    def __init__(self, conn: ServerConnection, shapes: ShapeFactory, *,
                 statement_cache_size: int = 512,
                 on_dead: Callable[[PipelineDriver], None] | None = None,
                 on_slot_freed: Callable[[], None] | None = None,
                 on_notice: Callable[[dict[str, str]], None] | None = None,
                 index: int = 0):
        self.conn = conn
        self.index = index
        self.shapes = shapes
        self.state = CONNECTING
        self.failure: BaseException | None = None
        self.statements = StatementCache(statement_cache_size)
        self.catalog: dict[str, Statement] = {}  # client catalog name -> statement here
        self._pending: list[Unit] = []
        self._inflight: deque[Unit] = deque()
        self.load = 0  # units pending plus in flight: the routing signal
        self._wake_writer = Event()
        self._writer_parked = False
        self._on_dead = on_dead
        self._on_slot_freed = on_slot_freed
        self._on_notice = on_notice
        self._loop = get_hub().loop
        self._sock = conn.transport
        self._writer: gevent.Greenlet | None = None
        self._reader: gevent.Greenlet | None = None
        self._idle = Event()
        self._idle.set()
        # counters for stats()
        self.units = 0
        self.readables = 0
        self.results = 0
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
            self._idle.wait(timeout)
        self._shutdown(NotDispatchedError("the client is closing"), terminate=True)

    def abandon_after_fork(self) -> None:
        """In a forked child: forget the socket without sending a byte on it."""
        self.state = DEAD
        self._pending, self._inflight, self.load = [], deque(), 0
        self.conn.close(terminate=False)

    # -- submitting -------------------------------------------------------------------
    def build_unit(self, sql: str, oids: tuple[int, ...], formats: tuple[int, ...],
                   values: list[bytes | None]) -> Unit:
        """Encode one multiplexed query, using (or creating) this connection's cached statement."""
        cache = self.statements
        statement = cache.get((sql, oids))
        if statement is None:
            if cache.capacity <= 0:
                data = (frontend.parse(b"", sql, oids)
                        + frontend.bind(b"", b"", formats, values) + _DESCRIBE_TAIL)
                return Unit(data, Reply(), None, False)
            statement = cache.add(sql, oids)
            try:
                body = (statement.parse_message()
                        + frontend.bind(b"", statement.name, formats, values) + _DESCRIBE_TAIL)
            except BaseException:  # refused by the encoder: never sent, so never prepared
                cache.discard(statement, close=False)
                raise
            return Unit(cache.take_closes() + body, Reply(), statement, True)
        return self._with_closes(self.bind_unit(statement, formats, values))

    def _with_closes(self, unit: Unit) -> Unit:
        """Prefix the Close messages of evicted statements, once the unit is encoded."""
        closes = self.statements.take_closes()
        if closes:
            unit.data = closes + unit.data
        return unit

    def bind_unit(self, statement: Statement, formats: tuple[int, ...],
                  values: list[bytes | None]) -> Unit:
        """Encode an execution of a statement already prepared on this connection."""
        shape = statement.shape
        if shape is None:  # not described yet: ask for the shape along with the rows
            data = frontend.bind_statement(
                statement.bind_prefix, formats, values, _ALL_TEXT) + _DESCRIBE_TAIL
            return Unit(data, Reply(), statement, False)
        data = frontend.bind_statement(
            statement.bind_prefix, formats, values, statement.result_codes) + _EXECUTE_SYNC
        return Unit(data, Reply(shape), statement, False)

    def catalog_unit(self, name: str, make_statement: Callable[[], Statement],
                     formats: tuple[int, ...], values: list[bytes | None]) -> Unit:
        """Execute the client-catalog statement ``name``, preparing it inline if missing here."""
        statement = self.catalog.get(name)
        if statement is None:
            statement = make_statement()
            body = (statement.parse_message()
                    + frontend.bind(b"", statement.name, formats, values) + _DESCRIBE_TAIL)
            self.catalog[name] = statement  # only once its Parse is sure to be sent
            return Unit(self.statements.take_closes() + body, Reply(), statement, True)
        return self._with_closes(self.bind_unit(statement, formats, values))

    def prepare_unit(self, statement: Statement) -> Unit:
        """Parse and describe ``statement`` (for the client catalog), then Sync."""
        data = (statement.parse_message() + frontend.describe_statement(statement.name)
                + frontend.SYNC)
        return Unit(data, Reply(), statement, True)

    def submit(self, unit: Unit) -> None:
        """Queue ``unit`` for the writer. Raises NotDispatchedError if not accepting work."""
        if self.state is not READY:
            raise NotDispatchedError(f"pipeline connection {self.index} is {self.state}")
        self._pending.append(unit)
        self.load += 1
        self._idle.clear()
        if self._writer_parked:
            self._writer_parked = False
            self._wake_writer.set()

    # -- writer -----------------------------------------------------------------------
    def _write_loop(self) -> None:
        sock = self._sock
        inflight = self._inflight
        wake = self._wake_writer
        try:
            while True:
                pending = self._pending
                if not pending:
                    self._writer_parked = True
                    wake.wait()
                    wake.clear()
                    continue
                self._pending = []
                inflight.extend(pending)
                data = pending[0].data if len(pending) == 1 else b"".join(
                    [unit.data for unit in pending])
                self.flush_calls += 1
                sent = sock.send(data)
                if sent < len(data):
                    self.flush_incomplete += 1
                    sock.sendall(memoryview(data)[sent:])
        except gevent.GreenletExit:
            pass
        except BaseException as exc:
            self._die(OperationalError(f"sending to the server failed: {exc}"))

    # -- reader -----------------------------------------------------------------------
    def _read_loop(self) -> None:
        sock = self._sock
        frames = self.conn.frames
        try:
            while True:
                target = frames.recv_target()
                if target is None:
                    data = sock.recv(RECV_SIZE)
                    if not data:
                        raise OperationalError("the server closed the connection")
                    frames.feed(data)
                    data = None  # the frame buffer keeps what it still needs
                else:
                    received = sock.recv_into(target)
                    target.release()
                    if not received:
                        raise OperationalError("the server closed the connection")
                    frames.advance(received)
                self.readables += 1
                messages = frames.read_messages()
                if messages:
                    self._route(messages)
                    messages = None  # not kept alive while the next recv waits
                if frames.failed:  # a bad header came after the messages just routed
                    frames.read_messages()  # raises its ProtocolError
        except gevent.GreenletExit:
            pass
        except PoisonedConnection as exc:
            self._die(exc)
        except ProtocolError as exc:  # blame the unit whose answer broke the protocol
            self._die(exc, culprit=self._inflight[0] if self._inflight else None)
        except OperationalError as exc:
            self._die(exc)
        except Exception as exc:
            if self.state is DEAD:  # our shutdown closed the socket under this read
                return
            log.exception("pgmux: pipeline reader failed")
            self._die(ProtocolError(f"reading from the server failed: {exc!r}"))

    def _route(self, messages: list[tuple[int, bytes]]) -> None:
        """Hand every message to the head unit of the FIFO (the reader's hot loop)."""
        inflight = self._inflight
        self.results += len(messages)
        head = inflight[0] if inflight else None
        for kind, payload in messages:
            if kind == 68:  # DataRow
                if head.waiter is not None:  # an abandoned unit's rows are dropped
                    reply = head.reply
                    try:
                        reply.rows.append(decode_row(payload, reply.shape.decoders))
                    except Exception:
                        reply.add_row(payload)  # the slow path names what went wrong
            elif kind == 90:  # ReadyForQuery
                inflight.popleft()
                self._complete(head, payload)
                head = inflight[0] if inflight else None
            elif kind == 67:  # CommandComplete
                head.reply.command = msg.parse_command_complete(payload)
            elif kind == 50:  # BindComplete
                pass
            elif kind == 84:  # RowDescription
                self._describe(head, self.shapes.from_payload(payload))
            elif head is None:
                self._async_or_fail(kind, payload)
            else:
                self._other(head, kind, payload)

    def _describe(self, unit: Unit, shape: RowShape) -> None:
        self.shapes.describe(unit.reply, unit.statement, shape)

    def _other(self, head: Unit, kind: int, payload: bytes) -> None:
        if kind == 49:  # ParseComplete
            head.parses = False  # the statement exists now, whatever follows
        elif kind == 110:  # NoData
            head.reply.shape = EMPTY_SHAPE
            if head.statement is not None and head.statement.shape is None:
                head.statement.shape = EMPTY_SHAPE
        elif kind == 69:  # ErrorResponse
            self._error(head, msg.parse_fields(payload))
        elif kind in (51, 116):  # CloseComplete, ParameterDescription
            pass
        elif kind == 73:  # EmptyQueryResponse
            head.reply.command = ""
        else:
            self._async_or_fail(kind, payload)

    def _error(self, head: Unit, fields: dict[str, str]) -> None:
        if fields.get("V", fields.get("S")) in ("FATAL", "PANIC"):
            raise OperationalError(
                "the server ended the connection: "
                + str(DatabaseError.from_fields(fields))
            )
        statement = head.statement
        verdict = self.statements.record_error(head.reply, statement, head.parses, fields)
        if verdict is not None and self._forget_catalog(statement) and verdict == "stale":
            self.statements.close_later(statement.name)  # the name will be parsed again

    def _forget_catalog(self, statement: Statement) -> bool:
        found = False
        for name, entry in list(self.catalog.items()):
            if entry is statement:
                del self.catalog[name]
                found = True
        return found

    def _async_or_fail(self, kind: int, payload: bytes) -> None:
        if kind == 78:  # NoticeResponse
            if self._on_notice is not None:
                self._on_notice(msg.parse_fields(payload))
        elif kind == 83:  # ParameterStatus
            name, value = msg.parse_parameter_status(payload)
            old = self.conn.parameters.get(name)
            self.conn.parameters[name] = value
            if name == "client_encoding" and old is not None and value != old:
                raise PoisonedConnection(f"client_encoding changed to {value!r} on a pipeline connection")
        elif kind == 65:  # NotificationResponse: nobody LISTENs on a pipeline connection
            log.warning("pgmux: dropped a notification on a pipeline connection")
        elif kind == 69:  # ErrorResponse with nothing in flight: the server is ending us
            fields = msg.parse_fields(payload)
            raise OperationalError(
                "the server ended the connection: " + str(DatabaseError.from_fields(fields))
            )
        else:
            raise ProtocolError(
                f"unexpected message {bytes([kind])!r} on a pipeline connection"
            )

    def _complete(self, unit: Unit, payload: bytes) -> None:
        self.units += 1
        self.load -= 1
        waiter = unit.waiter
        if waiter is not None:
            self._loop.run_callback(waiter.switch, None)
        if payload != b"I":
            status = msg.parse_ready_for_query(payload)
            raise PoisonedConnection(
                f"pipeline connection left in transaction status {status!r}; replacing it"
            )
        if not self._inflight and not self._pending:
            self._idle.set()
        if self._on_slot_freed is not None:
            self._on_slot_freed()

    # -- failure ----------------------------------------------------------------------
    def fail(self, exc: BaseException) -> None:
        """Declare the connection dead (probe timeout, poisoning found by the owner)."""
        self._die(exc)

    def _die(self, exc: BaseException, culprit: Unit | None = None) -> None:
        if self.state is DEAD:
            return
        log.warning("pgmux: pipeline connection %d failed: %s", self.index, exc)
        self._shutdown(exc, terminate=False, culprit=culprit)

    def _shutdown(self, exc: BaseException, terminate: bool,
                  culprit: Unit | None = None) -> None:
        if self.state is DEAD:
            return
        was_ready = self.state in (READY, CLOSING)
        self.state = DEAD
        self.failure = exc
        inflight, self._inflight = self._inflight, deque()
        pending, self._pending = self._pending, []
        self.load = 0
        self.conn.close(terminate=terminate and not inflight)
        for unit in inflight:
            if unit is culprit:  # its own answer broke the protocol: it gets that error
                self._fail_unit(unit, exc)
                continue
            self._fail_unit(unit, IndeterminateResultError(
                f"the connection was lost before the result arrived ({exc}); "
                "the query may or may not have run"))
        for unit in pending:
            self._fail_unit(unit, NotDispatchedError(f"not sent: {exc}"))
        self._idle.set()
        current = gevent.getcurrent()
        for greenlet in (self._writer, self._reader):
            if greenlet is not None and greenlet is not current:
                greenlet.kill(block=False)
        if was_ready and self._on_dead is not None:
            self._on_dead(self)
        if self._on_slot_freed is not None:
            self._on_slot_freed()

    def _fail_unit(self, unit: Unit, exc: BaseException) -> None:
        unit.failure = exc
        waiter = unit.waiter
        if waiter is not None:
            self._loop.run_callback(waiter.switch, None)

    # -- observability ----------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        readables = self.readables or 1
        units = self.units or 1
        return {
            "load": self.load,
            "pending": len(self._pending),
            "in_flight": len(self._inflight),
            "units": self.units,
            "readables": self.readables,
            "units_per_readable": round(self.units / readables, 2),
            "results_per_readable": round(self.results / readables, 2),
            "flush_calls_per_unit": round(self.flush_calls / units, 3),
            "flush_incomplete": self.flush_incomplete,
            "reconnects": self.reconnects,
        }

    def __repr__(self) -> str:
        return f"<PipelineDriver {self.index} {self.state} load={self.load} pid={self.conn.pid}>"

