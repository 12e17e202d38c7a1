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

import logging
from collections.abc import Callable, Iterator
from typing import Any

import gevent
from gevent.hub import get_hub, getcurrent

from pgmux import errors
from pgmux.client import Client
from pgmux.dbapi.cursor import Cursor
from pgmux.dbapi.deferral import Deferral
from pgmux.dbapi.handles import HandleAccess
from pgmux.dbapi.info import ConnectionInfo, TransactionStatus
from pgmux.dbapi.lease import Lease
from pgmux.dbapi.routing import Routing, isolation_name
from pgmux.dbapi.server_cursor import Cursors, Declared, ServerRows, check_open, declare
from pgmux.dbapi.server_cursor import close as close_cursor
from pgmux.dbapi.shared import close_shared_clients, shared_client
from pgmux.dbapi.twophase import TwoPhaseCommit
from pgmux.engine.result import Result
from pgmux.errors import InterfaceError, NotSupportedError, ProgrammingError
from pgmux.transaction_control import begin_statement, rolled_back_at_commit

__all__ = ["Connection", "close_shared_clients", "isolation_name", "shared_client"]

log = logging.getLogger("pgmux")


def _in_hub() -> bool:
    return getcurrent() is get_hub()


class Connection(Routing, TwoPhaseCommit, HandleAccess):
    """A PEP 249 connection over a shared ``Client`` (see the module's docstring); where its
    statements run is ``pgmux.dbapi.routing``'s, its two-phase commit methods are
    ``pgmux.dbapi.twophase``'s, what adapters may ask of its pinned connection is
    ``pgmux.dbapi.handles``'."""

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
        self._tpc_xid = None  # (TwoPhaseCommit's, on the instance: read at every statement)
        self._tpc_prepared = False
        # Called with the reason before session-scoped SQL pins this handle; it may raise
        # (Django's backend refuses SET in a connection_created receiver this way).
        self.on_pin: Callable[[str], None] | None = None

    # -- PEP 249 -------------------------------------------------------------------------
    def cursor(self, name: str | None = None, *, withhold: bool | None = None,
               scrollable: bool | None = None) -> Cursor:
        """A cursor; with ``name``, a server-side one (DECLARE) that fetches ``itersize``
        rows at a time. ``withhold``: whether it outlives its transaction (default: only
        outside a transaction, in autocommit mode, where it could not exist otherwise)."""
        if self._closed:
            self._check_open()
        if scrollable:
            raise NotSupportedError("scrollable server-side cursors are not supported")
        return self.cursor_factory(self, name, withhold=withhold)

    def commit(self) -> None:
        """COMMIT the transaction, if one is open; give the pinned connection back."""
        if (self._lease is None and self._failed is None and self._background is None
                and self._tpc_xid is None and not self._closed):
            self._open_tx = False  # nothing was pinned (_end's case, inline): nothing to send
            return
        self._check_no_tpc("commit")
        self._end(True)

    def rollback(self) -> None:
        """ROLLBACK the transaction, if one is open; give the pinned connection back."""
        if (self._lease is None and self._background is None and self._tpc_xid is None
                and not self._closed):
            self._open_tx, self._failed = False, None  # (_end's case, inline): nothing to send
            return
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
        """True: the transactions opened from now on are READ ONLY (False by default)."""
        return self._read_only

    @read_only.setter
    def read_only(self, value: bool) -> None:
        self._check_settable("read_only")
        self._read_only = bool(value)

    @property
    def deferrable(self) -> bool:
        """True: the transactions opened from now on are DEFERRABLE (which the server heeds
        only for serializable, read-only ones)."""
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
        """True once ``close()`` was called on this handle."""
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
        """True while a transaction is open on this handle (begun by its first statement,
        and not yet committed or rolled back), whether or not it pinned a connection yet."""
        lease = self._lease
        return self._open_tx or (lease is not None and lease.in_transaction)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        """Commit what the block did (roll it back if the block raised), then close: as
        psycopg 3 does. Closing alone would roll back, and a block's writes be lost."""
        if self._closed:
            return
        try:
            if exc_type is None:
                self.commit()
            else:
                self.rollback()
        finally:
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
        if self._closed:
            self._check_open()
        if self._lost is not None:
            raise errors.OperationalError(self._lost)
        if self._background is not None:
            self._wait_for_background()

    def _check_settable(self, what: str) -> None:
        self._check_open()
        if self.in_transaction or self._tpc_xid is not None:
            raise ProgrammingError(f"cannot change {what} inside a transaction; "
                                   "commit() or rollback() first")
