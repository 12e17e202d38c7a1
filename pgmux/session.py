"""Sessions, transactions, savepoints and explicit pipelines on a pinned connection.

A ``Session`` holds one pinned connection for the length of its ``with`` block and
is usable only from the greenlet that opened it. Without an explicit transaction
each statement runs in autocommit. Statements with parameters use the extended
protocol (prepared and cached per connection); statements without parameters are
sent as a simple Query, so a script of several statements is allowed.

``timeout=`` on a call: when it passes, the statement is cancelled (CancelRequest,
and the reply is read to its end), ``QueryTimeout`` is raised with ``sqlstate``
"57014" when the server confirmed the cancel, and the session stays usable. If the
statement finished before the cancel took effect, its result is returned instead.
A cancel that cannot be sent or is not answered within the pool's grace period
closes the connection; the session then raises OperationalError.

A session's explicit pipeline is ``pgmux.session_pipeline``'s; the transaction control it
writes (BEGIN, COMMIT, ROLLBACK, quoted names) is ``pgmux.transaction_control``'s.
"""


from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from gevent.hub import getcurrent

from pgmux._native import adopt
from pgmux.engine.result import Result, Row, first_row, first_value
from pgmux.errors import InterfaceError
from pgmux.io.pinned import PinnedConnection
from pgmux.io.pinned_copy import run_copy_in, start_copy_out
from pgmux.io.pinned_stream import open_stream
from pgmux.session_pipeline import Operation, Pipeline
from pgmux.telemetry import PINNED, Observer, claim_wait, observed
from pgmux.telemetry import Operation as Observed
from pgmux.transaction_control import (
    begin_statement,
    commit_open,
    isolation_keywords,
    quote_ident,
    rollback_open,
    rolled_back_at_commit,
)

__all__ = ["Notification", "Operation", "Pipeline", "Savepoint", "Session", "Transaction",
           "begin_statement", "claim_wait", "commit_open", "isolation_keywords", "quote_ident",
           "rollback_open", "rolled_back_at_commit"]

Params = Sequence[Any]


class Notification(NamedTuple):
    """A NOTIFY received by a session that LISTENs on ``channel``."""

    pid: int  # the notifying backend
    channel: str
    payload: str


class _Runner:
    """The statement methods shared by sessions, transactions and savepoints (each sets
    ``_observer``: the client's telemetry, pgmux.telemetry, if on)."""

    _observer: Observer | None

    def _use(self) -> PinnedConnection:
        raise NotImplementedError

    def _session(self) -> Session:
        raise NotImplementedError

    def _query(self, sql: str, params: Params, timeout: float | None) -> Result:
        conn = self._use()
        if self._observer is None:
            return conn.query(sql, params, timeout)
        return _observed_query(self._observer, conn, sql, params, timeout)

    def _command(self, conn: PinnedConnection, sql: str, operation: str | None = None) -> Result:
        """A statement of pgmux's own (a savepoint's end, LISTEN), as its own operation."""
        if self._observer is None:
            return conn.command(sql)
        return _observed_command(self._observer, conn, sql, operation)

    def execute(self, sql: str, params: Params = (), *, timeout: float | None = None) -> int:
        """Run a command; its row count (-1 if its tag has none)."""
        return self._query(sql, params, timeout).rowcount

    def query(self, sql: str, params: Params = (), *, timeout: float | None = None) -> Result:
        """Run a statement and return its rows (the last statement's, for a script)."""
        return self._query(sql, params, timeout)

    def fetchone(self, sql: str, params: Params = (), *,
                 timeout: float | None = None) -> Row | None:
        """The first row, or None."""
        return first_row(self._query(sql, params, timeout))

    def fetchval(self, sql: str, params: Params = (), *, timeout: float | None = None) -> Any:
        """The first column of the first row, or None."""
        return first_value(self._query(sql, params, timeout))

    def stream(self, sql: str, params: Params = (), batch: int = 1000, *,
               timeout: float | None = None) -> Iterator[Row]:
        """Iterate the rows of ``sql`` through a portal, ``batch`` rows per round trip.

        Memory stays bounded whatever the row count. ``timeout`` applies to each
        round trip. Running another statement on the session closes the stream.
        """
        observer = self._observer
        conn = self._use()
        op = (observer.begin(sql, PINNED, params, exclusive=False, wait=claim_wait(conn))
              if observer else None)
        try:
            cursor = open_stream(conn, sql, params, batch, timeout)
        except BaseException as exc:
            if op is not None:
                op.failed(exc)
            raise
        return self._session()._iterate(cursor, op)

    def copy_in(self, sql: str, source: Iterable[Any], *, timeout: float | None = None) -> int:
        """``COPY ... FROM STDIN`` fed from ``source``: bytes chunks or row tuples.

        Rows are encoded to COPY text format. If ``source`` raises, the COPY is
        failed (CopyFail), the session stays usable and the exception propagates.
        Returns the number of rows copied.
        """
        conn = self._use()
        if self._observer is None:
            return run_copy_in(conn, sql, source, timeout)
        return observed(self._observer, PINNED, sql,
                        lambda: run_copy_in(conn, sql, source, timeout), operation="COPY",
                        wait=claim_wait(conn))

    def copy_out(self, sql: str, *, timeout: float | None = None) -> Iterator[bytes]:
        """``COPY ... TO STDOUT`` as an iterator of bytes chunks (whole rows each).

        Leaving the loop early cancels the COPY. ``timeout`` applies to each wait.
        """
        observer = self._observer
        conn = self._use()
        op = (observer.begin(sql, PINNED, operation="COPY", exclusive=False,
                             wait=claim_wait(conn)) if observer else None)
        try:
            reader = start_copy_out(conn, sql, timeout)
        except BaseException as exc:
            if op is not None:
                op.failed(exc)
            raise
        return self._session()._iterate(reader, op)

    def pipeline(self, *, timeout: float | None = None) -> Pipeline:
        """An explicit pipeline on this session's connection (see ``Pipeline``)."""
        session = self._session()
        session._use()
        return Pipeline(timeout, session._use, session._check, session._hold_pipeline,
                        session._observer)


class Session(_Runner):
    """An exclusive connection for session-scoped work, reset when its block exits."""

    def __init__(self, pool: Any, acquire_timeout: float | None = None, *,
                 session_scoped: bool = True, on_exit: Callable[[], None] | None = None):
        self._pool = pool
        self._observer = getattr(pool, "observer", None)
        self._acquire_timeout = acquire_timeout
        self._session_scoped = session_scoped  # False: only for a transaction's length
        self._on_exit = on_exit  # called once the connection is back (read-your-writes)
        self._conn: PinnedConnection | None = None
        self._owner: Any = None
        self._state = "new"
        self._transaction: Transaction | None = None
        self._pipeline: Pipeline | None = None

    # -- the block --------------------------------------------------------------------------
    def __enter__(self) -> Session:
        if self._state != "new":
            raise InterfaceError("a session can be entered only once")
        self._conn = self._pool.acquire(self._acquire_timeout,
                                        for_session=self._session_scoped)
        self._owner = getcurrent()
        self._state = "open"
        return self

    def __exit__(self, *exc_info: Any) -> None:
        conn = self._conn
        self._state = "closed"
        self._conn = None
        if conn is not None:
            self._pool.release(conn)
            if self._on_exit is not None:
                self._on_exit()

    def _check(self) -> PinnedConnection:
        conn = self._conn
        if conn is None:
            if self._state == "new":
                raise InterfaceError("use the session as a context manager: "
                                     "with db.session() as s: ...")
            raise InterfaceError("the session is closed: its block has exited")
        if getcurrent() is not self._owner:
            raise InterfaceError("a session can be used only by the greenlet that opened it")
        return conn

    def _use(self) -> PinnedConnection:
        conn = self._check()
        if self._pipeline is not None:
            raise InterfaceError("a pipeline is open on this session: use it, or leave its "
                                 "block first")
        return conn

    def _session(self) -> Session:
        return self

    def _hold_pipeline(self, pipeline: Pipeline | None) -> None:
        """(For its ``Pipeline``) the pipeline that holds the connection now, or None."""
        self._pipeline = pipeline

    def _iterate(self, cursor: Any, op: Observed | None = None) -> Iterator[Any]:
        """Hand out what ``cursor.fetch()`` returns, batch by batch, in the owner greenlet
        (``op``: the stream's or COPY's telemetry, ended with the iteration; if it never
        starts, when the cursor is abandoned or the iterator dropped)."""
        iteration = self._hand_out(cursor)
        if op is not None:
            cursor.operation = op
            weakref.finalize(iteration, cursor.end_operation).atexit = False
        return iteration

    def _hand_out(self, cursor: Any) -> Iterator[Any]:
        try:
            while True:
                self._check()
                batch = cursor.fetch()
                if batch is None:
                    return
                if type(batch) is not list:
                    yield batch
                    continue
                cursor.rows_handed_out = (cursor.rows_handed_out or 0) + len(batch)
                for row in batch:
                    if self._conn is None:  # the block exited while this batch was read
                        self._check()
                    yield row
        except BaseException as exc:
            op = cursor.operation
            if op is not None and not isinstance(exc, GeneratorExit):
                cursor.operation = None
                op.failed(exc)
            raise
        finally:
            cursor.end_operation()  # (nothing if it failed)
            if getcurrent() is self._owner and self._conn is not None:
                cursor.close()

    @property
    def pool(self) -> Any:
        """The pinned pool this session takes its connection from."""
        return self._pool

    @property
    def acquire_timeout(self) -> float | None:
        """How long entering waits for a pinned connection (None: the pool's default)."""
        return self._acquire_timeout

    # -- session-scoped ---------------------------------------------------------------------
    @property
    def pid(self) -> int:
        """The server process id of this session's connection."""
        return self._check().pid

    @property
    def transaction_status(self) -> str:
        """``I`` idle, ``T`` in a transaction block, ``E`` in a failed one (as last seen)."""
        conn = self._check()
        return "T" if conn.status == "I" and conn.in_transaction else conn.status

    def transaction(self, isolation: str | None = None, readonly: bool = False,
                    deferrable: bool = False) -> Transaction:
        """A transaction on this session: COMMIT on success, ROLLBACK on any exception."""
        return Transaction(self, isolation=isolation, readonly=readonly, deferrable=deferrable)

    def listen(self, channel: str) -> None:
        """LISTEN on ``channel`` (the exact, case-sensitive name)."""
        if getattr(self._pool, "pooler", None) == "transaction":
            raise InterfaceError("LISTEN is not available with pooler='transaction': the "
                                 "pooler lends the server connection to others after each "
                                 "transaction, so notifications would never arrive here")
        self._command(self._use(), f"LISTEN {quote_ident(channel)}")

    def unlisten(self, channel: str | None = None) -> None:
        """UNLISTEN ``channel``, or every channel when None."""
        target = "*" if channel is None else quote_ident(channel)
        self._command(self._use(), f"UNLISTEN {target}")

    def wait_notify(self, timeout: float | None = None) -> Notification | None:
        """The next notification (queued ones first), or None after ``timeout`` seconds."""
        note = self._use().wait_notify(timeout)
        return None if note is None else Notification._make(note)

    def __repr__(self) -> str:
        where = f" pid={self._conn.pid}" if self._conn is not None else ""
        return f"<pgmux.Session {self._state}{where}>"


class Transaction(_Runner):
    """BEGIN on enter; COMMIT when the block succeeds, ROLLBACK on any exception.

    BEGIN is written together with the first statement, so it costs no round trip.
    """

    def __init__(self, session: Session, *, isolation: str | None = None,
                 readonly: bool = False, deferrable: bool = False,
                 owns_session: bool = False, on_commit: Callable[[], None] | None = None):
        self._s = session
        self._begin = begin_statement(isolation, readonly, deferrable)
        self._owns_session = owns_session
        self._on_commit = on_commit  # called after a COMMIT that ran (read-your-writes)
        self._observer = session._observer
        self._state = "new"
        self._savepoints = 0  # savepoints made so far (each named by its number)

    @classmethod
    def on_new_session(cls, session: Session, *, isolation: str | None = None,
                       readonly: bool = False, deferrable: bool = False,
                       on_commit: Callable[[], None] | None = None) -> Transaction:
        """A transaction that opens ``session`` on enter and closes it on exit."""
        return cls(session, isolation=isolation, readonly=readonly, deferrable=deferrable,
                   owns_session=True, on_commit=on_commit)

    @property
    def session(self) -> Session:
        """The pinned session this transaction runs on."""
        return self._s

    def __enter__(self) -> Transaction:
        if self._state != "new":
            raise InterfaceError("a transaction can be entered only once")
        if self._owns_session:
            self._s.__enter__()
        try:
            self._open()
        except BaseException:
            if self._owns_session:
                self._s.__exit__(None, None, None)
            raise
        return self

    def _open(self) -> None:
        """BEGIN, deferred to the first statement, on the session's connection."""
        session = self._s
        conn = session._use()
        if session._transaction is not None or conn.in_transaction:
            raise InterfaceError("the session is already in a transaction; "
                                 "use tx.savepoint() to nest")
        conn.defer(self._begin, self)
        session._transaction = self
        self._state = "open"

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            if exc is None:
                self._commit()
            else:
                self._rollback()
        finally:
            self._state = "closed"
            self._s._transaction = None
            if self._owns_session:
                self._s.__exit__(exc_type, exc, tb)

    def _commit(self) -> None:
        conn = self._s._check()
        if conn.undefer(self):
            return  # nothing ran: no BEGIN was ever sent
        commit_open(self._finish)
        if self._on_commit is not None:
            self._on_commit()

    def _rollback(self) -> None:
        conn = self._s._conn
        if conn is None or conn.undefer(self):
            return  # never begun
        rollback_open(conn, self._finish)

    def _finish(self, sql: str) -> Result:
        """COMMIT or ROLLBACK (``sql``) on the session's connection (held: the block is
        ending)."""
        conn = self._s._conn
        assert conn is not None
        return self._end(conn, sql)

    def _end(self, conn: PinnedConnection, sql: str) -> Result:
        """COMMIT or ROLLBACK; with the pool's reset in the same round trip when the session
        ends with this transaction."""
        if self._observer is not None:
            return _observed_end(self._observer, self, conn, sql)
        return self._end_now(conn, sql)

    def _end_now(self, conn: PinnedConnection, sql: str) -> Result:
        if self._owns_session:
            return conn.end_and_reset(sql, self._s._pool.reset_for(conn))
        return conn.command(sql)

    def _use(self) -> PinnedConnection:
        if self._state != "open":
            raise InterfaceError("the transaction is not open: use it inside its block")
        session = self._s
        conn = session._conn
        if conn is None or session._pipeline is not None or getcurrent() is not session._owner:
            return session._use()  # (raises what is wrong)
        return conn

    def _session(self) -> Session:
        self._use()
        return self._s

    def savepoint(self) -> Savepoint:
        """A nested block: an exception inside rolls back to the savepoint only."""
        self._use()
        self._savepoints += 1
        return Savepoint(self, f"pgmux_sp_{self._savepoints}")

    def __repr__(self) -> str:
        return f"<pgmux.Transaction {self._state} {self._begin!r}>"


class Savepoint(_Runner):
    """SAVEPOINT on enter; RELEASE on success, ROLLBACK TO (and RELEASE) on exception."""

    def __init__(self, transaction: Transaction, name: str):
        self._tx = transaction
        self._observer = transaction._observer
        self._name = quote_ident(name)
        self._state = "new"

    def __enter__(self) -> Savepoint:
        if self._state != "new":
            raise InterfaceError("a savepoint can be entered only once")
        self._tx._use().defer(f"SAVEPOINT {self._name}", self)
        self._state = "open"
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._state = "closed"
        conn = self._tx._s._check()
        if conn.undefer(self):
            return  # nothing ran inside it
        if exc is None:
            self._command(conn, f"RELEASE SAVEPOINT {self._name}")
        elif conn.broken is None:  # (an open stream or COPY is closed by the command)
            self._command(conn, f"ROLLBACK TO SAVEPOINT {self._name}; "
                          f"RELEASE SAVEPOINT {self._name}", "ROLLBACK")

    def _use(self) -> PinnedConnection:
        if self._state != "open":
            raise InterfaceError("the savepoint is not open: use it inside its block")
        return self._tx._use()

    def _session(self) -> Session:
        self._use()
        return self._tx._s

    def __repr__(self) -> str:
        return f"<pgmux.Savepoint {self._name} {self._state}>"


def _observed_query(observer: Observer, conn: PinnedConnection, sql: str, params: Params,
                    timeout: float | None) -> Result:
    return observed(observer, PINNED, sql, lambda: conn.query(sql, params, timeout), params,
                    wait=claim_wait(conn))


def _observed_command(observer: Observer, conn: PinnedConnection, sql: str,
                      operation: str | None) -> Result:
    return observed(observer, PINNED, sql, lambda: conn.command(sql), operation=operation,
                    wait=claim_wait(conn))


def _observed_end(observer: Observer, transaction: Transaction, conn: PinnedConnection,
                  sql: str) -> Result:
    return observed(observer, PINNED, sql, lambda: transaction._end_now(conn, sql),
                    operation=sql, wait=claim_wait(conn))


adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
