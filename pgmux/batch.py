"""Batches: independent statements sent together from one greenlet, each its own query.

``with db.batch() as b:`` collects statements as ``db.atomic()`` does, but its end hands
them to the multiplexer at once as independent queries (``Client.run_batch``): spread over
the pipelined connections by queue depth, carried by one writer wake-up per connection,
answered without a greenlet spawned, each with its own result or error. Not atomic: one
statement's error leaves the others alone, and each ``Pending`` raises its own (the
server's error, ``NotDispatchedError``, ``IndeterminateResultError``, ``PoolTimeout``);
leaving the block raises only what ended the wait itself (a kill, the batch's own
``timeout``: ``QueryTimeout``). ``db.gather([...])`` is the same as a list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pgmux.pending import Pending, StatementBlock
from pgmux.pool.dispatch import Request

if TYPE_CHECKING:
    from pgmux.client import Client, PreparedStatement

Params = Sequence[Any]
Planned = tuple[str, Request]  # one statement of a fan-out, vetted and encoded: its SQL and
#                                 its request (``Client.plan``)


class Batch(StatementBlock[Planned]):
    """The block of ``Client.batch()``: statements collected, sent together at its end,
    each its own query."""

    WHAT = "the batch"

    def __init__(self, client: Client, timeout: float | None):
        super().__init__()
        self._client = client
        self._timeout = timeout

    def __enter__(self) -> Batch:
        return super().__enter__()

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


__all__ = ["Batch", "Pending", "Planned"]
