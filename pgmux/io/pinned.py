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

The code is split by purpose: the ops are in ``pinned_ops``, COPY in
``pinned_copy``, row streams in ``pinned_stream`` and explicit pipelines in
``pinned_pipeline``; those modules drive the connection through its methods here.
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
    OperationalError,
    ProtocolError,
    QueryTimeout,
)
from pgmux.guard import check_parameter_count
from pgmux.io.connect import RECV_SIZE, ServerConnection
from pgmux.io.pinned_copy import CopyOutReader, run_copy_in, start_copy_out
from pgmux.io.pinned_ops import _Expired, _is_cancel, _QueryOp, _SimpleOp, _timeout_error
from pgmux.io.pinned_pipeline import ExplicitPipeline, PipelineOp
from pgmux.io.pinned_stream import RowStream, open_stream
from pgmux.io.shapes import ShapeFactory
from pgmux.protocol import backend as msg
from pgmux.protocol import frontend
from pgmux.protocol.result import Reply, Result
from pgmux.protocol.statements import Statement, StatementCache, is_stale_statement_error

__all__ = ["CopyOutReader", "ExplicitPipeline", "Notify", "PinnedConnection", "PipelineOp",
           "RowStream"]

log = logging.getLogger("pgmux")

NOTIFICATION_LIMIT = 10_000  # queued notifications; the oldest are dropped beyond
PROBE_TIMEOUT = 0.5  # reading what an idle connection received, at acquire
MIN_CANCEL_GRACE = 0.25  # the least time a cancelled statement gets to answer

_ASYNC = frozenset((78, 83, 65))  # NoticeResponse, ParameterStatus, NotificationResponse
_ROLLBACK = frontend.query("ROLLBACK")
_DISCARD_ALL = frontend.query("DISCARD ALL")

Notify = tuple[int, str, str]  # (sender pid, channel, payload)


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
        message = self._take()
        if message is not None:
            op.feed(*message)

    def _take(self) -> tuple[int, bytes] | None:
        """Pop the next buffered message; None if it was asynchronous (and handled here).

        ``_drive`` does the same inline: it is the hot loop.
        """
        kind, payload = self._inbox.popleft()
        if kind in _ASYNC:
            self._async(kind, payload)
            return None
        if kind == 90:
            self._ready(payload)
        elif kind == 69:
            self._check_fatal(payload)
        return kind, payload

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
        check_parameter_count(sql, len(params))
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
        return run_copy_in(self, sql, source, timeout)

    def copy_out(self, sql: str, timeout: float | None = None) -> CopyOutReader:
        """Start ``COPY ... TO STDOUT``; the reader yields the data in chunks."""
        return start_copy_out(self, sql, timeout)

    # -- streaming ------------------------------------------------------------------------
    def stream(self, sql: str, params: Sequence[Any] = (), batch: int = 1000,
               timeout: float | None = None) -> RowStream:
        """Start a portal over ``sql``; the stream fetches ``batch`` rows per round trip."""
        return open_stream(self, sql, params, batch, timeout)

    # -- explicit pipelines -------------------------------------------------------------------
    def pipeline(self, timeout: float | None = None) -> ExplicitPipeline:
        """Open an explicit pipeline; it is the active reader until it finishes."""
        self._check_usable()
        pipeline = ExplicitPipeline(self, timeout)
        self.active = pipeline
        return pipeline

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
