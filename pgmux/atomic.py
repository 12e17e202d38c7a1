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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gevent

from pgmux.engine.result import Result, first_row, first_value
from pgmux.engine.units import UnitItem
from pgmux.errors import DatabaseError, Error, InterfaceError
from pgmux.session import isolation_keywords
from pgmux.sql.units import unit_refusal

if TYPE_CHECKING:
    from pgmux.client import Client, PreparedStatement

RETRIED_SQLSTATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock
BACKOFF = 0.002  # seconds: the first pause before a retry (doubling, jittered)
BACKOFF_MAX = 0.1
Params = Sequence[Any]
_NOT_SENT = "the atomic unit has not been sent yet: read results after its block"


class Pending:
    """The result of one statement of an atomic unit, known once the unit has run."""

    __slots__ = ("_shape", "_value", "_error", "_ready")

    def __init__(self, shape: Callable[[Result], Any]):
        self._shape = shape  # Result -> what the direct call returns
        self._value: Any = None
        self._error: BaseException | None = None
        self._ready = False

    @property
    def done(self) -> bool:
        """Whether the unit ran (successfully or not)."""
        return self._ready

    def result(self) -> Any:
        """What the direct call returns (rowcount, Result, row or None, value); the unit's
        error if it failed; InterfaceError before the unit has been sent."""
        if not self._ready:
            raise InterfaceError(_NOT_SENT)
        if self._error is not None:
            raise self._error
        return self._value

    def _settle(self, result: Result | None, error: BaseException | None) -> None:
        self._ready = True
        if error is None and result is not None:
            try:
                self._value = self._shape(result)
            except Error as exc:  # e.g. fetchval of a row without columns
                error = exc
        self._error = error

    def __repr__(self) -> str:
        state = "pending" if not self._ready else "failed" if self._error else "done"
        return f"<pgmux.Pending {state}>"


class AtomicUnit:
    """The block of ``Client.atomic()``: statements collected, sent as one unit at its end."""

    def __init__(self, client: Client, isolation: str | None, read_only: bool, retries: int,
                 timeout: float | None):
        if retries < 0:
            raise InterfaceError("retries must not be negative")
        modes = isolation_keywords(isolation, read_only, False)
        self._leading = [f"SET TRANSACTION {modes}"] if modes else []
        self._read_only = read_only
        self._client = client
        self._retries = retries
        self._timeout = timeout
        self._items: list[UnitItem] = []
        self._pending: list[Pending] = []
        self._state = "new"

    def __enter__(self) -> AtomicUnit:
        if self._state != "new":
            raise InterfaceError("an atomic unit can be entered only once")
        self._state = "open"
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._state = "closed"
        if exc is not None:
            self._settle(None, InterfaceError(f"the atomic unit was not sent: its block "
                                              f"raised {type(exc).__name__}"))
            return
        if self._items:
            self._send()

    # -- statements ---------------------------------------------------------------------------
    def execute(self, sql: str | PreparedStatement, params: Params = ()) -> Pending:
        """A command; its Pending gives the row count (-1 if its tag has none)."""
        return self._add(sql, params, _rowcount)

    def query(self, sql: str | PreparedStatement, params: Params = ()) -> Pending:
        """A statement; its Pending gives the Result."""
        return self._add(sql, params, _same)

    def fetchone(self, sql: str | PreparedStatement, params: Params = ()) -> Pending:
        """A statement; its Pending gives the first row, or None."""
        return self._add(sql, params, first_row)

    def fetchval(self, sql: str | PreparedStatement, params: Params = ()) -> Pending:
        """A statement; its Pending gives the first column of the first row, or None."""
        return self._add(sql, params, first_value)

    def _add(self, statement: str | PreparedStatement, params: Params,
             shape: Callable[[Result], Any]) -> Pending:
        if self._state != "open":
            raise InterfaceError("the atomic unit is not open: add statements inside its block")
        self._items.append(self._client.unit_item(statement, params, unit_refusal))
        pending = Pending(shape)
        self._pending.append(pending)
        return pending

    # -- sending ------------------------------------------------------------------------------
    def _send(self) -> None:
        attempt = 0
        while True:
            try:
                answers = self._client.run_unit(self._items, self._leading, self._timeout,
                                                writes=not self._read_only)
            except DatabaseError as exc:
                if exc.sqlstate in RETRIED_SQLSTATES and attempt < self._retries:
                    attempt += 1
                    delay = min(BACKOFF * 2 ** (attempt - 1), BACKOFF_MAX)
                    gevent.sleep(delay * random.uniform(0.5, 1.5))
                    continue
                self._settle(None, exc)
                raise
            except BaseException as exc:
                self._settle(None, exc)
                raise
            for pending, result in zip(self._pending, answers, strict=True):
                pending._settle(result, None)
            return

    def _settle(self, result: Result | None, error: BaseException | None) -> None:
        for pending in self._pending:
            pending._settle(result, error)

    def __repr__(self) -> str:
        return f"<pgmux.AtomicUnit {self._state} statements={len(self._items)}>"


def _rowcount(result: Result) -> int:
    return result.rowcount


def _same(result: Result) -> Result:
    return result
