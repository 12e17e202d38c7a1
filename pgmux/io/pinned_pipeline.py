"""Explicit pipelines on a pinned connection: operations queued between Syncs, read in batches."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gevent

from pgmux.errors import (
    DatabaseError,
    IndeterminateResultError,
    InterfaceError,
    NotDispatchedError,
    OperationalError,
    PipelineAborted,
    ProtocolError,
)
from pgmux.io.pinned_ops import _is_cancel, _server_error, _timeout_error
from pgmux.protocol import backend as msg
from pgmux.protocol import frontend
from pgmux.protocol.result import EMPTY_SHAPE, Reply, Result

if TYPE_CHECKING:
    from pgmux.io.pinned import PinnedConnection

CONCURRENT_SEND = 32 * 1024  # larger pipeline flushes are written by a helper greenlet
PIPELINE_BUFFER = 1 << 20  # an explicit pipeline flushes itself past this many bytes

_DESCRIBE_EXECUTE = frontend.DESCRIBE_UNNAMED_PORTAL + frontend.EXECUTE_UNNAMED


def _run_while_sending(conn: PinnedConnection, data: bytes, ops: Sequence[Any],
                       timeout: float | None) -> bool:
    """Write ``data`` from a helper greenlet while this one reads the replies."""
    if len(data) <= CONCURRENT_SEND:
        conn._send(data)
        return conn._run(ops, timeout)
    sender = gevent.spawn(conn._send, data)
    try:
        timed_out = conn._run(ops, timeout)
    finally:
        if not sender.ready():
            sender.kill()
    if sender.exception is not None:
        raise sender.exception
    return timed_out


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
            timed_out = _run_while_sending(conn, data, [*ops, _PipelineReader(self)],
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
