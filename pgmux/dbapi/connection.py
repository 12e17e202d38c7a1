"""DB-API connections: cheap handles on one shared ``Client`` per process and (dsn, options).

Theory of operation
-------------------
A ``Connection`` owns no server connection of its own. Each statement goes either down
the client's multiplexed path or to a *lease* (``pgmux.dbapi.lease.Lease``): a pinned
connection the handle keeps from one call to the next.

* autocommit off (the default): the first statement takes a lease and a BEGIN is
  written with it; ``commit()``/``rollback()`` end the transaction and give the lease
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
transaction, no open server-side cursor). If a sticky lease's server connection breaks,
its state is gone: the handle is then unusable (``broken``), like a psycopg2 connection
whose server went away. ``rollback()`` and ``close()`` work from any greenlet, the hub
included (SQLAlchemy's pool may reset a connection from a garbage-collection callback,
gevent #1384): without a lease they do nothing and never switch; from the hub with a
lease they hand the work to a new greenlet, and the next call on the handle waits for it.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import gevent
from gevent.hub import get_hub, getcurrent

from pgmux import errors
from pgmux.client import Client
from pgmux.dbapi.cursor import Cursor
from pgmux.dbapi.lease import Lease, take_turn
from pgmux.dbapi.session_scope import session_scope
from pgmux.engine.result import Result
from pgmux.errors import InterfaceError, ProgrammingError, UnsafeMultiplexError
from pgmux.session import begin_statement

log = logging.getLogger("pgmux")

T = TypeVar("T")

_shared: tuple[int, dict[Any, Client]] = (os.getpid(), {})


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


def close_shared_clients() -> None:
    """Close every shared client of this process (their DB-API handles then fail)."""
    pid, clients = _shared
    if pid == os.getpid():
        for client in list(clients.values()):
            client.close()
        clients.clear()


def _in_hub() -> bool:
    return getcurrent() is get_hub()


class Connection:
    """A PEP 249 connection over a shared ``Client`` (see the module's docstring)."""

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

    def __init__(self, client: Client, *, autocommit: bool = False):
        self.client = client
        self._autocommit = bool(autocommit)
        self._isolation_level: str | None = None
        self._read_only = False
        self._deferrable = False
        self._lease: Lease | None = None
        self._sticky: str | None = None  # why the lease is kept until close()
        self._lost: str | None = None  # why the handle is unusable
        self._closed = False
        self._background: gevent.Greenlet | None = None
        self._user: Any = None  # the greenlet running a call on the lease

    # -- PEP 249 -------------------------------------------------------------------------
    def cursor(self, name: str | None = None) -> Cursor:
        """A cursor; with ``name``, a server-side one that streams its rows."""
        self._check_open()
        return Cursor(self, name)

    def commit(self) -> None:
        """COMMIT the transaction, if one is open; give the pinned connection back."""
        self._end(True)

    def rollback(self) -> None:
        """ROLLBACK the transaction, if one is open; give the pinned connection back."""
        self._end(False)

    def close(self) -> None:
        """Roll back what is open and give any pinned connection back (reset)."""
        if self._closed:
            raise InterfaceError("the connection is already closed")
        self._closed = True
        lease, self._lease = self._lease, None
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
    def isolation_level(self, value: str | None) -> None:
        if value != self._isolation_level:  # SQLAlchemy sets it at every checkout
            self._check_settable("isolation_level")
            begin_statement(value, False, False)  # refuses an unknown level now
            self._isolation_level = value

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
        return lease is not None and lease.in_transaction

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
        else:
            state = "idle"
        mode = " autocommit" if self._autocommit else ""
        return f"<pgmux.dbapi.Connection {self.client.conninfo.describe()} {state}{mode}>"

    # -- running statements (the cursor's calls; not PEP 249) -----------------------------
    def run_statement(self, sql: str, values: Sequence[Any] | None) -> Result:
        """Run one statement where it belongs (see the module's docstring)."""
        params = values or ()
        if self._multiplexable(sql) and self._lease is None:
            try:
                return self.client.query(sql, params)
            except UnsafeMultiplexError:
                pass  # refused before anything was sent: run it pinned
        return self._on_lease(lambda lease: lease.query(sql, params))

    def run_batch(self, sql: str, seq_values: list[Sequence[Any]]) -> int:
        """Every parameter set at once, all or nothing; the rows changed. Where a statement
        may go multiplexed, one atomic unit on the pipeline; else one explicit pipeline on
        the lease (in its transaction, or one implicit transaction in autocommit mode)."""
        if self._multiplexable(sql) and self._lease is None:
            try:
                return self._run_unit(sql, seq_values)
            except UnsafeMultiplexError:
                pass  # refused before anything was sent: run it pinned

        def run(lease: Lease) -> int:
            with lease.pipeline() as pipeline:
                ops = [pipeline.execute(sql, values) for values in seq_values]
            return _total([op.result() for op in ops])  # the first failure raises its own

        return self._on_lease(run)

    def _run_unit(self, sql: str, seq_values: list[Sequence[Any]]) -> int:
        with self.client.atomic() as unit:
            ops = [unit.execute(sql, values) for values in seq_values]
        return _total([op.result() for op in ops])

    def open_stream(self, sql: str, values: Sequence[Any] | None,
                    batch: int) -> tuple[tuple[Any, ...], Iterator[Any]]:
        """A server-side cursor: the rows' fields, and an iterator fetching ``batch`` rows."""
        self._multiplexable(sql)

        def start(lease: Lease) -> tuple[tuple[Any, ...], Iterator[Any]]:
            fields, rows = lease.stream_fields(sql, values or (), batch)
            if not lease.reading:  # all rows came with the first batch: keep them here
                rows = iter(list(rows))
            return fields, rows

        return self._on_lease(start)

    def next_rows(self, rows: Iterator[Any], count: int) -> list[Any]:
        """Up to ``count`` rows of a server-side cursor's iterator (all with count < 0)."""
        def take(lease: Lease | None = None) -> list[Any]:
            return list(rows) if count < 0 else list(itertools.islice(rows, count))

        if self._lease is not None:
            return self._on_lease(take, begin=False)
        try:  # the stream is over (its rows are here), or its transaction ended
            return take()
        except InterfaceError:
            raise InterfaceError("the server-side cursor was closed when its transaction "
                                 "ended") from None

    def close_rows(self, rows: Any) -> None:
        """Close a server-side cursor's iterator before its end (on the lease it reads)."""
        if self._lease is not None and not self._closed:
            self._on_lease(lambda lease: rows.close(), begin=False)

    def _peek(self, sql: str) -> Result:
        """Run a read-only statement here without BEGIN: on the lease if one is held."""
        self._check_usable()
        if self._lease is None and self._sticky is None and self.client.pipeline_size:
            return self.client.query(sql)
        return self._on_lease(lambda lease: lease.query(sql), begin=False)

    def _multiplexable(self, sql: str) -> bool:
        """Whether ``sql`` may go multiplexed; notes session-scoped SQL (the lease sticks)."""
        self._check_usable()
        if self._sticky is None:
            scope = session_scope(sql)
            if scope is not None:
                self._sticky = scope
                return False
        return self._autocommit and self._sticky is None and self.client.pipeline_size > 0

    def _on_lease(self, work: Callable[[Lease], T], begin: bool = True) -> T:
        """Run ``work`` on this handle's lease (taken now if needed), then settle it."""
        user = self._user
        self._user = take_turn(user)
        try:
            lease = self._lease
            if lease is None:
                lease = self._lease = Lease(self.client.session()).open()
            with lease.using():
                if begin and not self._autocommit:
                    lease.begin(self._isolation_level, self._read_only, self._deferrable)
                return work(lease)
        finally:
            self._user = user
            self._settle()

    def _settle(self) -> None:
        """Give the lease back unless it is needed still; note a lost session's state."""
        lease = self._lease
        if lease is None:
            return
        broken = lease.broken
        if broken is None and (self._sticky or lease.in_transaction or lease.reading):
            return
        self._lease = None
        if broken is not None and self._sticky is not None:
            self._lost = (f"the server connection holding this connection's session state "
                          f"({self._sticky}) was lost: {broken}")
        lease.close()

    # -- ending transactions ----------------------------------------------------------------
    def _end(self, commit: bool) -> None:
        if self._closed:
            raise InterfaceError("the connection is closed")
        if self._lease is None and self._background is None:
            return  # nothing is open: no I/O, no switch (safe from the hub)
        if _in_hub():
            self._background = gevent.spawn(self._end_in_background, commit)
            return
        self._wait_for_background()
        if self._lease is not None:
            self._on_lease(lambda lease: lease.end(commit), begin=False)

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
        if self.in_transaction:
            raise ProgrammingError(f"cannot change {what} inside a transaction; "
                                   "commit() or rollback() first")


def _total(counts: list[int]) -> int:
    """The rows an executemany changed: the sum of its counts, -1 if any is unknown."""
    return -1 if -1 in counts else sum(counts)
