"""The pinned connection: one borrower greenlet at a time drives the socket itself.

Theory of operation
-------------------
A pinned connection is lent to one greenlet, so it has no reader or writer
greenlet: each call writes its messages and reads the answers itself. Answers are
consumed by *ops*, small state machines fed one backend message at a time until
their ``done`` flag is set. An op keeps its own state, so a read cut short by the
caller's deadline can be resumed: the connection sends CancelRequest, waits for the
cancel connection to close (the signal has then been delivered, so it can only hit
the statement we are still reading), and keeps feeding the same ops to their
ReadyForQuery within ``cancel_grace``; past that the socket is closed.

Asynchronous messages are handled below the ops: notices go to ``on_notice``,
notifications to a bounded queue, ParameterStatus to the server facts.

``outstanding`` counts the ReadyForQuery messages still owed to us. Any exception
that escapes while a reply is being read or a request written marks the connection
``broken``: the pool then closes it (cancelling what still runs) and opens another.
A stream, a COPY OUT or an explicit pipeline left open between two calls is not
broken: it is the connection's ``active`` reader, closed (drained) before anything
else runs on the connection.

BEGIN and SAVEPOINT are *deferred*: queued as a prefix and written with the next
request, so opening a transaction costs no round trip of its own, and a
transaction that runs nothing costs nothing.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import gevent
from gevent import select as gselect

from pgmux.errors import (
    DatabaseError,
    IndeterminateResultError,
    InterfaceError,
    NotDispatchedError,
    OperationalError,
    PipelineAborted,
    ProtocolError,
    QueryTimeout,
)
from pgmux.io.connect import RECV_SIZE, ServerConnection
from pgmux.io.shapes import ShapeFactory
from pgmux.protocol import backend as msg
from pgmux.protocol import frontend
from pgmux.protocol.result import EMPTY_SHAPE, Reply, Result, Row
from pgmux.protocol.statements import (
    Statement,
    StatementCache,
    is_stale_statement_error,
    learn_shape,
)
from pgmux.types import encode_copy_row

log = logging.getLogger("pgmux")

COPY_CHUNK = 64 * 1024  # CopyData messages are filled up to this size
CONCURRENT_SEND = 32 * 1024  # larger pipeline flushes are written by a helper greenlet
PIPELINE_BUFFER = 1 << 20  # an explicit pipeline flushes itself past this many bytes
NOTIFICATION_LIMIT = 10_000  # queued notifications; the oldest are dropped beyond
PROBE_TIMEOUT = 0.5  # reading what an idle connection received, at acquire
MIN_CANCEL_GRACE = 0.25  # the least time a cancelled statement gets to answer

_ASYNC = frozenset((78, 83, 65))  # NoticeResponse, ParameterStatus, NotificationResponse
_DESCRIBE_EXECUTE = frontend.DESCRIBE_UNNAMED_PORTAL + frontend.EXECUTE_UNNAMED
_DESCRIBE_EXECUTE_SYNC = frontend.DESCRIBE_UNNAMED_PORTAL + frontend.EXECUTE_SYNC
_CLOSE_PORTAL_SYNC = frontend.close_portal(b"") + frontend.SYNC
_ROLLBACK = frontend.query("ROLLBACK")
_DISCARD_ALL = frontend.query("DISCARD ALL")

Notify = tuple[int, str, str]  # (sender pid, channel, payload)


class _Expired(Exception):
    """The caller's deadline passed while waiting for the server (internal)."""


def _server_error(payload: bytes) -> DatabaseError:
    return DatabaseError.from_fields(msg.parse_fields(payload))


def _is_cancel(error: BaseException | None) -> bool:
    return getattr(error, "sqlstate", None) == "57014"


def _timeout_error(timeout: float | None, cause: BaseException | None) -> QueryTimeout:
    exc = QueryTimeout(f"no result within {timeout}s: the statement was cancelled")
    if _is_cancel(cause):
        exc.sqlstate = "57014"
    return exc


# -- ops: what consumes the reply to one request -----------------------------------------


class _SimpleOp:
    """The reply to a simple Query (possibly several statements): keeps the last result."""

    __slots__ = ("conn", "done", "error", "current", "last")

    def __init__(self, conn: PinnedConnection):
        self.conn = conn
        self.done = False
        self.error: BaseException | None = None
        self.current = Reply()
        self.last: Reply | None = None

    def feed(self, kind: int, payload: bytes) -> None:
        if kind == 68:  # DataRow
            self.current.add_row(payload)
        elif kind == 84:  # RowDescription
            self.current = Reply(self.conn.shapes.from_payload(payload))
        elif kind == 67:  # CommandComplete
            reply = self.current
            reply.command = msg.parse_command_complete(payload)
            if reply.error is not None and self.error is None:
                self.error = reply.error
            self.last, self.current = reply, Reply()
        elif kind == 90:
            self.done = True
        elif kind == 69:
            if self.error is None:
                self.error = _server_error(payload)
        elif kind == 73:  # EmptyQueryResponse
            self.last = Reply()
        else:
            self._copy_misuse(kind)

    def _copy_misuse(self, kind: int) -> None:
        if kind in (71, 87):  # CopyIn/CopyBothResponse: refuse, the server then fails it
            self.conn._send(frontend.copy_fail("COPY FROM STDIN needs copy_in()"))
            self._misuse("COPY ... FROM STDIN needs copy_in()")
        elif kind == 72:  # CopyOutResponse: the data that follows is dropped
            self._misuse("COPY ... TO STDOUT needs copy_out()")
        elif kind not in (100, 99):  # CopyData, CopyDone
            raise ProtocolError(f"unexpected message {bytes([kind])!r} in reply to a query")

    def _misuse(self, text: str) -> None:
        if self.error is None:
            self.error = InterfaceError(text)

    def result(self) -> Result:
        if self.error is not None:
            raise self.error
        return (self.last or self.current).result()


class _QueryOp:
    """The reply to one extended-protocol statement (or a stream's portal)."""

    __slots__ = ("conn", "done", "reply", "statement", "parses", "state")

    def __init__(self, conn: PinnedConnection, reply: Reply, statement: Statement | None,
                 parses: bool):
        self.conn = conn
        self.done = False
        self.reply = reply
        self.statement = statement
        self.parses = parses  # this request carries the Parse of ``statement``
        self.state = ""  # for streams: "suspended", "complete", "failed", "ready"

    @property
    def error(self) -> BaseException | None:
        return self.reply.error

    def feed(self, kind: int, payload: bytes) -> None:
        if kind == 68:
            self.reply.add_row(payload)
        elif kind == 90:
            self.state = "ready"
            self.done = True
        elif kind == 67:
            self.reply.command = msg.parse_command_complete(payload)
            self._pause("complete")
        elif kind == 84:
            self._describe(self.conn.shapes.from_payload(payload))
        elif kind == 115:  # PortalSuspended
            self._pause("suspended")
        elif kind == 69:
            self._error(msg.parse_fields(payload))
            self._pause("failed")
        else:
            self._other(kind)

    def _pause(self, state: str) -> None:
        self.state = state
        if self.conn.streaming:
            self.done = True  # a stream decides what to send next

    def _other(self, kind: int) -> None:
        if kind == 49:  # ParseComplete: the statement exists now, whatever follows
            self.parses = False
        elif kind == 110:  # NoData
            self.reply.shape = EMPTY_SHAPE
            if self.statement is not None and self.statement.shape is None:
                self.statement.shape = EMPTY_SHAPE
        elif kind == 73:  # EmptyQueryResponse
            self.reply.command = ""
            self._pause("complete")
        elif kind in (71, 72, 87):
            if self.reply.error is None:
                self.reply.error = InterfaceError("COPY needs copy_in() or copy_out()")
            if kind != 72:
                self.conn._send(frontend.copy_fail("COPY FROM STDIN needs copy_in()"))
        elif kind not in (50, 51, 116, 100, 99):  # Bind/CloseComplete, ParameterDescription
            raise ProtocolError(f"unexpected message {bytes([kind])!r} in reply to a query")

    def _describe(self, shape: Any) -> None:
        self.reply.shape = shape
        statement = self.statement
        if statement is not None and statement.shape is None:
            shapes = self.conn.shapes
            learn_shape(statement, shape.columns, shapes.make, shapes.preferred_format)

    def _error(self, fields: dict[str, str]) -> None:
        reply = self.reply
        if reply.error is None:
            reply.fail(fields)
        statement = self.statement
        if statement is None:
            return
        cache = self.conn.statements
        if self.parses:  # Parse itself failed: the statement does not exist on the server
            cache.discard(statement, close=False)
        elif is_stale_statement_error(reply.error):
            cache.discard(statement, close=fields.get("C") != "26000")


class _CopyOp:
    """COPY through its phases: up to the Copy{In,Out}Response (a pause), then to the end."""

    __slots__ = ("conn", "expect", "done", "copying", "command", "error")

    def __init__(self, conn: PinnedConnection, expect: int):
        self.conn = conn
        self.expect = expect  # 71 CopyInResponse or 72 CopyOutResponse
        self.done = False
        self.copying = False
        self.command = ""
        self.error: BaseException | None = None

    def feed(self, kind: int, payload: bytes) -> None:
        if kind == 100 or kind == 99:  # CopyData while draining, CopyDone
            return
        if kind == self.expect:
            self.copying = self.done = True
        elif kind == 67:
            self.command = msg.parse_command_complete(payload)
        elif kind == 69:
            if self.error is None:
                self.error = _server_error(payload)
        elif kind == 90:
            self.copying = False
            self.done = True
        elif kind in (71, 87):
            self.conn._send(frontend.copy_fail("wrong COPY direction"))
            self._wrong()
        elif kind in (72, 84, 68, 73):
            self._wrong()
        else:
            raise ProtocolError(f"unexpected message {bytes([kind])!r} during COPY")

    def _wrong(self) -> None:
        if self.error is None:
            direction = "FROM STDIN" if self.expect == 71 else "TO STDOUT"
            self.error = InterfaceError(f"the statement is not a COPY ... {direction}")


# -- the connection ---------------------------------------------------------------------


class PinnedConnection:
    """One exclusive server connection, driven directly by the greenlet that holds it."""

    def __init__(self, server: ServerConnection, shapes: ShapeFactory, *,
                 statement_cache_size: int = 512,
                 on_notice: Callable[[dict[str, str]], None] | None = None,
                 cancel_grace: float = 5.0):
        self.server = server
        self.shapes = shapes
        self.registry = shapes.registry
        self.statements = StatementCache(statement_cache_size)
        self.notifications: deque[Notify] = deque()
        self.on_notice = on_notice
        self.cancel_grace = cancel_grace
        self.status = server.transaction_status or "I"
        self.outstanding = 0  # ReadyForQuery messages still owed to us
        self.broken: str | None = None  # why the connection must not be used again
        self.active: Any = None  # a stream, COPY OUT or pipeline between two calls
        self.streaming = False  # the active op pauses at PortalSuspended/CommandComplete
        self.created = time.monotonic()
        self.used = False  # a request was written since the last reset
        self.pool_generation = 0
        self._sock = server.transport
        self._frames = server.frames
        self._inbox: deque[tuple[int, bytes]] = deque()
        self._deadline: float | None = None
        self._prefix: list[tuple[bytes, object]] = []  # deferred simple queries, with a tag
        self._dropped_notifications = 0

    @property
    def pid(self) -> int:
        return self.server.pid

    @property
    def age(self) -> float:
        return time.monotonic() - self.created

    @property
    def clean(self) -> bool:
        """Nothing owed, nothing open, nothing broken: fit to run the next request."""
        return self.broken is None and self.outstanding == 0 and self.active is None

    def __repr__(self) -> str:
        state = f"broken ({self.broken})" if self.broken else self.status
        return f"<PinnedConnection pid={self.server.pid} {state}>"

    # -- reading ------------------------------------------------------------------------
    def _fill(self) -> None:
        """Receive more bytes and frame every complete message into the inbox."""
        frames = self._frames
        timer = None
        deadline = self._deadline
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Expired()
            timer = gevent.Timeout(remaining, _Expired())
            timer.start()
        try:
            target = frames.recv_target()
            if target is None:
                data = self._sock.recv(RECV_SIZE)
                received = len(data)
                if received:
                    frames.feed(data)
            else:
                try:
                    received = self._sock.recv_into(target)
                finally:
                    target.release()
                if received:
                    frames.advance(received)
        except OperationalError as exc:
            raise self._lost(str(exc)) from exc
        finally:
            if timer is not None:
                timer.close()
        if not received:
            raise self._lost("the server closed the connection")
        self._inbox.extend(frames.read_messages())

    def _lost(self, reason: str) -> OperationalError:
        self._break(reason)
        self.server.close(terminate=False)
        if self.outstanding:
            return IndeterminateResultError(
                f"{reason}; the statement may or may not have run")
        return OperationalError(reason)

    def _drive(self, ops: Sequence[Any]) -> None:
        """Feed backend messages to ``ops`` in order until each one is done."""
        inbox = self._inbox
        for op in ops:
            feed = op.feed
            while not op.done:
                if not inbox:
                    self._fill()
                    continue
                kind, payload = inbox.popleft()
                if kind in _ASYNC:
                    self._async(kind, payload)
                    continue
                if kind == 90:
                    self._ready(payload)
                elif kind == 69:
                    self._check_fatal(payload)
                feed(kind, payload)

    def _step(self, op: Any) -> None:
        """Feed the next buffered message to ``op`` (asynchronous ones are handled here)."""
        kind, payload = self._inbox.popleft()
        if kind in _ASYNC:
            self._async(kind, payload)
            return
        if kind == 90:
            self._ready(payload)
        elif kind == 69:
            self._check_fatal(payload)
        op.feed(kind, payload)

    def _ready(self, payload: bytes) -> None:
        self.status = msg.parse_ready_for_query(payload)
        self.outstanding -= 1
        if self.outstanding < 0:
            self.outstanding = 0
            raise ProtocolError("ReadyForQuery without a request")

    def _check_fatal(self, payload: bytes) -> None:
        fields = msg.parse_fields(payload)
        if fields.get("V", fields.get("S")) not in ("FATAL", "PANIC"):
            return
        error = DatabaseError.from_fields(fields)
        self._break("the server ended the connection")
        self.server.close(terminate=False)
        exc = OperationalError(f"the server ended the connection: {error}")
        exc.sqlstate = error.sqlstate  # type: ignore[attr-defined]
        raise exc from error

    def _async(self, kind: int, payload: bytes) -> None:
        if kind == 65:
            self._queue_notification(msg.parse_notification(payload))
        elif kind == 78:
            if self.on_notice is not None:
                self.on_notice(msg.parse_fields(payload))
        else:
            name, value = msg.parse_parameter_status(payload)
            self.server.parameters[name] = value

    def _queue_notification(self, note: Notify) -> None:
        queue = self.notifications
        if len(queue) >= NOTIFICATION_LIMIT:
            queue.popleft()
            self._dropped_notifications += 1
            if self._dropped_notifications == 1:
                log.warning("pgmux: more than %d unread notifications; dropping the oldest",
                            NOTIFICATION_LIMIT)
        queue.append(note)

    def _run(self, ops: Sequence[Any], timeout: float | None) -> bool:
        """Drive ``ops`` to completion; True if the deadline passed and we cancelled.

        Any exception that escapes leaves a reply half read: the connection is broken.
        """
        try:
            if timeout is not None:
                self._deadline = time.monotonic() + timeout
            try:
                self._drive(ops)
                return False
            except _Expired:
                self._deadline = None
            self._cancel_and_drain(ops, timeout)
            return True
        except BaseException:
            self._break("interrupted while reading a reply")
            raise
        finally:
            self._deadline = None

    def _cancel_and_drain(self, ops: Sequence[Any], timeout: float | None) -> None:
        """CancelRequest, then the rest of the replies, all within one grace period.

        The grace is the caller's timeout again (at least ``MIN_CANCEL_GRACE``), capped
        at ``cancel_grace``: a caller who asked for 0.3 s is not kept waiting for 5 s.
        A cancel whose delivery the server did not confirm in that time could still
        land on a later statement, so the connection is retired after this call.
        """
        grace = self.cancel_grace
        if timeout is not None:
            grace = min(grace, max(MIN_CANCEL_GRACE, timeout))
        started = time.monotonic()
        try:
            confirmed = self.server.send_cancel(timeout=grace)
        except Exception as exc:
            self._break("a cancel request could not be sent")
            self.close()
            raise QueryTimeout(f"no result within {timeout}s and the cancel request failed "
                               f"({exc}); the connection was closed") from None
        self._deadline = started + grace
        try:
            self._drive(ops)
        except _Expired:
            self._break("the server did not answer a cancel request")
            self.close()
            raise QueryTimeout(
                f"no result within {timeout}s, and no answer within {grace}s of the "
                "cancel request; the connection was closed") from None
        if not confirmed:
            self._break("a cancel request was not confirmed and could hit a later statement")

    @staticmethod
    def _outcome(ops: Sequence[Any], timed_out: bool, timeout: float | None) -> None:
        """Raise the first error among ``ops``; a cancelled one as QueryTimeout."""
        for op in ops:
            error = op.error
            if error is None:
                continue
            if timed_out and _is_cancel(error):
                raise _timeout_error(timeout, error) from error
            raise error

    # -- writing ------------------------------------------------------------------------
    def _check_usable(self, owner: object = None) -> None:
        if self.broken is not None:
            raise OperationalError(f"the connection is unusable: {self.broken}")
        active = self.active
        if active is not None and active is not owner:
            active.abandon("another statement ran on its connection")

    def _request(self, data: bytes, replies: int,
                 owner: object = None) -> tuple[bytes, list[_SimpleOp]]:
        """``data`` after any deferred prefix, and the ops that read the prefix's replies."""
        self._check_usable(owner)
        self.used = True
        prefix_ops: list[_SimpleOp] = []
        if self._prefix:
            data = b"".join(message for message, _ in self._prefix) + data
            prefix_ops = [_SimpleOp(self) for _ in self._prefix]
            self._prefix = []
        self.outstanding += replies + len(prefix_ops)
        return data, prefix_ops

    def _send(self, data: bytes) -> None:
        """Write ``data``; a write cut short leaves the stream unusable."""
        try:
            self._sock.sendall(data)
        except OperationalError as exc:
            raise self._lost(str(exc)) from exc
        except BaseException:
            self._break("interrupted while writing a request")
            raise

    def _break(self, reason: str) -> None:
        if self.broken is None:
            self.broken = reason

    # -- deferred statements (BEGIN, SAVEPOINT) -------------------------------------------
    def defer(self, sql: str, tag: object) -> None:
        """Queue ``sql`` to be written ahead of the next request."""
        self._prefix.append((frontend.query(sql), tag))

    def undefer(self, tag: object) -> bool:
        """Drop the last deferred statement if it carries ``tag``: it never reached the server."""
        if self._prefix and self._prefix[-1][1] is tag:
            self._prefix.pop()
            return True
        return False

    def _flush_prefix(self) -> None:
        """Run the deferred statements now (before waiting for notifications)."""
        if not self._prefix:
            return
        data, ops = self._request(b"", 0)
        self._send(data)
        self._run(ops, None)
        self._outcome(ops, False, None)

    @property
    def in_transaction(self) -> bool:
        return self.status != "I" or bool(self._prefix)

    # -- statements ---------------------------------------------------------------------
    def command(self, sql: str, timeout: float | None = None) -> Result:
        """Run ``sql`` with a simple Query (several statements allowed): the last result."""
        op = _SimpleOp(self)
        data, ops = self._request(frontend.query(sql), 1)
        ops.append(op)
        self._send(data)
        timed_out = self._run(ops, timeout)
        self._outcome(ops, timed_out, timeout)
        return op.result()

    def query(self, sql: str, params: Sequence[Any] = (),
              timeout: float | None = None) -> Result:
        """Run one statement: extended protocol with ``params``, a simple Query without."""
        if not params:
            return self.command(sql, timeout)
        oids, formats, values = self.registry.encode_params(params)
        for attempt in (1, 2):
            data, reply, statement, parses = self._bind(sql, oids, formats, values,
                                                        frontend.EXECUTE_SYNC)
            op = _QueryOp(self, reply, statement, parses)
            data, ops = self._request(data, 1)
            ops.append(op)
            self._send(data)
            timed_out = self._run(ops, timeout)
            if (attempt == 1 and len(ops) == 1 and statement is not None and not timed_out
                    and self.status == "I" and is_stale_statement_error(reply.error)):
                continue  # the failed attempt changed nothing: prepare again, once
            break
        self._outcome(ops, timed_out, timeout)
        return reply.result()

    def _bind(self, sql: str, oids: tuple[int, ...], formats: tuple[int, ...],
              values: list[bytes | None], tail: bytes, describe: bool = False,
              ) -> tuple[bytes, Reply, Statement | None, bool]:
        """Parse (unless cached), Bind and Execute messages for the unnamed portal."""
        cache = self.statements
        if cache.capacity <= 0:
            data = (frontend.parse(b"", sql, oids) + frontend.bind(b"", b"", formats, values)
                    + frontend.DESCRIBE_UNNAMED_PORTAL + tail)
            return data, Reply(), None, False
        closes = cache.take_closes()
        statement = cache.get((sql, oids))
        if statement is None:
            statement = cache.add(sql, oids)
            data = (closes + statement.parse_message()
                    + frontend.bind(b"", statement.name, formats, values)
                    + frontend.DESCRIBE_UNNAMED_PORTAL + tail)
            return data, Reply(), statement, True
        bind = frontend.bind(b"", statement.name, formats, values, statement.result_formats)
        if statement.shape is None or describe:
            return closes + bind + frontend.DESCRIBE_UNNAMED_PORTAL + tail, Reply(), statement, False
        return closes + bind + tail, Reply(statement.shape), statement, False

    # -- notifications ----------------------------------------------------------------------
    def wait_notify(self, timeout: float | None) -> Notify | None:
        """The next notification, waiting up to ``timeout`` seconds (None: forever)."""
        if self.notifications:
            return self.notifications.popleft()
        self._check_usable()
        self._flush_prefix()
        inbox = self._inbox
        if timeout is not None:
            self._deadline = time.monotonic() + timeout
        try:
            while not self.notifications:
                if not inbox:
                    self._fill()
                    continue
                kind, payload = inbox.popleft()
                if kind in _ASYNC:
                    self._async(kind, payload)
                    continue
                if kind == 69:
                    self._check_fatal(payload)
                self._break("unexpected message while idle")
                raise ProtocolError(f"unexpected message {bytes([kind])!r} while idle")
        except _Expired:
            return None
        finally:
            self._deadline = None
        return self.notifications.popleft()

    # -- COPY ---------------------------------------------------------------------------
    def copy_in(self, sql: str, source: Iterable[Any], timeout: float | None = None) -> int:
        """Run ``COPY ... FROM STDIN`` with data from ``source``; the rows copied."""
        op = _CopyOp(self, 71)
        data, ops = self._request(frontend.query(sql), 1)
        ops.append(op)
        deadline = None if timeout is None else time.monotonic() + timeout
        self._send(data)
        timed_out = self._run(ops, timeout)
        if timed_out and op.copying:  # cancelled as the COPY began: end it for certain
            self._send(frontend.copy_fail("canceled: the COPY ran past its timeout"))
            self._finish_copy(op)
        if not op.copying:  # the statement failed, or it was not a COPY FROM STDIN
            self._outcome(ops, timed_out, timeout)
            raise InterfaceError("the statement is not a COPY ... FROM STDIN")
        op.done = False
        try:
            failure, expired, first = self._upload(source, deadline)
        except BaseException:
            self._break("interrupted during COPY FROM STDIN")
            raise
        if first is not None:  # the server answered while we were still sending
            op.feed(*first)
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        timed_out = self._run([op], remaining) or expired
        if failure is not None:
            raise failure
        self._outcome([op], timed_out, timeout)
        return msg.rowcount_from_tag(op.command)

    def _finish_copy(self, op: _CopyOp) -> None:
        """Read a COPY that is being ended to its ReadyForQuery (dropping any data)."""
        op.done = False
        self._run([op], self.cancel_grace)
        if op.error is None:
            op.error = _timeout_error(None, None)

    def _upload(self, source: Iterable[Any], deadline: float | None,
                ) -> tuple[BaseException | None, bool, tuple[int, bytes] | None]:
        """Send the COPY data; a helper greenlet watches for the server ending the COPY early.

        Returns (the producer's exception, whether the deadline passed, the server's
        first message if it came early).
        """
        watcher = gevent.spawn(self._first_message)
        try:
            failure, expired = self._send_copy_data(source, deadline, watcher)
            if watcher.ready():
                return failure, expired, watcher.get()
            if failure is not None:
                reason = f"the data source raised {type(failure).__name__}"
                self._send(frontend.copy_fail(reason))
            elif expired:
                self._send(frontend.copy_fail("canceled: the COPY ran past its timeout"))
            else:
                self._send(frontend.COPY_DONE)
            return failure, expired, None
        finally:
            if not watcher.ready():
                watcher.kill()

    def _first_message(self) -> tuple[int, bytes]:
        inbox = self._inbox
        while True:
            if not inbox:
                self._fill()
                continue
            kind, payload = inbox.popleft()
            if kind in _ASYNC:
                self._async(kind, payload)
                continue
            if kind == 90:
                self._ready(payload)
            elif kind == 69:
                self._check_fatal(payload)
            return kind, payload

    def _send_copy_data(self, source: Iterable[Any], deadline: float | None,
                        watcher: gevent.Greenlet) -> tuple[BaseException | None, bool]:
        encode = self._copy_bytes
        buffer = bytearray()
        items = iter(source)
        end = object()
        while True:
            try:
                item = next(items, end)
                if item is end:
                    break
                buffer += encode(item)
            except Exception as exc:  # the producer (or a value in it) failed
                return exc, False
            if deadline is not None and time.monotonic() > deadline:
                return None, True
            if len(buffer) < COPY_CHUNK:
                continue
            self._send(frontend.copy_data(bytes(buffer)))
            buffer.clear()
            gevent.sleep(0)  # let the watcher see an early answer even if no write blocked
            if watcher.ready():
                return None, False
        if buffer:
            self._send(frontend.copy_data(bytes(buffer)))
        return None, False

    def _copy_bytes(self, item: Any) -> Any:
        if isinstance(item, (bytes, bytearray, memoryview)):
            return item
        if isinstance(item, str):
            return item.encode()
        return encode_copy_row(item, self.registry)

    def copy_out(self, sql: str, timeout: float | None = None) -> CopyOutReader:
        """Start ``COPY ... TO STDOUT``; the reader yields the data in chunks."""
        op = _CopyOp(self, 72)
        data, ops = self._request(frontend.query(sql), 1)
        ops.append(op)
        self._send(data)
        timed_out = self._run(ops, timeout)
        if timed_out and op.copying:  # cancelled as the COPY began: read it to its end
            self._finish_copy(op)
        if not op.copying:
            self._outcome(ops, timed_out, timeout)
            raise InterfaceError("the statement is not a COPY ... TO STDOUT")
        op.done = False
        reader = CopyOutReader(self, op, timeout)
        self.active = reader
        return reader

    # -- streaming ------------------------------------------------------------------------
    def stream(self, sql: str, params: Sequence[Any] = (), batch: int = 1000,
               timeout: float | None = None) -> RowStream:
        """Start a portal over ``sql``; the stream fetches ``batch`` rows per round trip."""
        if batch < 1:
            raise InterfaceError("batch must be at least 1")
        oids, formats, values = self.registry.encode_params(params) if params else ((), (), [])
        more = frontend.execute(b"", batch) + frontend.FLUSH
        for attempt in (1, 2):
            data, reply, statement, parses = self._bind(sql, oids, formats, values, more,
                                                        describe=True)
            op = _QueryOp(self, reply, statement, parses)
            data, ops = self._request(data, 1)
            stream = RowStream(self, op, more, timeout)
            stream.start(data, ops)
            if (attempt == 1 and not ops and statement is not None and self.status == "I"
                    and stream.failure is reply.error and is_stale_statement_error(reply.error)):
                continue  # nothing ran: prepare again, once
            break
        if stream.failure is not None and stream._ready is None:
            raise stream.failure  # failed before any row: raise here, not on iteration
        return stream

    # -- explicit pipelines -------------------------------------------------------------------
    def pipeline(self, timeout: float | None = None) -> ExplicitPipeline:
        self._check_usable()
        pipeline = ExplicitPipeline(self, timeout)
        self.active = pipeline
        return pipeline

    def _run_while_sending(self, data: bytes, ops: Sequence[Any],
                           timeout: float | None) -> bool:
        """Write ``data`` from a helper greenlet while this one reads the replies."""
        if len(data) <= CONCURRENT_SEND:
            self._send(data)
            return self._run(ops, timeout)
        sender = gevent.spawn(self._send, data)
        try:
            timed_out = self._run(ops, timeout)
        finally:
            if not sender.ready():
                sender.kill()
        if sender.exception is not None:
            raise sender.exception
        return timed_out

    # -- lifecycle --------------------------------------------------------------------------
    def reset(self, timeout: float, setup: Sequence[str] = ()) -> bool:
        """Make the connection fit for the next borrower; False if it is not.

        ROLLBACK if in a transaction, DISCARD ALL, the pool's ``setup`` statements, all
        written at once; then every reply must be clean and the status idle.
        """
        if self.broken is not None:
            return False
        if not self.used and self.clean and self.status == "I":
            self._prefix = []  # nothing was sent since the last reset: nothing to undo
            return True
        timer = gevent.Timeout(timeout)
        timer.start()
        try:
            ops = self._reset_now(setup)
        except gevent.Timeout as exc:
            if exc is not timer:
                raise
            self._break("the reset did not finish in time")
            return False
        except Exception as exc:
            log.info("pgmux: resetting a pinned connection failed: %s", exc)
            return False
        finally:
            timer.close()
        if any(op.error is not None for op in ops) or self.status != "I" or not self.clean:
            return False
        self.statements.clear()
        self.notifications.clear()
        self.used = False
        return True

    def _reset_now(self, setup: Sequence[str]) -> list[_SimpleOp]:
        if self.active is not None:
            self.active.abandon("its session ended")
        self._prefix = []  # deferred statements never reached the server: nothing to undo
        messages = ([_ROLLBACK] if self.status != "I" else []) + [_DISCARD_ALL]
        messages += [frontend.query(sql) for sql in setup]
        data, _ = self._request(b"".join(messages), len(messages))
        ops = [_SimpleOp(self) for _ in messages]
        self._send(data)
        self._run(ops, None)
        return ops

    def probe(self) -> bool:
        """Whether an idle connection still looks alive (checked without waiting)."""
        if self.broken is not None or self.server.closed:
            return False
        try:
            readable, _, _ = gselect.select([self._sock.fileno()], [], [], 0)
        except (OSError, ValueError):
            return False
        if not readable:
            return True
        self._deadline = time.monotonic() + PROBE_TIMEOUT
        try:
            self._fill()
            while self._inbox:  # only asynchronous messages may arrive while idle
                kind, payload = self._inbox.popleft()
                if kind not in _ASYNC:
                    self._break("the server sent a message while the connection was idle")
                    return False
                self._async(kind, payload)
        except _Expired:
            return True  # e.g. a TLS record with no application data
        except Exception:
            return False
        finally:
            self._deadline = None
        return True

    def close(self) -> None:
        """Close the socket, with Terminate when the connection is at a clean point."""
        clean = self.outstanding == 0 and self.broken is None
        self._break("closed")
        self.server.close(terminate=clean)

    def discard(self) -> None:
        """Close a connection being dropped; cancel first what may still run on it."""
        if self.server.closed:
            return
        if self.outstanding or self.active is not None:
            self._break("dropped while busy")
            gevent.spawn(self._cancel_then_close)
        else:
            self.close()

    def _cancel_then_close(self) -> None:
        try:
            self.server.send_cancel(timeout=self.cancel_grace)
        except Exception:
            pass
        finally:
            self.server.close(terminate=False)

    def abandon(self) -> None:
        """In a forked child: drop the socket without a byte on the wire."""
        self._break("abandoned after fork")
        self.server.close(terminate=False)


# -- the iterators ------------------------------------------------------------------------


class CopyOutReader:
    """The data of a ``COPY ... TO STDOUT``, read chunk by chunk."""

    def __init__(self, conn: PinnedConnection, op: _CopyOp, timeout: float | None):
        self.conn = conn
        self.op = op
        self.timeout = timeout
        self.finished = False
        self.abandoned: str | None = None

    def fetch(self) -> bytes | None:
        """The next chunk (every CopyData already received, joined); None at the end."""
        if self.finished:
            if self.abandoned:
                raise InterfaceError(f"the COPY was closed because {self.abandoned}")
            return None
        conn = self.conn
        try:
            chunk = self._read_chunk()
        except _Expired:
            conn._deadline = None
            self._finish(conn._cancel_and_drain, [self.op], self.timeout)
            raise _timeout_error(self.timeout, self.op.error) from self.op.error
        except BaseException:
            conn._break("interrupted during COPY TO STDOUT")
            self._detach()
            raise
        finally:
            conn._deadline = None
        if chunk is None:
            self._detach()
            conn._outcome([self.op], False, None)
        return chunk

    def _read_chunk(self) -> bytes | None:
        conn = self.conn
        op = self.op
        inbox = conn._inbox
        if self.timeout is not None:
            conn._deadline = time.monotonic() + self.timeout
        parts: list[bytes] = []
        while True:
            if not inbox:
                if parts:
                    return b"".join(parts)
                if op.done:
                    return None
                conn._fill()
                continue
            if inbox[0][0] == 100:
                parts.append(inbox.popleft()[1])
                continue
            conn._step(op)
            if op.done and not inbox:
                return b"".join(parts) if parts else None

    def _finish(self, drain: Callable[..., None], *args: Any) -> None:
        try:
            drain(*args)
        except BaseException:
            self.conn._break("interrupted while ending a COPY TO STDOUT")
            raise
        finally:
            self._detach()

    def _detach(self) -> None:
        self.finished = True
        if self.conn.active is self:
            self.conn.active = None

    def abandon(self, reason: str) -> None:
        """Stop early: cancel the COPY and drain the rest of it."""
        if self.finished:
            return
        self.abandoned = reason
        self.close()

    def close(self) -> None:
        if self.finished:
            return
        self._finish(self.conn._cancel_and_drain, [self.op], None)


class RowStream:
    """A portal read ``batch`` rows at a time (Execute with a row limit, then Flush).

    The next batch is requested as soon as one arrives, so the server works while
    the caller consumes; at most two batches are in memory.
    """

    def __init__(self, conn: PinnedConnection, op: _QueryOp, more: bytes,
                 timeout: float | None):
        self.conn = conn
        self.op = op
        self.more = more
        self.timeout = timeout
        self.finished = False
        self.failure: BaseException | None = None
        self.abandoned: str | None = None
        self._ready: list[Row] | None = None

    def start(self, data: bytes, prefix_ops: list[_SimpleOp]) -> None:
        """Write the request and read the first batch (errors wait in ``failure``)."""
        conn = self.conn
        conn._send(data)
        timed_out = conn._run(prefix_ops, self.timeout)
        conn.active = self
        self._ready = self._next_batch()
        conn._outcome(prefix_ops, timed_out, self.timeout)

    def fetch(self) -> list[Row] | None:
        """The next batch of rows; None at the end."""
        if self._ready is not None:
            rows, self._ready = self._ready, None
            return rows
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
        if self.finished:
            if self.abandoned:
                raise InterfaceError(f"the stream was closed because {self.abandoned}")
            return None
        rows = self._next_batch()
        if rows is None and self.failure is not None:
            return self.fetch()
        return rows

    def _next_batch(self) -> list[Row] | None:
        conn = self.conn
        op = self.op
        op.done = False
        conn.streaming = True
        try:
            timed_out = conn._run([op], self.timeout)
        finally:
            conn.streaming = False
        rows = op.reply.rows
        op.reply.rows = []
        if op.state == "suspended" and not timed_out:
            conn._send(self.more)  # ask for the next batch before handing this one out
            return rows
        self._end(timed_out)
        return rows or None

    def _end(self, timed_out: bool) -> None:
        """After the last row, an error or a timeout: Sync, then read to ReadyForQuery."""
        conn = self.conn
        op = self.op
        complete = op.state == "complete"
        if op.state != "ready":
            conn._send(frontend.SYNC)
            op.done = False
            timed_out = conn._run([op], self.timeout) or timed_out
        self._detach()
        error = op.reply.error
        if timed_out and (error is not None or not complete):
            self.failure = _timeout_error(self.timeout, error)
            self.failure.__cause__ = error
        else:
            self.failure = error

    def _detach(self) -> None:
        self.finished = True
        if self.conn.active is self:
            self.conn.active = None

    def abandon(self, reason: str) -> None:
        if not self.finished:
            self.abandoned = reason
            self.close()

    def close(self) -> None:
        """Stop early: close the portal, Sync, and drain what was already requested."""
        self._ready = None
        if self.finished:
            return
        conn = self.conn
        op = self.op
        self.finished = True
        try:
            conn._send(_CLOSE_PORTAL_SYNC)
            op.done = False
            conn._run([op], None)
        finally:
            op.reply.rows = []
            self._detach()


# -- explicit pipelines -----------------------------------------------------------------------


class PipelineOp:
    """One operation of an explicit pipeline and, once its group is synced, its outcome."""

    __slots__ = ("reply", "group", "error", "finished")

    def __init__(self, group: _Group):
        self.reply = Reply()
        self.group = group
        self.error: BaseException | None = None
        self.finished = False

    @property
    def synced(self) -> bool:
        return self.group.synced

    def finish(self, error: BaseException | None = None) -> None:
        self.finished = True
        if error is not None and self.error is None:
            self.error = error

    def outcome(self) -> Result:
        if self.error is not None:
            raise self.error
        return self.reply.result()


class _Group:
    """The operations between two Syncs; the group stands for its Sync in the queue."""

    __slots__ = ("ops", "synced", "aborted", "closed")

    def __init__(self) -> None:
        self.ops: list[PipelineOp] = []
        self.synced = False  # its ReadyForQuery was read
        self.aborted = False  # an error: the server skips the rest of the group
        self.closed = False  # its Sync is queued


class _PipelineReader:
    """Routes replies to the head of the pipeline's sent queue until it is empty."""

    __slots__ = ("pipeline",)
    error = None

    def __init__(self, pipeline: ExplicitPipeline):
        self.pipeline = pipeline

    @property
    def done(self) -> bool:
        return not self.pipeline._sent

    def feed(self, kind: int, payload: bytes) -> None:
        self.pipeline._route(kind, payload)


class ExplicitPipeline:
    """Operations queued with explicit Sync boundaries, sent and read in batches.

    Nothing is written until a result is asked for, the buffer passes
    ``PIPELINE_BUFFER`` or the pipeline finishes; then everything queued is written
    (by a helper greenlet if large, so replies are read while requests are written)
    and every reply to it is read. An error aborts the rest of its group.
    """

    def __init__(self, conn: PinnedConnection, timeout: float | None):
        self.conn = conn
        self.timeout = timeout
        self.finished = False
        self._chunks: list[bytes] = []
        self._size = 0
        self._queued: list[PipelineOp | _Group] = []
        self._sent: deque[PipelineOp | _Group] = deque()
        self._group = _Group()

    def add(self, sql: str, params: Sequence[Any] = ()) -> PipelineOp:
        oids, formats, values = self.conn.registry.encode_params(params) if params else ((), (), [])
        data = (frontend.parse(b"", sql, oids) + frontend.bind(b"", b"", formats, values)
                + _DESCRIBE_EXECUTE)
        op = PipelineOp(self._group)
        self._group.ops.append(op)
        self._queue(op, data)
        return op

    def sync(self) -> None:
        group, self._group = self._group, _Group()
        group.closed = True
        self._queue(group, frontend.SYNC)

    def _queue(self, item: PipelineOp | _Group, data: bytes) -> None:
        self._queued.append(item)
        self._chunks.append(data)
        self._size += len(data)
        if self._size >= PIPELINE_BUFFER:
            self.flush()

    def result(self, op: PipelineOp) -> Result:
        if not op.synced:
            if not op.group.closed:
                raise InterfaceError("this operation's group is not synced yet: call p.sync() "
                                     "first (or read it after the pipeline block)")
            self.flush()
        return op.outcome()

    def flush(self) -> None:
        """Write everything queued, then read every reply owed."""
        queued, self._queued = self._queued, []
        data = b"".join(self._chunks)
        self._chunks, self._size = [], 0
        if queued and not isinstance(queued[-1], _Group):
            data += frontend.FLUSH  # a partial group: have the server send what it has
        syncs = 0
        for item in queued:
            if isinstance(item, _Group):
                syncs += 1
                self._sent.append(item)
            elif item.group.aborted:
                item.finish(PipelineAborted("an earlier operation of this group failed"))
            else:
                self._sent.append(item)
        if not data and not self._sent:
            return
        conn = self.conn
        try:
            data, ops = conn._request(data, syncs, owner=self)
            timed_out = conn._run_while_sending(data, [*ops, _PipelineReader(self)],
                                                self.timeout)
        except OperationalError as exc:
            self._fail_unread(exc)
            raise
        if timed_out:
            self._convert_cancelled(queued)
        conn._outcome(ops, False, None)

    def _fail_unread(self, exc: BaseException) -> None:
        for item in self._sent:
            if isinstance(item, PipelineOp):
                item.finish(IndeterminateResultError(
                    f"the connection failed before this operation's result arrived: {exc}"))
        self._sent.clear()
        for item in self._queued:
            if isinstance(item, PipelineOp):
                item.finish(NotDispatchedError(f"not sent: {exc}"))
        self._queued = []

    def _convert_cancelled(self, items: list[PipelineOp | _Group]) -> None:
        for item in items:
            if isinstance(item, PipelineOp) and _is_cancel(item.error):
                cause = item.error
                item.error = _timeout_error(self.timeout, cause)
                item.error.__cause__ = cause

    def _route(self, kind: int, payload: bytes) -> None:
        head = self._sent[0]
        if isinstance(head, _Group):
            self._route_sync(head, kind, payload)
            return
        reply = head.reply
        if kind == 68:
            reply.add_row(payload)
        elif kind == 67:
            reply.command = msg.parse_command_complete(payload)
            self._sent.popleft()
            head.finish(reply.error)
        elif kind == 84:
            reply.shape = self.conn.shapes.from_payload(payload)
        elif kind == 110:
            reply.shape = EMPTY_SHAPE
        elif kind == 69:
            self._abort_group(head, _server_error(payload))
        elif kind == 73:
            self._sent.popleft()
            head.finish()
        else:
            self._route_other(head, kind)

    def _route_other(self, head: PipelineOp, kind: int) -> None:
        if kind in (49, 50, 100, 99):  # ParseComplete, BindComplete, CopyData, CopyDone
            return
        if kind in (71, 72, 87):
            if head.error is None:
                head.error = InterfaceError("COPY is not supported in a pipeline")
            if kind != 72:
                self.conn._send(frontend.copy_fail("COPY is not supported in a pipeline"))
            return
        raise ProtocolError(f"unexpected message {bytes([kind])!r} in a pipeline")

    def _route_sync(self, group: _Group, kind: int, payload: bytes) -> None:
        if kind == 90:
            self._sent.popleft()
            group.synced = True
        elif kind == 69:  # an error at the Sync itself (the implicit COMMIT): none took effect
            error = _server_error(payload)
            for op in group.ops:
                if op.error is None:
                    op.error = error
        else:
            raise ProtocolError(f"unexpected message {bytes([kind])!r} before ReadyForQuery")

    def _abort_group(self, op: PipelineOp, error: DatabaseError) -> None:
        sent = self._sent
        sent.popleft()
        op.finish(error)
        group = op.group
        group.aborted = True
        aborted = PipelineAborted(
            f"an earlier operation of this pipeline group failed: {error.message}")
        while sent and sent[0] is not group:
            item = sent.popleft()
            if isinstance(item, PipelineOp):
                item.finish(aborted)

    # -- the end of the block -------------------------------------------------------------------
    def finish(self) -> None:
        """A final Sync if operations follow the last one, then drain everything."""
        if self.finished:
            return
        try:
            if self._group.ops:
                self.sync()
            self.flush()
        finally:
            self.finished = True
            if self.conn.active is self:
                self.conn.active = None

    def abandon(self, reason: str) -> None:
        self.finish()

    def discard(self, reason: str) -> None:
        """Leave without waiting (the block was interrupted): unsent work is dropped."""
        if self.finished:
            return
        self.finished = True
        for item in self._queued:
            if isinstance(item, PipelineOp):
                item.finish(NotDispatchedError(f"not sent: {reason}"))
        self._queued, self._chunks = [], []
        conn = self.conn
        if conn.active is self:
            conn.active = None
        if self._sent:
            conn._break(f"a pipeline was left with replies unread ({reason})")
