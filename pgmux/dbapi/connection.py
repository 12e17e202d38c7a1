"""DB-API connections: cheap handles on one shared ``Client`` per process and (dsn, options).

Theory of operation
-------------------
A ``Connection`` owns no server connection of its own. Each statement goes either down
the client's multiplexed path or to a *lease* (``pgmux.dbapi.lease.Lease``): a pinned
connection the handle keeps from one call to the next.

* autocommit off (the default): a transaction opens at the first statement. At READ
  COMMITTED (``deferred_pinning``, on by default) it starts unpinned: its plain reads
  (``pgmux.sql.reads``, ``pgmux.dbapi.deferral``) go multiplexed, since each statement
  takes its own snapshot anyway; the first statement that needs the transaction (a write,
  a lock, a volatile function, the transaction's clock, state ...) takes a lease with a
  BEGIN written in front of it, and every later statement runs there. An error of an
  unpinned read fails the transaction as the server would (25P02 until ``rollback()``);
  ``commit()``/``rollback()`` of a transaction that never pinned send nothing, and COMMIT
  or ROLLBACK (END, ABORT) run as SQL end the transaction as they do. Stricter
  isolation, READ ONLY DEFERRABLE and two-phase transactions pin at their first
  statement. ``commit()``/``rollback()`` end a pinned transaction and give the lease
  back, so a few pinned connections serve many DB-API connections.
* autocommit on: statements are multiplexed. One the guard refuses that is not
  session-scoped (SHOW, DDL, EXPLAIN, a script, the user's own BEGIN ...) runs on a
  lease taken for it and given back right after (kept while a transaction it opened
  lasts). ``executemany`` sends all its parameter sets as one atomic unit: one Sync on
  a pipelined connection, one implicit transaction, all or nothing.
* session-scoped SQL (``session_scope``: SET, temporary tables, LISTEN, PREPARE,
  session advisory locks ...) in either mode makes the lease *sticky*: the handle keeps
  it until ``close()``, so the state survives transactions as on a real connection and
  never reaches another caller (the pool resets it with DISCARD ALL on close).

A lease is given back whenever the handle holds one it no longer needs (not sticky, no
transaction, no open server-side cursor: ``pgmux.dbapi.server_cursor``). If a sticky lease's server connection breaks,
its state is gone: the handle is then unusable (``broken``), like a psycopg2 connection
whose server went away. ``rollback()`` and ``close()`` work from any greenlet, the hub
included (SQLAlchemy's pool may reset a connection from a garbage-collection callback,
gevent #1384): without a lease they do nothing and never switch; from the hub with a
lease they hand the work to a new greenlet, and the next call on the handle waits for it.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import gevent
from gevent.hub import get_hub, getcurrent

from pgmux import errors
from pgmux.client import Client
from pgmux.dbapi.cursor import Cursor
from pgmux.dbapi.deferral import Deferral, deferral_for
from pgmux.dbapi.handles import HandleAccess
from pgmux.dbapi.info import ConnectionInfo, TransactionStatus
from pgmux.dbapi.lease import Lease, take_turn
from pgmux.dbapi.paramstyle import holds_nul
from pgmux.dbapi.quoting import NUL_MESSAGE
from pgmux.dbapi.server_cursor import (
    Cursors,
    Declared,
    ServerRows,
    check_open,
    declare,
    is_savepoint_rollback,
)
from pgmux.dbapi.server_cursor import close as close_cursor
from pgmux.dbapi.twophase import TwoPhaseCommit
from pgmux.engine.result import Result
from pgmux.errors import (
    DatabaseError,
    DataError,
    InterfaceError,
    NotSupportedError,
    ProgrammingError,
    UnsafeMultiplexError,
)
from pgmux.session import begin_statement, rolled_back_at_commit
from pgmux.sql.facts import ends_transaction
from pgmux.sql.session_scope import session_scope

log = logging.getLogger("pgmux")

T = TypeVar("T")

_shared: tuple[int, dict[Any, Client]] = (os.getpid(), {})
_ENDS = frozenset({"COMMIT", "ROLLBACK"})  # the tags of a transaction's end (and ROLLBACK TO)


def shared_client(dsn: str | None, options: dict[str, Any]) -> Client:
    """The process's ``Client`` for (dsn, options), made on first use (connections open
    lazily). A forked child makes its own: the registry is per process."""
    global _shared
    pid, clients = _shared
    if pid != os.getpid():
        _shared = pid, clients = os.getpid(), {}
    key = (dsn, tuple(sorted(options.items())))
    try:
        client = clients.get(key)
    except TypeError:
        raise InterfaceError("connect() options must be hashable values") from None
    if client is None or client.closed:
        client = clients[key] = Client(dsn, **options)
    return client


def close_shared_clients(dbname: str | None = None) -> None:
    """Close the shared clients of this process (their DB-API handles then fail): all of
    them, or those connecting to database ``dbname`` (before dropping or cloning it)."""
    pid, clients = _shared
    if pid != os.getpid():
        return
    for key, client in list(clients.items()):
        if dbname is None or client.conninfo.dbname == dbname:
            client.close()
            del clients[key]


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


def _in_hub() -> bool:
    return getcurrent() is get_hub()


class Connection(TwoPhaseCommit, HandleAccess):
    """A PEP 249 connection over a shared ``Client`` (see the module's docstring); its
    two-phase commit methods are ``pgmux.dbapi.twophase``'s."""

    Warning = errors.Warning
    Error = errors.Error
    InterfaceError = errors.InterfaceError
    DatabaseError = errors.DatabaseError
    DataError = errors.DataError
    OperationalError = errors.OperationalError
    IntegrityError = errors.IntegrityError
    InternalError = errors.InternalError
    ProgrammingError = errors.ProgrammingError
    NotSupportedError = errors.NotSupportedError

    cursor_factory: type[Cursor] = Cursor  # what cursor() makes

    def __init__(self, client: Client, *, autocommit: bool = False,
                 deferred_pinning: bool = True):
        self.client = client
        self._autocommit = bool(autocommit)
        # READ COMMITTED transactions run their plain reads multiplexed until they must pin
        self.deferred_pinning = bool(deferred_pinning)
        self._deferral: Deferral | None = None  # the client's (pgmux.dbapi.deferral), once used
        self._level_defers: bool | None = None  # the isolation level's verdict, once asked
        self._open_tx = False  # autocommit off: a transaction is open since its first statement
        self._failed: BaseException | None = None  # why the unpinned transaction failed
        self._isolation_level: str | None = None
        self._read_only = False
        self._deferrable = False
        self._lease: Lease | None = None
        self._cursors = Cursors()  # the SQL cursors declared on the lease
        self._sticky: str | None = None  # why the lease is kept until close()
        self._lost: str | None = None  # why the handle is unusable
        self._closed = False
        self._background: gevent.Greenlet | None = None
        self._user: Any = None  # the greenlet running a call on the lease
        # Called with the reason before session-scoped SQL pins this handle; it may raise
        # (Django's backend refuses SET in a connection_created receiver this way).
        self.on_pin: Callable[[str], None] | None = None

    # -- PEP 249 -------------------------------------------------------------------------
    def cursor(self, name: str | None = None, *, withhold: bool | None = None,
               scrollable: bool | None = None) -> Cursor:
        """A cursor; with ``name``, a server-side one (DECLARE) that fetches ``itersize``
        rows at a time. ``withhold``: whether it outlives its transaction (default: only
        outside a transaction, in autocommit mode, where it could not exist otherwise)."""
        self._check_open()
        if scrollable:
            raise NotSupportedError("scrollable server-side cursors are not supported")
        return self.cursor_factory(self, name, withhold=withhold)

    def commit(self) -> None:
        """COMMIT the transaction, if one is open; give the pinned connection back."""
        self._check_no_tpc("commit")
        self._end(True)

    def rollback(self) -> None:
        """ROLLBACK the transaction, if one is open; give the pinned connection back."""
        self._check_no_tpc("rollback")
        self._end(False)

    def close(self) -> None:
        """Roll back what is open and give any pinned connection back (reset)."""
        if self._closed:
            raise InterfaceError("the connection is already closed")
        self._closed = True
        self._open_tx, self._failed = False, None
        lease, self._lease = self._lease, None
        self._cursors.clear()
        if lease is None:
            return
        if _in_hub():
            gevent.spawn(lease.close)
        else:
            lease.close()

    # -- settings ------------------------------------------------------------------------
    @property
    def autocommit(self) -> bool:
        """True: each statement commits on its own, multiplexed where the guard allows."""
        return self._autocommit

    @autocommit.setter
    def autocommit(self, value: bool) -> None:
        if bool(value) != self._autocommit:
            self._check_settable("autocommit")
            self._autocommit = bool(value)

    @property
    def isolation_level(self) -> str | None:
        """The isolation level of the transactions opened from now on (None: the server's)."""
        return self._isolation_level

    @isolation_level.setter
    def isolation_level(self, value: Any) -> None:
        """A name ("serializable") or an enum member (psycopg's IsolationLevel) is kept as
        given; transactions begin with that level."""
        if value != self._isolation_level:  # SQLAlchemy sets it at every checkout
            self._check_settable("isolation_level")
            begin_statement(isolation_name(value), False, False)  # refuses an unknown level
            self._isolation_level = value
            self._level_defers = None

    @property
    def read_only(self) -> bool:
        return self._read_only

    @read_only.setter
    def read_only(self, value: bool) -> None:
        self._check_settable("read_only")
        self._read_only = bool(value)

    @property
    def deferrable(self) -> bool:
        return self._deferrable

    @deferrable.setter
    def deferrable(self, value: bool) -> None:
        self._check_settable("deferrable")
        self._deferrable = bool(value)

    def ping(self) -> None:
        """Check that the server answers where this handle's next statement would go,
        without opening a transaction (a simple query: no prepared statement)."""
        self._peek("SELECT 1")

    def server_isolation_level(self) -> str:
        """The isolation level a transaction gets by default (e.g. "read committed")."""
        level: str = self._peek("SELECT current_setting('transaction_isolation')").rows[0][0]
        return level

    @property
    def info(self) -> ConnectionInfo:
        """Server version, parameter status, backend pid, transaction status (psycopg's
        ``connection.info``; see ``pgmux.dbapi.info``)."""
        return ConnectionInfo(self.client, lambda: self._lease, self._first_value,
                              self._transaction_status)

    def _transaction_status(self) -> TransactionStatus:
        """What psycopg's ``info.transaction_status`` would say: a transaction that has not
        pinned yet is open (INTRANS) from its first statement, failed (INERROR) after an
        error, until it ends."""
        if self._failed is not None:
            return TransactionStatus.INERROR
        return TransactionStatus.INTRANS if self._open_tx else TransactionStatus.IDLE

    def _first_value(self, sql: str, params: tuple[Any, ...], pinned: bool) -> Any:
        if pinned:
            return self._on_lease(lambda lease: lease.fetchval(sql, params), begin=False)
        return self._peek(sql, params).rows[0][0]

    # -- state ---------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def broken(self) -> bool:
        """The server connection holding this handle's session state was lost."""
        return self._lost is not None

    @property
    def pinned(self) -> str | None:
        """Why this handle keeps its own server connection until close(), or None."""
        return self._sticky

    @property
    def in_transaction(self) -> bool:
        lease = self._lease
        return self._open_tx or (lease is not None and lease.in_transaction)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if not self._closed:
            self.close()

    def __del__(self) -> None:
        lease = self.__dict__.get("_lease")
        if lease is not None and not lease.closed:
            try:
                gevent.spawn(lease.close)  # a dropped handle gives its connection back
            except Exception:
                pass

    def __repr__(self) -> str:
        if self._closed:
            state = "closed"
        elif self._lost:
            state = "broken"
        elif self._lease is not None:
            state = "pinned" if self._sticky else "in transaction"
        elif self._open_tx:
            state = "in transaction (not pinned)"
        else:
            state = "idle"
        mode = " autocommit" if self._autocommit else ""
        return f"<pgmux.dbapi.Connection {self.client.conninfo.describe()} {state}{mode}>"

    # -- running statements (the cursor's calls; not PEP 249) -----------------------------
    def run_statement(self, sql: str, values: Sequence[Any] | None) -> Result:
        """Run one statement where it belongs (see the module's docstring)."""
        params = values or ()
        if self._cursors and is_savepoint_rollback(sql):
            self._cursors.savepoint_rolled_back()
        try:
            multiplexed = self._multiplexable(sql)
            if self._lease is None:
                if multiplexed or self._defers(sql):
                    try:
                        return self._unpinned(sql, params, multiplexed)
                    except UnsafeMultiplexError:
                        pass  # refused before anything was sent: run it pinned
                elif self._open_tx and (commit := ends_transaction(sql)) is not None:
                    return self._end_unpinned(commit)  # COMMIT/ROLLBACK text: as commit()
            result = self._on_lease(lambda lease: lease.query(sql, params))
            if result.command in _ENDS and self._open_tx:  # the user's COMMIT/ROLLBACK?
                self._check_ended(result.command == "COMMIT")
            return result
        except InterfaceError as exc:  # (_nul_is_data_error's rule, inline: every statement)
            if params and holds_nul(params):
                raise DataError(NUL_MESSAGE) from exc
            raise

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
        self._user = take_turn(user)  # a transaction serves one greenlet at a time
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

    # -- COPY (pgmux.dbapi.copy) ----------------------------------------------------------------
    def run_copy_in(self, sql: str, chunks: Any) -> int:
        """COPY ... FROM STDIN with ``chunks`` (bytes); the rows copied."""
        self._multiplexable(sql)
        return self._on_lease(lambda lease: lease.copy_in(sql, chunks))

    def start_copy_out(self, sql: str) -> Iterator[bytes]:
        """Start COPY ... TO STDOUT: the iterator of its chunks (read with copy_out_chunk)."""
        self._multiplexable(sql)
        return self._on_lease(lambda lease: lease.copy_out(sql))

    def copy_out_chunk(self, chunks: Iterator[bytes]) -> bytes | None:
        """The next chunk of a COPY ... TO STDOUT (None at its end)."""
        if self._lease is None:  # the COPY ended with its lease (closed, or its transaction)
            return next(chunks, None)
        return self._on_lease(lambda lease: next(chunks, None), begin=False)

    # -- server-side cursors (pgmux.dbapi.server_cursor) --------------------------------------
    def open_cursor(self, name: str, sql: str, withhold: bool | None,
                    batch: int) -> ServerRows:
        """DECLARE cursor ``name`` for ``sql`` (parameters in it as literals) and fetch
        its first ``batch`` rows."""
        self._multiplexable(sql)  # notes session-scoped SQL in the query itself
        hold = self._autocommit if withhold is None else bool(withhold)
        declared, first = self._on_lease(
            lambda lease: declare(lease, self._cursors, name, sql, hold, batch))
        return ServerRows(declared, first, batch, self._fetch, self._cursor_done)

    def _fetch(self, declared: Declared, count: int) -> Result:
        check_open(self._cursors, declared)
        return self._on_lease(lambda lease: lease.command(declared.fetch_sql(count)),
                              begin=False)

    def _cursor_done(self, declared: Declared, closing: bool) -> None:
        """Read to the end (or ``closing``): let the lease go if nothing else needs it (its
        reset closes the cursor); on a lease that stays, CLOSE it now outside a transaction,
        inside one when its cursor closes (or at the transaction's end)."""
        declared.wanted = False
        lease = self._lease
        if lease is None or self._closed or not self._cursors.exists(declared):
            return
        if not lease.in_transaction and not self._keeps_lease(lease):
            self._settle()
        elif closing or not lease.in_transaction:  # a lease kept: nothing resets it
            self._on_lease(lambda lease: close_cursor(lease, self._cursors, declared),
                           begin=False)

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

    # -- ending transactions ----------------------------------------------------------------
    def _end(self, commit: bool) -> None:
        if self._closed:
            raise InterfaceError("the connection is closed")
        if self._lease is None and self._background is None:
            failed = self._drop_unpinned()
            if commit and failed is not None:  # as the server answers COMMIT of a failed one
                raise rolled_back_at_commit() from failed
            return  # nothing was pinned: no I/O, no switch (safe from the hub)
        if _in_hub():
            self._background = gevent.spawn(self._end_in_background, commit)
            return
        self._wait_for_background()
        try:
            if self._lease is not None:
                self._on_lease(lambda lease: self._end_on(lease, commit), begin=False)
        finally:
            self._open_tx, self._failed = False, None

    def _forget_transaction(self) -> None:
        """The transaction ended on the server without commit()/rollback() (PREPARE
        TRANSACTION took it)."""
        self._open_tx, self._failed = False, None

    def _end_on(self, lease: Lease, commit: bool) -> None:
        """End the transaction; close the held cursors it leaves that nobody reads."""
        committed = False
        try:  # (given back after it unless cursors or state keep it: reset in the same write;
            # behind a transaction pooler there is no reset)
            lease.end(commit, not self._cursors and self._sticky is None)
            committed = commit
        finally:
            unwanted = self._cursors.transaction_ended(committed)
        if unwanted and self._keeps_lease(lease):
            self._close_unwanted(lease, unwanted)

    def _close_unwanted(self, lease: Lease, unwanted: list[Declared]) -> None:
        """Close the held cursors a transaction's end left that nobody reads (the lease
        stays, so no reset closes them)."""
        for declared in unwanted:
            close_cursor(lease, self._cursors, declared)

    def _end_in_background(self, commit: bool) -> None:
        try:
            self._end(commit)
        except Exception as exc:  # nobody waits for this outcome: log it, drop the lease
            log.warning("pgmux.dbapi: %s from the hub failed: %s",
                        "commit" if commit else "rollback", exc)
            lease, self._lease = self._lease, None
            if lease is not None:
                lease.close()
        finally:
            self._background = None

    def _wait_for_background(self) -> None:
        background = self._background
        if background is not None and background is not getcurrent():
            background.join()

    # -- checks ------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise InterfaceError("the connection is closed")

    def _check_usable(self) -> None:
        self._check_open()
        if self._lost is not None:
            raise errors.OperationalError(self._lost)
        self._wait_for_background()

    def _check_settable(self, what: str) -> None:
        self._check_open()
        if self.in_transaction or self._tpc_xid is not None:
            raise ProgrammingError(f"cannot change {what} inside a transaction; "
                                   "commit() or rollback() first")


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
