"""Row streaming on a pinned connection: a portal read a batch of rows per round trip."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pgmux.engine import DescribeExchange, Exchange, PortalExchange, Reply, is_stale_statement_error
from pgmux.engine.result import Row
from pgmux.errors import InterfaceError
from pgmux.io.pinned import PinnedConnection, timeout_error
from pgmux.sql.facts import check_parameter_count


def open_stream(conn: PinnedConnection, sql: str, params: Sequence[Any], batch: int,
                timeout: float | None) -> RowStream:
    """Start a portal over ``sql``; the stream fetches ``batch`` rows per round trip.

    An error before the first row is raised here, not on iteration.
    """
    if batch < 1:
        raise InterfaceError("batch must be at least 1")
    if params:
        check_parameter_count(sql, len(params))
    oids, formats, values = conn.registry.encode_params(params)
    more = conn.engine.portal_rows(batch)
    retried = False
    while True:
        first = conn.engine.query(sql, oids, formats, values, more, PortalExchange,
                                  cached=bool(params))
        if type(first) is DescribeExchange:
            timed_out = conn.run([first], timeout)
            conn.raise_first([first], timed_out, timeout)
            continue  # described: now the portal itself
        in_block = conn.in_transaction
        stream = RowStream(conn, first, more, timeout)
        timed_out = conn.run([first], timeout)
        stream.after_batch(timed_out)
        failure = stream.failure
        if (failure is not None and stream.ready is None and not retried and not in_block
                and is_stale_statement_error(failure)):
            retried = True  # nothing ran: prepare it again, once
            continue
        break
    if failure is not None and stream.ready is None:
        stream.failure = None
        raise failure
    return stream


class RowStream:
    """A portal read ``batch`` rows at a time (Execute with a row limit, then Flush).

    The next batch is requested as soon as one arrives, so the server works while
    the caller consumes; at most two batches are in memory.
    """

    def __init__(self, conn: PinnedConnection, first: Exchange, more: bytes,
                 timeout: float | None):
        self.conn = conn
        self.exchange = first  # the batch being read
        self.more = more
        self.timeout = timeout
        self.finished = False
        self.failure: BaseException | None = None
        self.abandoned: str | None = None
        self.ready: list[Row] | None = None  # a batch read and not yet handed out

    def fetch(self) -> list[Row] | None:
        """The next batch of rows; None at the end."""
        if self.ready is not None:
            rows, self.ready = self.ready, None
            return rows
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
        if self.finished:
            if self.abandoned:
                raise InterfaceError(f"the stream was closed because {self.abandoned}")
            return None
        exchange = self.exchange
        timed_out = self.conn.wait(lambda: exchange.done, self.timeout)
        self.after_batch(timed_out)
        return self.fetch()

    def after_batch(self, timed_out: bool) -> None:
        """The current batch is read (or its wait timed out): keep its rows, ask for the
        next one before they are handed out, or end the portal."""
        exchange = self.exchange
        reply = exchange.reply
        rows, reply.rows = reply.rows, []
        self.ready = rows or None
        if isinstance(exchange, PortalExchange) and exchange.suspended and not timed_out:
            self.exchange = nxt = PortalExchange(self.more, Reply(reply.shape))
            self.conn.active = self
            self.conn.start([nxt], owner=self)
            return
        self._end(exchange, timed_out)

    def _end(self, last: Exchange, timed_out: bool) -> None:
        """After the last row, an error or a timeout: Sync, then read to ReadyForQuery."""
        conn = self.conn
        complete = (last.done and last.error is None
                    and not (isinstance(last, PortalExchange) and last.suspended))
        sync = conn.engine.sync()
        try:
            conn.start([sync], owner=self)
            timed_out = conn.wait(lambda: sync.done, self.timeout) or timed_out
        finally:
            self._detach()
        error = last.error
        if timed_out and (error is not None or not complete):
            self.failure = timeout_error(self.timeout, error)
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
        self.ready = None
        if self.finished:
            return
        conn = self.conn
        self.finished = True
        self.exchange.wanted = False  # rows of the batch asked for ahead are dropped
        closing = conn.engine.close_portal()
        try:
            conn.start([closing], owner=self)
            conn.wait(lambda: closing.done, None)
        finally:
            self._detach()
