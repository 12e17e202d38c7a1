"""COPY on a pinned connection: FROM STDIN with an upload watcher, TO STDOUT as a reader."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import gevent

from pgmux.errors import InterfaceError
from pgmux.io.pinned_ops import _CopyOp, _Expired, _timeout_error
from pgmux.protocol import backend as msg
from pgmux.protocol import frontend
from pgmux.types import encode_copy_row
from pgmux.types.registry import TypeRegistry

if TYPE_CHECKING:
    from pgmux.io.pinned import PinnedConnection

COPY_CHUNK = 64 * 1024  # CopyData messages are filled up to this size


def run_copy_in(conn: PinnedConnection, sql: str, source: Iterable[Any],
                timeout: float | None) -> int:
    """Run ``COPY ... FROM STDIN`` with data from ``source``; the rows copied."""
    op = _CopyOp(conn, 71)
    data, ops = conn._request(frontend.query(sql), 1)
    ops.append(op)
    deadline = None if timeout is None else time.monotonic() + timeout
    conn._send(data)
    timed_out = conn._run(ops, timeout)
    if timed_out and op.copying:  # cancelled as the COPY began: end it for certain
        conn._send(frontend.copy_fail("canceled: the COPY ran past its timeout"))
        _finish_copy(conn, op)
    if not op.copying:  # the statement failed, or it was not a COPY FROM STDIN
        conn._outcome(ops, timed_out, timeout)
        raise InterfaceError("the statement is not a COPY ... FROM STDIN")
    op.done = False
    try:
        failure, expired, first = _upload(conn, source, deadline)
    except BaseException:
        conn._break("interrupted during COPY FROM STDIN")
        raise
    if first is not None:  # the server answered while we were still sending
        op.feed(*first)
    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
    timed_out = conn._run([op], remaining) or expired
    if failure is not None:
        raise failure
    conn._outcome([op], timed_out, timeout)
    return msg.rowcount_from_tag(op.command)


def _finish_copy(conn: PinnedConnection, op: _CopyOp) -> None:
    """Read a COPY that is being ended to its ReadyForQuery (dropping any data)."""
    op.done = False
    conn._run([op], conn.cancel_grace)
    if op.error is None:
        op.error = _timeout_error(None, None)


def _upload(conn: PinnedConnection, source: Iterable[Any], deadline: float | None,
            ) -> tuple[BaseException | None, bool, tuple[int, bytes] | None]:
    """Send the COPY data; a helper greenlet watches for the server ending the COPY early.

    Returns (the producer's exception, whether the deadline passed, the server's
    first message if it came early).
    """
    watcher = gevent.spawn(_first_message, conn)
    try:
        failure, expired = _send_copy_data(conn, source, deadline, watcher)
        if watcher.ready():
            return failure, expired, watcher.get()
        if failure is not None:
            reason = f"the data source raised {type(failure).__name__}"
            conn._send(frontend.copy_fail(reason))
        elif expired:
            conn._send(frontend.copy_fail("canceled: the COPY ran past its timeout"))
        else:
            conn._send(frontend.COPY_DONE)
        return failure, expired, None
    finally:
        if not watcher.ready():
            watcher.kill()


def _first_message(conn: PinnedConnection) -> tuple[int, bytes]:
    """The server's next message that is not asynchronous (read by the upload watcher)."""
    while True:
        if not conn._inbox:
            conn._fill()
            continue
        message = conn._take()
        if message is not None:
            return message


def _send_copy_data(conn: PinnedConnection, source: Iterable[Any], deadline: float | None,
                    watcher: gevent.Greenlet) -> tuple[BaseException | None, bool]:
    registry = conn.registry
    buffer = bytearray()
    items = iter(source)
    end = object()
    while True:
        try:
            item = next(items, end)
            if item is end:
                break
            buffer += _copy_bytes(item, registry)
        except Exception as exc:  # the producer (or a value in it) failed
            return exc, False
        if deadline is not None and time.monotonic() > deadline:
            return None, True
        if len(buffer) < COPY_CHUNK:
            continue
        conn._send(frontend.copy_data(bytes(buffer)))
        buffer.clear()
        gevent.sleep(0)  # let the watcher see an early answer even if no write blocked
        if watcher.ready():
            return None, False
    if buffer:
        conn._send(frontend.copy_data(bytes(buffer)))
    return None, False


def _copy_bytes(item: Any, registry: TypeRegistry) -> Any:
    if isinstance(item, (bytes, bytearray, memoryview)):
        return item
    if isinstance(item, str):
        return item.encode()
    return encode_copy_row(item, registry)


def start_copy_out(conn: PinnedConnection, sql: str, timeout: float | None) -> CopyOutReader:
    """Start ``COPY ... TO STDOUT``; the reader yields the data in chunks."""
    op = _CopyOp(conn, 72)
    data, ops = conn._request(frontend.query(sql), 1)
    ops.append(op)
    conn._send(data)
    timed_out = conn._run(ops, timeout)
    if timed_out and op.copying:  # cancelled as the COPY began: read it to its end
        _finish_copy(conn, op)
    if not op.copying:
        conn._outcome(ops, timed_out, timeout)
        raise InterfaceError("the statement is not a COPY ... TO STDOUT")
    op.done = False
    reader = CopyOutReader(conn, op, timeout)
    conn.active = reader
    return reader


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

