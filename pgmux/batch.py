"""Batches: independent statements sent together from one greenlet, each its own query.

``with db.batch() as b:`` collects statements as ``db.atomic()`` does, but its end hands
them to the multiplexer at once as independent queries (``Client.run_batch``): spread over
the pipelined connections by queue depth, carried by one writer wake-up per connection,
answered without a greenlet spawned, each with its own result or error. Not atomic: one
statement's error leaves the others alone, and each ``Pending`` raises its own (the
server's error, ``NotDispatchedError``, ``IndeterminateResultError``, ``PoolTimeout``);
leaving the block raises only what ended the wait itself (a kill, the batch's own
``timeout``: ``QueryTimeout``). ``db.gather([...])`` is the same as a list. ``FanOut`` is
the client's side of it (a base of ``Client``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pgmux.engine import Engine
from pgmux.engine.exchanges import Reply
from pgmux.errors import InterfaceError
from pgmux.multiplexed import Multiplexed, PreparedStatement
from pgmux.pending import Pending, StatementBlock
from pgmux.pool import dispatch
from pgmux.pool.dispatch import Request
from pgmux.pool.router import PipelinePool
from pgmux.telemetry.multiplexed import observe_each

Params = Sequence[Any]
Statement = Any  # SQL, a PreparedStatement, or either with its params: (sql, params)
Planned = tuple[str, Request]  # one statement of a fan-out, vetted and encoded: its SQL and
#                                 its request (``Client.plan``)


class Batch(StatementBlock[Planned]):
    """The block of ``Client.batch()``: statements collected, sent together at its end,
    each its own query."""

    WHAT = "the batch"

    def __init__(self, client: FanOut, timeout: float | None):
        super().__init__()
        self._client = client
        self._timeout = timeout

    def __enter__(self) -> Batch:
        super().__enter__()
        return self

    def _item(self, statement: str | PreparedStatement, params: Params) -> Planned:
        return self._client.plan(statement, params)

    def _send(self) -> None:
        try:
            answers = self._client.run_batch(self._items, self._timeout)
        except BaseException as exc:  # the wait itself ended: nothing is known of any
            self._settle(None, exc)
            raise
        for pending, answer in zip(self._pending, answers, strict=True):
            if isinstance(answer, BaseException):
                pending.settle(None, answer)
            else:
                pending.settle(answer.result(), None)


class FanOut(Multiplexed):
    """The fan-outs of a ``Client``: ``gather()``, ``batch()`` and their one entry,
    ``run_batch``."""

    def gather(self, statements: Iterable[Statement], *, timeout: float | None = None,
               return_exceptions: bool = False) -> list[Any]:
        """Independent statements sent together from this greenlet, each its own query on
        the multiplexed path; a list of their results (each a ``Result``), in order (see
        ``batch()``).

        ``statements``: SQL texts or prepared handles, or (either, params) pairs. Each is
        vetted and encoded before anything is sent. A statement's error (the server's,
        NotDispatchedError, IndeterminateResultError, PoolTimeout) is raised once all
        are answered, the first in order; with ``return_exceptions=True`` it takes the
        statement's place in the list instead."""
        self._in_own_thread()
        plan = self.plan
        requests = [plan(item, ()) if isinstance(item, (str, PreparedStatement)) else plan(*item)
                    for item in statements]
        answers = self.run_batch(requests, timeout)
        results: list[Any] = []
        for answer in answers:
            if isinstance(answer, BaseException):
                if not return_exceptions:
                    raise answer
                results.append(answer)
            else:
                results.append(answer.result())
        return results

    def batch(self, timeout: float | None = None) -> Batch:
        """Independent statements collected in a block and sent together at its end, each
        its own query (not atomic: each has its own result or error), from one greenlet
        with no greenlet spawned: ``with db.batch() as b: row = b.fetchone(sql, params)``."""
        self._in_own_thread()
        if self._closed:
            raise InterfaceError("the client is closed")
        return Batch(self, timeout)

    def plan(self, statement: str | PreparedStatement, params: Params) -> Planned:
        """(For ``Batch`` and ``gather``) one statement vetted and encoded as the
        multiplexed path does, ready for ``run_batch``."""
        pool = self._pipelines.current or self._first_pool(
            statement.sql if isinstance(statement, PreparedStatement) else statement)
        if isinstance(statement, PreparedStatement):
            entry = statement.entry
            slow = pool.costs.known and pool.costs.is_slow((entry.sql, entry.param_oids))
            return entry.sql, (Engine.catalog_query,
                               (entry.name, entry.sql, entry.param_oids, params), slow)
        oids, formats, values = self._encoded(pool, statement, params)
        slow = pool.costs.known and pool.costs.is_slow((statement, oids))
        return statement, (Engine.query, (statement, oids, formats, values), slow)

    def run_batch(self, requests: list[Planned], timeout: float | None, *,
                  traced: bool = False) -> list[Reply | BaseException]:
        """(For ``Batch`` and ``gather``) the entry of every fan-out: ``requests`` handed to
        the multiplexer at once (spread over the connections by queue depth, one writer
        wake-up each), waited for together; each one's reply, or its error. With telemetry
        on, an operation per request (``traced``: their builds already are)."""
        if self._observer is not None and not traced:
            return observe_each(self._observer, requests,
                                lambda each: self.run_batch(each, timeout, traced=True),
                                self._index_of)
        answers = dispatch.run_all(self._fan_out_pool(len(requests)),
                                   [request for _, request in requests], timeout)
        replies: list[Reply | BaseException] = []
        fence = self._fence
        wrote = False
        for (sql, _), answer in zip(requests, answers, strict=True):
            if not isinstance(answer, BaseException):
                reply = answer.reply
                if reply.error is None:
                    replies.append(reply)
                    if fence is not None and not wrote:
                        wrote = self._writes.is_write(sql)
                    continue
                answer = reply.error
            replies.append(answer)
        if wrote and fence is not None:
            fence.after_write()  # (read-your-writes: one fence for the fan-out)
        return replies

    def _fan_out_pool(self, statements: int) -> PipelinePool:
        return self._pipelines.get()


__all__ = ["Batch", "FanOut", "Pending", "Planned"]
