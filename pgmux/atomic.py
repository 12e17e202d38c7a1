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

``Atomic`` is the client's side of it (a base of ``Client``): ``atomic()``, the vetting of a
unit's statements and ``run_unit``, the one entry that sends a unit.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import gevent

from pgmux._native import adopt
from pgmux.engine import Engine
from pgmux.engine.result import Result
from pgmux.engine.units import UnitItem
from pgmux.errors import DatabaseError, InterfaceError, UnsafeMultiplexError
from pgmux.multiplexed import Multiplexed, PreparedStatement, hub_of_this_thread
from pgmux.pending import Pending, StatementBlock
from pgmux.pool import dispatch
from pgmux.sql.facts import check_parameter_count
from pgmux.sql.units import VERDICTS, unit_refusal
from pgmux.telemetry import PIPELINED, Observer
from pgmux.telemetry import Operation as Observed
from pgmux.telemetry.multiplexed import observe
from pgmux.telemetry.names import REPLAYS
from pgmux.transaction_control import isolation_keywords

__all__ = ["Atomic", "AtomicUnit", "Pending"]

RETRIED_SQLSTATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock
BACKOFF = 0.002  # seconds: the first pause before a retry (doubling, jittered)
BACKOFF_MAX = 0.1
Params = Sequence[Any]
UNJUDGED = object()  # (VERDICTS has no verdict on the text yet)


def _unit_item(self: Atomic, statement: str | PreparedStatement, params: Params) -> UnitItem:
    """(``Atomic.unit_item``, for ``AtomicUnit``) ``statement`` vetted as the multiplexed
    path vets it, and by ``unit_refusal`` (what a unit may not hold: its verdicts on a text
    seen before are looked up here); encoded, ready for ``Engine.unit``. A module function,
    so that the compiled twin types its locals (``atomic.pxd``)."""
    if hub_of_this_thread() is not self._hub:
        self._in_own_thread()  # raises
    pool = self._pipelines.current
    if pool is None:
        pool = self._pipelines.get()
    standard = pool.standard_conforming_strings
    if not isinstance(statement, str) and isinstance(statement, PreparedStatement):
        sql = statement.sql
        reason = unit_refusal(sql, standard)  # whatever the guard let prepare() through
        if reason is not None:
            raise UnsafeMultiplexError(reason)
        return UnitItem(sql, statement.param_oids, (), [], statement.name, tuple(params))
    verdicts = VERDICTS
    verdict: object = verdicts.get(statement, UNJUDGED) if standard else UNJUDGED
    if verdict is UNJUDGED:
        verdict = unit_refusal(statement, standard)
    if verdict is not None:
        raise UnsafeMultiplexError(str(verdict))
    vetted = self._vetted
    allowed = vetted.get(statement)
    if allowed is None or not standard:
        allowed = self._vet(statement, standard)
    if len(params) > allowed:
        check_parameter_count(statement, len(params))  # raises, saying why
    oids, formats, values = self._encode(params)
    return UnitItem(statement, oids, formats, values)


def _run_unit(self: Atomic, items: list[UnitItem], leading: list[str], timeout: float | None,
              writes: bool = True, build: dispatch.Build = Engine.unit) -> list[Result]:
    """(``Atomic.run_unit``, for ``AtomicUnit``) send one unit; each statement's Result, or
    the unit's error (its ``statement_index`` says which statement failed). With telemetry
    on: part of the block's operation (``AtomicUnit``), ``build`` traced. A module function,
    so that the compiled twin types its locals (``atomic.pxd``) and calls ``dispatch.run``
    in C."""
    observer = self._observer
    if observer is not None and build is Engine.unit:
        return self._run_unit_observed(observer, items, leading, timeout, writes)
    pool = self._pipelines.current
    if pool is None:
        pool = self._pipelines.get()
    statements = len(items) + len(leading)
    if self._reads is None:
        exchange = dispatch.run(pool, build, (items, leading), timeout, False, statements)
    else:
        exchange = self._send(pool, build, (items, leading), timeout, statements=statements)
    error = exchange.reply.error
    if error is not None:
        if isinstance(error, DatabaseError):
            error.statement_index = exchange.failed_at  # type: ignore[attr-defined]
        raise error
    if writes and self._fence is not None:
        self._after_write_block()
    return [reply.result() for reply in exchange.answers()]


def _settle_each(pending: list[Pending], answers: list[Result]) -> None:
    """Each statement's Pending settled with its result (a unit answers every one)."""
    if len(pending) != len(answers):
        raise InterfaceError(f"{len(answers)} results for {len(pending)} statements")
    for index in range(len(answers)):
        one = pending[index]
        one.settle(answers[index], None)


class AtomicUnit(StatementBlock[UnitItem]):
    """The block of ``Client.atomic()``: statements collected, sent as one unit at its end."""

    WHAT = "the atomic unit"

    def __init__(self, client: Atomic, isolation: str | None, read_only: bool, retries: int,
                 timeout: float | None):
        if retries < 0:
            raise InterfaceError("retries must not be negative")
        StatementBlock.__init__(self)
        self._leading = []
        if isolation is not None or read_only:
            modes = isolation_keywords(isolation, read_only, False)
            self._leading = [f"SET TRANSACTION {modes}"] if modes else []
        self._read_only = read_only
        self._client = client
        self._retries = retries
        self._timeout = timeout

    def __enter__(self) -> AtomicUnit:
        super().__enter__()
        return self

    def _item(self, statement: str | PreparedStatement, params: Params) -> UnitItem:
        return _unit_item(self._client, statement, params)

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
            _settle_each(self._pending, answers)
            return answers


class Atomic(Multiplexed):
    """The atomic units of a ``Client``: ``atomic()`` and what its block calls."""

    def atomic(self, isolation: str | None = None, read_only: bool = False, retries: int = 0,
               timeout: float | None = None) -> AtomicUnit:
        """Several statements sent together on the multiplexed path, all or nothing, at the
        cost of one query (see ``pgmux.atomic``): ``with db.atomic() as unit: ...``."""
        if hub_of_this_thread() is not self._hub:
            self._in_own_thread()  # raises
        if self._closed:
            raise InterfaceError("the client is closed")
        return AtomicUnit(self, isolation, read_only, retries, timeout)

    unit_item = _unit_item
    run_unit = _run_unit

    def _run_unit_observed(self, observer: Observer, items: list[UnitItem],
                           leading: list[str], timeout: float | None,
                           writes: bool) -> list[Result]:
        """``run_unit`` traced (apart: no closure cells in ``run_unit``)."""
        return observe(observer, "", (), Engine.unit, lambda traced: self.run_unit(
            items, leading, timeout, writes=writes, build=traced), self._index_of)


adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
