"""Row streaming on a pinned connection: a portal read a batch of rows per round trip."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pgmux.errors import InterfaceError
from pgmux.io.pinned_ops import _QueryOp, _SimpleOp, _timeout_error
from pgmux.protocol import frontend
from pgmux.protocol.result import Row
from pgmux.protocol.statements import is_stale_statement_error

if TYPE_CHECKING:
    from pgmux.io.pinned import PinnedConnection

_CLOSE_PORTAL_SYNC = frontend.close_portal(b"") + frontend.SYNC


def open_stream(conn: PinnedConnection, sql: str, params: Sequence[Any], batch: int,
                timeout: float | None) -> RowStream:
    """Start a portal over ``sql``; the stream fetches ``batch`` rows per round trip."""
    if batch < 1:
        raise InterfaceError("batch must be at least 1")
    oids, formats, values = conn.registry.encode_params(params) if params else ((), (), [])
    more = frontend.execute(b"", batch) + frontend.FLUSH
    for attempt in (1, 2):
        data, reply, statement, parses = conn._bind(sql, oids, formats, values, more,
                                                    describe=True)
        op = _QueryOp(conn, reply, statement, parses)
        data, ops = conn._request(data, 1)
        stream = RowStream(conn, op, more, timeout)
        stream.start(data, ops)
        if (attempt == 1 and not ops and statement is not None and conn.status == "I"
                and stream.failure is reply.error and is_stale_statement_error(reply.error)):
            continue  # nothing ran: prepare again, once
        break
    if stream.failure is not None and stream._ready is None:
        raise stream.failure  # failed before any row: raise here, not on iteration
    return stream


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
