"""Explicit pipelines on a pinned connection: operations queued between Syncs, read in batches.

Nothing is written until a result is asked for, the queue passes ``PIPELINE_BUFFER``
or the pipeline finishes; then everything queued is written (by a helper greenlet
if large, so replies are read while requests are written) and every reply to it is
read. Each operation is an open exchange of the connection's engine, through the
unnamed statement (an operation's Parse may be skipped with its group), each Sync a
``SyncExchange``; an error aborts the rest of its group (the server skips to the
Sync).

Before a flush writes statements whose result types are not known yet, they are
described in one round trip of their own, so that they decode as they would
anywhere else; inside a transaction the descriptions run in a savepoint that is
rolled back, so a statement that fails to parse there changes nothing until its
own turn comes. Only when a group is already open on the wire (a flush in the
middle of a group) is that impossible; such a statement then goes unprepared,
with text results.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gevent

from pgmux.engine import Exchange, SyncExchange
from pgmux.engine.result import Result
from pgmux.errors import (
    IndeterminateResultError,
    InterfaceError,
    NotDispatchedError,
    OperationalError,
    PipelineAborted,
)
from pgmux.io.active import ActiveReader
from pgmux.io.pinned import PinnedConnection, all_done, is_cancel, timeout_error

CONCURRENT_SEND = 32 * 1024  # larger pipeline flushes are written by a helper greenlet
PIPELINE_BUFFER = 1 << 20  # an explicit pipeline flushes itself past this many bytes
_SAVEPOINT = "SAVEPOINT pgmux_describe"
_UNDO_SAVEPOINT = "ROLLBACK TO SAVEPOINT pgmux_describe; RELEASE SAVEPOINT pgmux_describe"


class PipelineOp:
    """One operation of an explicit pipeline and, once its group is synced, its outcome."""

    __slots__ = ("sql", "params", "size", "group", "exchange", "error")

    def __init__(self, sql: str, params: tuple[tuple[int, ...], tuple[int, ...], list[Any]],
                 group: _Group):
        self.sql = sql
        self.params = params  # (oids, formats, encoded values)
        self.size = len(sql) + sum(len(v) for v in params[2] if v is not None)
        self.group = group
        self.exchange: Exchange | None = None  # once written
        self.error: BaseException | None = None  # not sent, or lost with the connection

    @property
    def synced(self) -> bool:
        return self.group.synced

    @property
    def finished(self) -> bool:
        return self.error is not None or (self.exchange is not None and self.exchange.done)

    def outcome(self) -> Result:
        if self.error is not None:
            raise self.error
        assert self.exchange is not None
        return self.exchange.result()


class _Group:
    """The operations between two Syncs; the group stands for its Sync in the queue."""

    __slots__ = ("ops", "sync", "closed", "aborted")

    def __init__(self) -> None:
        self.ops: list[PipelineOp] = []
        self.sync: SyncExchange | None = None  # once written
        self.closed = False  # its Sync is queued
        # An operation failed: the server skips the rest of the group (set after each
        # read, so that checking it costs nothing per operation).
        self.aborted = False

    @property
    def synced(self) -> bool:
        """Its ReadyForQuery was read."""
        return self.sync is not None and self.sync.done


class ExplicitPipeline(ActiveReader):
    """Operations queued with explicit Sync boundaries, sent and read in batches."""

    WHAT = "pipeline"

    def __init__(self, conn: PinnedConnection, timeout: float | None):
        super().__init__(conn)
        self.timeout = timeout
        self._queued: list[PipelineOp | _Group] = []
        self._size = 0
        self._group = _Group()
        self._group_on_wire = False  # operations of an unsynced group were written
        self._in_flight: list[Exchange] = []
        self._unread: list[PipelineOp] = []  # written, outcome not looked at yet
        conn.check_usable()
        self.attach()

    def add(self, sql: str, params: Sequence[Any] = ()) -> PipelineOp:
        self.conn.note(sql)
        op = PipelineOp(sql, self.conn.registry.encode_params(params), self._group)
        self._group.ops.append(op)
        self._queue(op, op.size)
        return op

    def sync(self) -> None:
        group, self._group = self._group, _Group()
        group.closed = True
        self._queue(group, 5)

    def _queue(self, item: PipelineOp | _Group, size: int) -> None:
        self._queued.append(item)
        self._size += size
        if self._size >= PIPELINE_BUFFER:
            self.flush()

    def result(self, op: PipelineOp) -> Result:
        if not op.synced:
            if not op.group.closed:
                raise InterfaceError("this operation's group is not synced yet: call p.sync() "
                                     "first (or read it after the pipeline block)")
            self.flush()
        return op.outcome()

    # -- writing and reading ----------------------------------------------------------------
    def flush(self) -> None:
        """Write everything queued, then read every reply owed."""
        queued, self._queued = self._queued, []
        self._size = 0
        conn = self.conn
        try:
            self._describe([item for item in queued if isinstance(item, PipelineOp)])
            exchanges = self._build(queued)
            if not exchanges and not self._in_flight:
                return
            started = conn.start(exchanges, owner=self, send=False)
            data = b"".join([exchange.data for exchange in started])
            if exchanges and not isinstance(queued[-1], _Group):
                data += conn.engine.flush()  # a partial group: the server sends what it has
            self._in_flight.extend(exchanges)
            timed_out = self._send_and_read(data, [*started[: len(started) - len(exchanges)],
                                                   *self._in_flight])
        except OperationalError as exc:
            self._fail_unread(queued, exc)
            raise
        self._in_flight = [e for e in self._in_flight if not e.done]
        self._after_read(queued, timed_out)
        conn.raise_first(started[: len(started) - len(exchanges)], False, None)

    def _describe(self, ops: list[PipelineOp]) -> None:
        """Learn what the statements about to be written return, in one round trip, and
        the types they return that are not known yet, in another."""
        engine = self.conn.engine
        unknown: dict[tuple[str, tuple[int, ...]], None] = {}
        for op in ops:
            if not op.group.aborted and not engine.is_described(op.sql, op.params[0]):
                unknown[(op.sql, op.params[0])] = None
        if self._group_on_wire:
            return
        if unknown:
            exchanges: list[Exchange] = [engine.describe(sql, oids) for sql, oids in unknown]
            if self.conn.in_transaction:
                exchanges = [engine.script(_SAVEPOINT), *exchanges,
                             engine.script(_UNDO_SAVEPOINT)]
            self.conn.run(exchanges, self.timeout, owner=self)  # errors come again, in order
        lookups = {id(lookup): lookup for op in ops
                   if (lookup := engine.types_of(op.sql, op.params[0])) is not None}
        if lookups:  # the types they return, before any of their rows is read
            self.conn.run(list(lookups.values()), self.timeout, owner=self)

    def _build(self, queued: list[PipelineOp | _Group]) -> list[Exchange]:
        engine = self.conn.engine
        exchanges: list[Exchange] = []
        for item in queued:
            if isinstance(item, _Group):
                item.sync = engine.sync()
                exchanges.append(item.sync)
                self._group_on_wire = False
                continue
            if item.group.aborted:
                item.error = PipelineAborted("an earlier operation of this group failed")
                continue
            exchange = engine.operation(item.sql, *item.params)
            item.exchange = exchange
            exchanges.append(exchange)
            self._unread.append(item)
            self._group_on_wire = True
        return exchanges

    def _send_and_read(self, data: bytes, exchanges: list[Exchange]) -> bool:
        """Write ``data`` (from a helper greenlet when large) while reading every reply."""
        conn = self.conn
        until = all_done(exchanges) if exchanges else (lambda: True)
        if len(data) <= CONCURRENT_SEND:
            conn.send(data)
            return conn.wait(until, self.timeout)
        sender = gevent.spawn(conn.send, data)
        try:
            timed_out = conn.wait(until, self.timeout)
        finally:
            if not sender.ready():
                sender.kill()
        if sender.exception is not None:
            raise sender.exception
        return timed_out

    def _after_read(self, queued: list[PipelineOp | _Group], timed_out: bool) -> None:
        unread = []
        for op in self._unread:  # written by this flush or an earlier one
            exchange = op.exchange
            assert exchange is not None  # (only written operations are unread)
            if not exchange.done:
                unread.append(op)
            elif exchange.error is not None:
                op.group.aborted = True
        self._unread = unread
        for item in queued:
            if isinstance(item, _Group):
                self._sync_outcome(item)
            elif timed_out and item.exchange is not None and is_cancel(item.exchange.error):
                cause = item.exchange.error
                item.error = timeout_error(self.timeout, cause)
                item.error.__cause__ = cause

    @staticmethod
    def _sync_outcome(group: _Group) -> None:
        """An error at the Sync itself (the implicit COMMIT): none of the group took effect."""
        sync = group.sync
        error = sync.error if sync is not None else None
        if error is None:
            return
        for op in group.ops:
            if op.error is None and (op.exchange is None or op.exchange.error is None):
                op.error = error

    def _fail_unread(self, queued: list[PipelineOp | _Group], exc: BaseException) -> None:
        for exchange in self._in_flight:
            if not exchange.done:
                exchange.lose(exc)
        for item in queued:
            if not isinstance(item, PipelineOp) or item.error is not None:
                continue
            if item.exchange is None:
                item.error = NotDispatchedError(f"not sent: {exc}")
            elif not item.exchange.done:
                item.error = IndeterminateResultError(
                    f"the connection failed before this operation's result arrived: {exc}")
        self._in_flight = []

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
            self.detach()

    def close(self) -> None:
        """Another statement comes (``abandon``): finish, reading every reply."""
        self.finish()

    def discard(self, reason: str) -> None:
        """Leave without waiting (the block was interrupted): unsent work is dropped."""
        if self.finished:
            return
        self.finished = True
        for item in self._queued:
            if isinstance(item, PipelineOp):
                item.error = NotDispatchedError(f"not sent: {reason}")
        self._queued = []
        self.detach()
        if any(not exchange.done for exchange in self._in_flight):
            self.conn.mark_broken(f"a pipeline was left with replies unread ({reason})")
