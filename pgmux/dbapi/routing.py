"""Where a DB-API statement runs: multiplexed, or on the handle's lease (a pinned connection
kept from one call to the next), and when the lease is taken and given back. The rules are
``pgmux.dbapi.connection``'s theory of operation; ``Routing`` is that part of its
``Connection``.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from gevent.hub import getcurrent

from pgmux import errors
from pgmux.client import Client
from pgmux.dbapi import deferral as deferrals
from pgmux.dbapi.deferral import Deferral, deferral_for
from pgmux.dbapi.lease import Lease, take_turn
from pgmux.dbapi.paramstyle import holds_nul
from pgmux.dbapi.quoting import NUL_MESSAGE
from pgmux.dbapi.server_cursor import Cursors, Declared, is_savepoint_rollback
from pgmux.dbapi.twophase import Xid
from pgmux.engine.result import Result
from pgmux.errors import (
    DatabaseError,
    DataError,
    InterfaceError,
    ProgrammingError,
    UnsafeMultiplexError,
)
from pgmux.sql.facts import ends_transaction, remember
from pgmux.sql.session_scope import session_scope

T = TypeVar("T")

_ENDS = frozenset({"COMMIT", "ROLLBACK"})  # the tags of a transaction's end (and ROLLBACK TO)


def isolation_name(level: Any) -> str | None:
    """An isolation level as BEGIN takes it: a name ("serializable", "REPEATABLE_READ"), or
    an enum member by its name (psycopg's ``IsolationLevel.SERIALIZABLE``); None: the
    server's default."""
    if level is None or isinstance(level, str):
        return level
    if isinstance(level, enum.Enum):
        return level.name
    raise ProgrammingError(f"an isolation level is a name such as 'serializable' (or an "
                           f"IsolationLevel member), not {level!r}")



class Routing:
    """The statements of a ``pgmux.dbapi.Connection``: each run where it belongs, and the
    lease taken and given back around it."""

    # The handle's state (``Connection.__init__``), as routing reads and keeps it.
    client: Client
    deferred_pinning: bool
    on_pin: Callable[[str], None] | None
    _autocommit: bool
    _deferral: Deferral | None
    _level_defers: bool | None
    _open_tx: bool
    _failed: BaseException | None
    _isolation_level: str | None
    _read_only: bool
    _deferrable: bool
    _lease: Lease | None
    _cursors: Cursors
    _sticky: str | None
    _lost: str | None
    _user: Any
    _closed: bool
    _background: Any
    _tpc_prepared: bool

    if TYPE_CHECKING:  # what pgmux.dbapi.connection.Connection (and its TwoPhaseCommit) provide
        _tpc_xid: Xid | None

        def _check_usable(self) -> None: ...
        def _check_not_prepared(self) -> None: ...
        def _close_unwanted(self, lease: Lease, unwanted: list[Declared]) -> None: ...

    def run_statement(self, sql: str, values: Sequence[Any] | None) -> Result:
        """Run one statement where it belongs (see the module's docstring)."""
        params = values or ()
        try:
            # The usual statements of a handle that holds nothing, _route's decisions
            # inline: in autocommit mode, multiplexed; in an unpinned transaction, a text
            # known as a plain read (Deferral.needs_transaction's hit), multiplexed too.
            if (self._lease is None and self._sticky is None and self._failed is None
                    and self._lost is None and self._background is None
                    and not self._closed and not self._tpc_prepared
                    and (sql in _unscoped or _unscoped_text(sql))
                    and self.client.pipeline_size > 0):
                if self._autocommit:
                    try:
                        return self.client.query(sql, params)
                    except UnsafeMultiplexError:  # refused before anything was sent
                        return self._pinned(sql, params)
                deferral = self._deferral
                if (deferral is not None and self._level_defers and self.deferred_pinning
                        and self._tpc_xid is None and not (self._read_only and self._deferrable)):
                    until = deferral.plain.get(sql)
                    if until is not None and until > deferrals.monotonic():  # (its clock)
                        self._open_tx = True
                        user = self._user  # (_unpinned, inline)
                        current = getcurrent()
                        if user is not None and user is not current:
                            take_turn(user)  # one greenlet at a time: raises
                        self._user = current
                        try:
                            return self.client.query(sql, params)
                        except UnsafeMultiplexError:  # refused before anything was sent
                            pass
                        except DatabaseError as exc:
                            self._failed = exc
                            raise
                        finally:
                            self._user = user
                        return self._pinned(sql, params)
            return self._route(sql, params)
        except InterfaceError as exc:  # (_nul_is_data_error's rule, inline: every statement)
            if params and holds_nul(params):
                raise DataError(NUL_MESSAGE) from exc
            raise

    def _route(self, sql: str, params: Sequence[Any]) -> Result:
        """``run_statement`` for any statement on any handle."""
        if self._cursors and is_savepoint_rollback(sql):
            self._cursors.savepoint_rolled_back()
        multiplexed = self._multiplexable(sql)
        if self._lease is None:
            if multiplexed or self._defers(sql):
                try:
                    return self._unpinned(sql, params, multiplexed)
                except UnsafeMultiplexError:
                    pass  # refused before anything was sent: run it pinned
            elif self._open_tx and (commit := ends_transaction(sql)) is not None:
                return self._end_unpinned(commit)  # COMMIT/ROLLBACK text: as commit()
        return self._on_statement_lease(sql, params)

    def _pinned(self, sql: str, params: Sequence[Any]) -> Result:
        """An autocommit statement the guard refused multiplexed: on a lease."""
        if self._cursors and is_savepoint_rollback(sql):
            self._cursors.savepoint_rolled_back()
        return self._on_statement_lease(sql, params)

    def _on_statement_lease(self, sql: str, params: Sequence[Any]) -> Result:
        result = self._on_lease(lambda lease: lease.query(sql, params))
        if result.command in _ENDS and self._open_tx:  # the user's COMMIT/ROLLBACK?
            self._check_ended(result.command == "COMMIT")
        return result

    def _end_unpinned(self, commit: bool) -> Result:
        """The user's COMMIT or ROLLBACK (END, ABORT) of a transaction that never pinned:
        nothing to send; the server's tag (ROLLBACK for the COMMIT of a failed one)."""
        failed = self._drop_unpinned()
        return Result([], (), "COMMIT" if commit and failed is None else "ROLLBACK")

    def _drop_unpinned(self) -> BaseException | None:
        """End a transaction that never pinned (nothing to send): why it failed, if it did."""
        failed, self._failed, self._open_tx = self._failed, None, False
        return failed

    def _check_ended(self, committed: bool) -> None:
        """After a statement tagged COMMIT or ROLLBACK on the lease: if the transaction is
        over (not ROLLBACK TO, not AND CHAIN), end it here too, as commit()/rollback() do."""
        lease = self._lease
        if lease is not None and lease.in_transaction:
            return
        self._open_tx, self._failed = False, None
        unwanted = self._cursors.transaction_ended(committed)
        if lease is not None and unwanted and self._keeps_lease(lease):
            self._on_lease(lambda lease: self._close_unwanted(lease, unwanted), begin=False)
        self._settle()

    def _unpinned(self, sql: str, params: Sequence[Any], autocommit: bool) -> Result:
        """Run ``sql`` multiplexed: in autocommit mode, or as a plain read of an unpinned
        transaction, whose error fails the transaction (as the server's would)."""
        if autocommit:
            return self.client.query(sql, params)
        user = self._user
        current = getcurrent()
        if user is not None and user is not current:
            take_turn(user)  # a transaction serves one greenlet at a time: raises
        self._user = current
        try:
            return self.client.query(sql, params)
        except UnsafeMultiplexError:
            raise
        except DatabaseError as exc:
            self._failed = exc
            raise
        finally:
            self._user = user

    def _defers(self, sql: str) -> bool:
        """Whether ``sql`` may run before this handle's transaction pins: a plain read of a
        transaction with a snapshot per statement (see the module's docstring)."""
        if (not self.deferred_pinning or self._autocommit or self._sticky is not None
                or self._tpc_xid is not None or not self.client.pipeline_size
                or (self._read_only and self._deferrable)):
            return False
        deferral = self._deferral
        if deferral is None:
            deferral = self._deferral = deferral_for(self.client)
        level = self._level_defers
        if level is None:
            level = self._level_defers = deferral.level_defers(
                self.client, isolation_name(self._isolation_level))
        return level and deferral.needs_transaction(self.client, sql) is None

    def run_batch(self, sql: str, seq_values: list[Sequence[Any]]) -> int:
        """Every parameter set at once, all or nothing; the rows changed. Where a statement
        may go multiplexed, one atomic unit on the pipeline; else one explicit pipeline on
        the lease (in its transaction, or one implicit transaction in autocommit mode)."""
        def run(lease: Lease) -> int:
            with lease.pipeline() as pipeline:
                ops = [pipeline.execute(sql, values) for values in seq_values]
            return _total([op.result() for op in ops])  # the first failure raises its own

        with _nul_is_data_error([values for values in seq_values]):
            if self._multiplexable(sql) and self._lease is None:
                try:
                    return self._run_unit(sql, seq_values)
                except UnsafeMultiplexError:
                    pass  # refused before anything was sent: run it pinned
            return self._on_lease(run)

    def _run_unit(self, sql: str, seq_values: list[Sequence[Any]]) -> int:
        with self.client.atomic() as unit:
            ops = [unit.execute(sql, values) for values in seq_values]
        return _total([op.result() for op in ops])

    def _peek(self, sql: str, params: tuple[Any, ...] = ()) -> Result:
        """Run a read-only statement here without BEGIN: on the lease if one is held."""
        self._check_usable()
        if self._lease is None and self._sticky is None and self.client.pipeline_size:
            return self.client.query(sql, params)
        return self._on_lease(lambda lease: lease.query(sql, params), begin=False)

    def _multiplexable(self, sql: str) -> bool:
        """Whether ``sql`` may go multiplexed in autocommit mode; notes session-scoped SQL
        (the lease sticks) and, autocommit off, that a transaction is open."""
        self._check_usable()
        self._check_not_prepared()
        if self._failed is not None and ends_transaction(sql) is None:
            raise _in_failed_transaction(self._failed)
        if self._sticky is None:
            scope = session_scope(sql)
            if scope is not None:
                if self.on_pin is not None:
                    self.on_pin(scope)
                self._sticky = scope
        if not self._autocommit:
            self._open_tx = True
            return False
        return self._sticky is None and self.client.pipeline_size > 0

    def _on_lease(self, work: Callable[[Lease], T], begin: bool = True) -> T:
        """Run ``work`` on this handle's lease (taken now if needed), then settle it."""
        user = self._user
        self._user = take_turn(user)
        try:
            lease = self._lease
            if lease is None:
                lease = self._lease = Lease(self.client.pinned_session()).open()
            previous = lease.take_turn()
            try:
                if begin and not self._autocommit and not lease.in_transaction:
                    lease.begin(isolation_name(self._isolation_level), self._read_only,
                                self._deferrable)
                return work(lease)
            finally:
                lease.end_turn(previous)
        finally:
            self._user = user
            self._settle()

    def _keeps_lease(self, lease: Lease) -> bool:
        """Whether the lease must stay: session state, or its reset would not close what is
        open on it (behind a transaction pooler nothing is reset)."""
        return self._sticky is not None or self.client.pooler == "transaction"

    def _settle(self) -> None:
        """Give the lease back unless it is needed still; note a lost session's state."""
        lease = self._lease
        if lease is None:
            return
        broken = lease.broken
        if broken is None and (self._sticky or lease.in_transaction or lease.reading
                               or self._cursors):
            return
        self._lease = None
        self._cursors.clear()  # the reset closes them (or the connection is gone)
        if broken is not None and self._sticky is not None:
            self._lost = (f"the server connection holding this connection's session state "
                          f"({self._sticky}) was lost: {broken}")
        elif broken is not None and self._open_tx:  # the server rolled the transaction back
            self._failed = errors.OperationalError(
                f"the server connection of this transaction was lost: {broken}")
        lease.close()


_unscoped: dict[str, None] = {}  # texts session_scope found none in (a dict look-up each)


def _unscoped_text(sql: str) -> bool:
    """Whether ``sql`` leaves no session state (``session_scope``), remembered if so."""
    if session_scope(sql) is not None:
        return False
    remember(_unscoped, sql, None)
    return True


def _in_failed_transaction(cause: BaseException) -> DatabaseError:
    """What the server says to a statement after an error in its transaction (25P02)."""
    error = DatabaseError.from_fields({
        "S": "ERROR", "C": "25P02",
        "M": "current transaction is aborted, commands ignored until end of transaction block"})
    error.__cause__ = cause
    return error


def _total(counts: list[int]) -> int:
    """The rows an executemany changed: the sum of its counts, -1 if any is unknown."""
    return -1 if -1 in counts else sum(counts)


@contextlib.contextmanager
def _nul_is_data_error(values: Sequence[Any]) -> Iterator[None]:
    """A text parameter holding NUL, refused before it is sent, is a DataError (PEP 249's
    class for bad data, psycopg's too), not a misuse of the API."""
    try:
        yield
    except InterfaceError as exc:
        if values and holds_nul(values):
            raise DataError(NUL_MESSAGE) from exc
        raise
