"""Row streaming on a pinned connection: a portal read a batch of rows per round trip."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pgmux.engine import Exchange, RetryBudget
from pgmux.engine.outcome import DESCRIBED
from pgmux.engine.result import Row
from pgmux.errors import InterfaceError
from pgmux.io.active import ActiveReader
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
    conn.note(sql)
    engine = conn.engine
    oids, formats, values = conn.registry.encode_params(params)
    budget = RetryBudget()
    while True:
        first = engine.stream(sql, oids, formats, values, batch)
        timed_out = conn.run([first], timeout)
        outcome = engine.outcome(first)
        if outcome is DESCRIBED:  # described: now the portal itself
            if timed_out:
                raise timeout_error(timeout, None)
            budget.allows(outcome)
            continue
        stream = RowStream(conn, first, batch, timeout)
        stream.after_batch(timed_out)
        failure = stream.failure
        if failure is None or stream.ready is not None:
            return stream
        stream.failure = None
        if timed_out or not budget.allows(engine.outcome(first)):
            raise failure
        # a statement fault before any row: nothing ran, prepare it again


class RowStream(ActiveReader):
    """A portal read ``batch`` rows at a time (Execute with a row limit, then Flush).

    The next batch is requested as soon as one arrives, so the server works while
    the caller consumes; at most two batches are in memory.
    """

    WHAT = "stream"

    def __init__(self, conn: PinnedConnection, first: Exchange, batch: int,
                 timeout: float | None):
        super().__init__(conn)
        self.exchange = first  # the batch being read
        self.batch = batch
        self.timeout = timeout
        self.failure: BaseException | None = None
        self.ready: list[Row] | None = None  # a batch read and not yet handed out

    def fetch(self) -> list[Row] | None:
        """The next batch of rows; None at the end."""
        if self.ready is not None:
            rows, self.ready = self.ready, None
            return rows
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
        if self.ended():
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
        if exchange.suspended and not timed_out:
            self.exchange = nxt = self.conn.engine.more(self.batch, reply)
            self.attach()
            self.conn.start([nxt], owner=self)
            return
        self._end(exchange, timed_out)

    def _end(self, last: Exchange, timed_out: bool) -> None:
        """After the last row, an error or a timeout: Sync (when the portal's request has
        none of its own), then read to ReadyForQuery."""
        conn = self.conn
        try:
            if not last.ENDS_AT_READY:
                sync = conn.engine.sync()
                conn.start([sync], owner=self)
                timed_out = conn.wait(lambda: sync.done, self.timeout) or timed_out
        finally:
            self.detach()
        error = last.error
        complete = last.done and error is None and not last.suspended
        if timed_out and (error is not None or not complete):
            self.failure = timeout_error(self.timeout, error)
            self.failure.__cause__ = error
        else:
            self.failure = error

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
            self.detach()
