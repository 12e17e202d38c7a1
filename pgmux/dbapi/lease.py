"""A pinned connection held by a DB-API connection across calls, one greenlet at a time."""

from __future__ import annotations

from typing import Any

from gevent.hub import getcurrent

from pgmux.engine.result import Result
from pgmux.errors import InterfaceError
from pgmux.session import Session, begin_statement, claim_wait, commit_open, rollback_open
from pgmux.telemetry import PINNED, active, observed


def take_turn(owner: Any) -> Any:
    """The calling greenlet, unless another greenlet (``owner``) has the turn."""
    current = getcurrent()
    if owner is not None and owner is not current:
        raise InterfaceError("the connection is in use by another greenlet; a DB-API "
                             "connection serves one greenlet at a time")
    return current


class Lease(Session):
    """A pinned connection held by an object across calls, not by a ``with`` block.

    For ``pgmux.dbapi``: a DB-API connection keeps one server connection from one call
    to the next while greenlets take turns with it (request greenlets, SQLAlchemy's
    pool). Any greenlet may use the lease inside ``using()``, one greenlet at a time
    (another one gets InterfaceError at once). ``open()`` takes a pinned connection,
    ``close()`` gives it back as a session's block exit does: reset, or replaced when
    it broke (a greenlet killed mid-statement breaks it). A ``close()`` while another
    greenlet is inside ``using()`` takes effect when that greenlet leaves.
    """

    def __init__(self, session: Session):
        super().__init__(session.pool, session.acquire_timeout)
        self._close_pending = False

    def open(self) -> Lease:
        """Take a pinned connection (waiting up to the session's acquire timeout)."""
        if self._state != "new":
            raise InterfaceError("a lease can be opened only once")
        self._conn = self._pool.acquire(self._acquire_timeout, holder=self)
        self._state = "open"
        return self

    def __enter__(self) -> Lease:
        return self.open()

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def using(self) -> _Use:
        """A block in which the calling greenlet, and only it, uses the lease."""
        return _Use(self)

    def take_turn(self) -> Any:
        """Make the calling greenlet the owner; the previous owner (None: nobody), for
        ``end_turn`` (``using()`` as two calls)."""
        previous = self._owner
        self._owner = take_turn(previous)
        return previous

    def end_turn(self, previous: Any) -> None:
        """Give the turn back to ``previous``; a close() asked for meanwhile happens now."""
        self._owner = previous
        if previous is None and self._close_pending:
            self._close_pending = False
            self.close()

    def close(self) -> None:
        """Give the connection back to the pool (now, or when the greenlet using it leaves)."""
        owner = self._owner
        if owner is not None and owner is not getcurrent():
            self._close_pending = True
            return
        Session.__exit__(self, None, None, None)

    @property
    def closed(self) -> bool:
        return self._state == "closed"

    @property
    def broken(self) -> str | None:
        """Why the server connection is unusable (its session state is gone), or None."""
        conn = self._conn
        if conn is None:
            return None if self._state == "new" else "the lease is closed"
        return conn.broken

    @property
    def in_transaction(self) -> bool:
        """A transaction is open, or a BEGIN is waiting for the next statement."""
        conn = self._conn
        return conn is not None and conn.in_transaction

    @property
    def reading(self) -> bool:
        """A stream (or COPY OUT) is open between two calls."""
        conn = self._conn
        return conn is not None and conn.active is not None

    @property
    def standard_conforming_strings(self) -> bool:
        """Whether the server reads a backslash in a '' literal as a plain character on this
        connection, as it last reported (ParameterStatus); True while none is held."""
        conn = self._conn
        return conn is None or bool(conn.engine.settings.standard_conforming_strings)

    def fileno(self) -> int:
        """The server connection's socket, for ``select()``; -1 when none is held."""
        conn = self._conn
        return -1 if conn is None else conn.server.transport.fileno()

    @property
    def tls(self) -> bool:
        """Whether the server connection is encrypted (TLS)."""
        conn = self._conn
        return conn is not None and conn.server.transport.is_tls

    def cancel(self) -> bool:
        """Ask the server to cancel the statement running here (a CancelRequest, from any
        greenlet); whether the server confirmed it got it."""
        conn = self._conn
        return conn is not None and bool(conn.server.send_cancel())

    def take_notifications(self) -> list[tuple[int, str, str]]:
        """The notifications received so far, (pid, channel, payload) each, oldest first;
        they are forgotten here."""
        conn = self._conn
        if conn is None or not conn.notifications:
            return []
        notes = list(conn.notifications)
        conn.notifications.clear()
        return notes

    def begin(self, isolation: str | None = None, readonly: bool = False,
              deferrable: bool = False) -> None:
        """BEGIN, written with the next statement, unless a transaction is already open."""
        conn = self._use()
        if not conn.in_transaction:
            conn.defer(begin_statement(isolation, readonly, deferrable), self)

    def end(self, commit: bool, reset: bool = False) -> None:
        """COMMIT (or ROLLBACK) the open transaction, if there is one; ``reset``: the lease
        is given back next, so the pool's reset (if its statements left anything) goes in
        the same write."""
        conn = self._check()
        if conn.undefer(self) or not conn.in_transaction:
            return
        resets = self._pool.reset_for(conn) if reset and conn.residue else ()

        def run(sql: str) -> Result:  # COMMIT or ROLLBACK: an operation of its own
            def end() -> Result:
                return conn.end_and_reset(sql, resets) if resets else conn.command(sql)

            if self._observer is None:
                return end()
            return observed(self._observer, PINNED, sql, end, operation=sql,
                            wait=claim_wait(conn))

        if commit:
            commit_open(run)
        else:
            rollback_open(conn, run)

    def tell_wait(self) -> None:
        """(Telemetry, for a statement that runs as no operation of its own: a named cursor's
        DECLARE) the wait for this lease's connection, to the operation running."""
        op = active() if self._observer is not None else None
        if op is not None:
            op.waited(claim_wait(self._use()))

    def command(self, sql: str) -> Result:
        """Run ``sql`` as a simple query (several statements allowed; text results, nothing
        described or prepared): named cursors' DECLARE, FETCH and CLOSE."""
        return self._use().command(sql)


class _Use:
    """The block of ``Lease.using()``: the calling greenlet owns the lease inside it."""

    __slots__ = ("_lease", "_previous")

    def __init__(self, lease: Lease):
        self._lease = lease
        self._previous: Any = None

    def __enter__(self) -> Lease:
        self._previous = self._lease.take_turn()
        return self._lease

    def __exit__(self, *exc_info: Any) -> None:
        self._lease.end_turn(self._previous)
