"""Atomic units: several statements sent together on the multiplexed path, all or nothing.

``with db.atomic() as unit:`` collects statements; leaving the block sends them as one
Sync unit on a pipelined connection (``pgmux.engine.units``), which PostgreSQL runs as one
implicit transaction: no pinned connection, no reset, one round trip, locks held only
while the server runs it. Each call returns a ``Pending`` whose ``result()`` gives, after
the block, what the direct call would have returned. Statements are vetted as they are
added (the guard, transaction control, what cannot run in a transaction block), so a
refusal comes before anything is sent. An exception inside the block sends nothing.

``retries=N`` sends the whole unit again on a serialization failure (40001) or a deadlock
(40P01), at most N times, after a short jittered pause: a unit is replayable, since none
of its statements depends on a result the client read. Never after any other error, nor
when the outcome is unknown (``IndeterminateResultError``, ``QueryTimeout``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gevent

from pgmux.engine.result import Result
from pgmux.engine.units import UnitItem
from pgmux.errors import DatabaseError, InterfaceError
from pgmux.pending import Pending, StatementBlock
from pgmux.session import isolation_keywords
from pgmux.sql.units import unit_refusal
from pgmux.telemetry import PIPELINED
from pgmux.telemetry import Operation as Observed
from pgmux.telemetry.names import REPLAYS

if TYPE_CHECKING:
    from pgmux.client import Client, PreparedStatement

__all__ = ["AtomicUnit", "Pending"]

RETRIED_SQLSTATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock
BACKOFF = 0.002  # seconds: the first pause before a retry (doubling, jittered)
BACKOFF_MAX = 0.1
Params = Sequence[Any]


class AtomicUnit(StatementBlock[UnitItem]):
    """The block of ``Client.atomic()``: statements collected, sent as one unit at its end."""

    WHAT = "the atomic unit"

    def __init__(self, client: Client, isolation: str | None, read_only: bool, retries: int,
                 timeout: float | None):
        if retries < 0:
            raise InterfaceError("retries must not be negative")
        super().__init__()
        modes = isolation_keywords(isolation, read_only, False)
        self._leading = [f"SET TRANSACTION {modes}"] if modes else []
        self._read_only = read_only
        self._client = client
        self._retries = retries
        self._timeout = timeout

    def __enter__(self) -> AtomicUnit:
        return super().__enter__()

    def _item(self, statement: str | PreparedStatement, params: Params) -> UnitItem:
        return self._client.unit_item(statement, params, unit_refusal)

    def _send(self) -> None:
        observer = self._client.observer
        op = None
        if observer is not None:  # telemetry: the block is one operation, its replays in it
            texts = dict.fromkeys(observer.query_text(item.sql, bool(item.values or item.params))
                                  for item in self._items)
            op = observer.begin("; ".join(texts), PIPELINED, batch=len(self._items),
                                verbatim=True)
        if op is None:  # off, or part of an operation already running (DB-API executemany)
            self._send_unit()
            return
        try:
            self._send_unit(op)
        except BaseException as exc:
            op.failed(exc)
            raise
        op.succeeded()  # (named from its tags, which run_unit told it)

    def _send_unit(self, op: Observed | None = None) -> list[Result]:
        """Send the unit (again on 40001/40P01 within ``retries``: ``op`` counts them); settle
        the pending results; return them."""
        attempt = 0
        while True:
            try:
                answers = self._client.run_unit(self._items, self._leading, self._timeout,
                                                writes=not self._read_only)
            except DatabaseError as exc:
                if exc.sqlstate in RETRIED_SQLSTATES and attempt < self._retries:
                    attempt += 1
                    if op is not None:
                        op.pipelined[REPLAYS] = attempt
                    delay = min(BACKOFF * 2 ** (attempt - 1), BACKOFF_MAX)
                    gevent.sleep(delay * random.uniform(0.5, 1.5))
                    continue
                self._settle(None, exc)
                raise
            except BaseException as exc:
                self._settle(None, exc)
                raise
            for pending, result in zip(self._pending, answers, strict=True):
                pending.settle(result, None)
            return answers
