"""The pinned pool: exclusive connections lent to one greenlet at a time, reset on return.

Theory of operation
-------------------
The pool has ``size`` slots. A free slot holds an idle connection, or a marker for
a connection not opened yet (``None``) or dropped and to be reopened (``_DROPPED``);
connections open lazily, in the borrower's greenlet. ``_lent`` counts the slots
owned by a borrower, including a slot granted to a queued waiter that has not run
yet, so ``active + free == size`` at every switch point.

A borrower takes a free slot only when nobody is queued (FIFO). Otherwise it
queues a *ticket* and sleeps; a returned slot is granted to the first ticket
directly. A waiter that times out or is killed after its grant passes the slot on,
so no slot is ever lost between a grant and the waiter running.

A free connection is checked before it is lent: past its lifetime, on a host worse than
one known to be up for the target (``Placement``), or found dead, it is replaced.

On return the connection is reset: ROLLBACK if a transaction is still open, then what
the borrower may have left (``reset_for``), then idle status is confirmed:

* after a ``session()``: DISCARD ALL, the design's contract for sessions (the engine
  then forgets the server's prepared statements, and keeps what it knew of them, so the
  next borrower's first execution of each is a Parse in the same request);
* after work whose statements left session state (``sql.session_scope.residue``: SET,
  set_config, temporary tables, LISTEN, session advisory locks, WITH HOLD cursors; DO,
  CALL or a function other than a known built-in, whose effects cannot be seen):
  ``CLEAR_STATE``, which is DISCARD ALL without DEALLOCATE ALL (and without DISCARD
  PLANS), so pgmux's prepared statements stay, as Npgsql resets; after SQL PREPARE,
  DISCARD ALL, since the user's statements cannot be told from pgmux's own without a
  catalog query;
* after a sequence function in a statement's text (nextval, setval, currval, lastval):
  DISCARD SEQUENCES, so that the next borrower's currval()/lastval() fail as on a new
  connection;
* after anything else (a clean transaction: the common case): nothing at all, so the
  connection keeps its prepared statements and returning it costs no round trip.

The setup statements follow any reset. If the reset fails, or the connection is broken or
past its lifetime, it is closed (a busy one is cancelled first, in the background) and its
slot is returned empty, to be reopened by the next borrower. A transaction that owns its
session sends the reset with its COMMIT (or ROLLBACK), so returning the connection never
costs a round trip of its own. The slot is returned in a ``finally``, so a GreenletExit or
gevent.Timeout at any point keeps the counts exact. Sequence state that no statement's
text shows (column defaults call nextval()) is not reset after a clean transaction, as
psycopg_pool, pgx and HikariCP leave it.

Behind a transaction pooler (``pooler="transaction"``) there are no reset statements,
only the ROLLBACK of a transaction left open: the pooler hands the server connection to
someone else at COMMIT/ROLLBACK, so a reset would run on whichever server connection it
picks next (wiping another client's prepared statements and settings) and there is
nothing session-scoped of ours left to reset. Only sessions
need a server connection of their own, so only they are refused there. With ``pooler``
unset, the first connection opened checks for a pooler (the pid in BackendKeyData is not
the server's ``pg_backend_pid()``, as with PgBouncer) and sessions are refused when one
is found, since its pool mode cannot be seen from here.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import gevent
from gevent.hub import Waiter, get_hub, getcurrent

from pgmux._native import adopt
from pgmux.engine import Descriptions
from pgmux.errors import InterfaceError, PoolTimeout
from pgmux.io.connect import ServerConnection
from pgmux.io.hosts import Placement
from pgmux.io.pinned import PinnedConnection
from pgmux.pool.counters import PoolCounters, now
from pgmux.sql.session_scope import NO_RESIDUE, SEQUENCE_STATE, SESSION_STATE, USER_STATEMENTS
from pgmux.types.registry import TypeRegistry

log = logging.getLogger("pgmux")

RESET_SQL = "DISCARD ALL"
# DISCARD ALL but DEALLOCATE ALL and DISCARD PLANS: session state goes, prepared statements
# stay (one simple query, one round trip; every part may run in a transaction block).
CLEAR_STATE = ("CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; UNLISTEN *; "
               "SELECT pg_advisory_unlock_all(); DISCARD SEQUENCES; DISCARD TEMP")
CLEAR_SEQUENCES = "DISCARD SEQUENCES"  # currval()/lastval(): no setting, so no setup after

_DROPPED = object()  # a slot whose connection was closed: reopening it counts as a reconnect
POOLERS = (None, "session", "transaction")

Slot = Any  # PinnedConnection | None | _DROPPED


class _Ticket:
    """A queued borrower: its waiter, and the slot or error it was given."""

    __slots__ = ("waiter", "granted", "item", "error")

    def __init__(self) -> None:
        self.waiter = Waiter()
        self.granted = False
        self.item: Slot = None
        self.error: BaseException | None = None


class PinnedPool:
    """``size`` exclusive connections, lent for a session or a transaction."""

    def __init__(self, connect: Callable[[], ServerConnection], registry: TypeRegistry, *,
                 size: int, acquire_timeout: float | None,
                 descriptions: Descriptions | None = None,
                 statement_cache_size: int = 512,
                 on_notice: Callable[[dict[str, str]], None] | None = None,
                 idle_in_transaction_timeout: float | None = None,
                 max_lifetime: float | None = None,
                 reset_timeout: float = 10.0,
                 cancel_grace: float = 5.0,
                 pooler: str | None = None,
                 placement: Placement | None = None):
        if pooler not in POOLERS:
            raise InterfaceError(f"pooler must be None, 'session' or 'transaction', not {pooler!r}")
        if pooler == "transaction" and idle_in_transaction_timeout is not None:
            raise InterfaceError(
                "idle_in_transaction_timeout sets a session parameter, which a transaction "
                "pooler does not keep; use the pooler's own limit (PgBouncer: "
                "idle_transaction_timeout)")
        self.size = size
        self.pooler = pooler
        self.placement = placement  # host ranking: a connection on a worse host is replaced
        # None until the first connection is opened, then whether a pooler sits in between.
        self.pooler_detected: bool | None = None
        self.acquire_timeout = acquire_timeout
        self.max_lifetime = max_lifetime
        self.reset_timeout = reset_timeout
        self.cancel_grace = cancel_grace
        self.registry = registry
        self.descriptions = descriptions if descriptions is not None else Descriptions()
        self.reconnects = 0
        self.setup: tuple[str, ...] = _setup_statements(idle_in_transaction_timeout)
        # Behind a transaction pooler nothing of a borrower's outlives its COMMIT/ROLLBACK
        # on the server connection, and a reset would run on someone else's: ROLLBACK only.
        self._resets: dict[int, tuple[str, ...]] = {} if pooler == "transaction" else {
            SEQUENCE_STATE: (CLEAR_SEQUENCES,),
            SESSION_STATE: (CLEAR_STATE, *self.setup),
            USER_STATEMENTS: (RESET_SQL, *self.setup)}
        self._connect = connect
        self._cache_size = statement_cache_size
        self._on_notice = on_notice
        self._loop = get_hub().loop
        self._generation = 0
        self._closed = False
        self.counters = PoolCounters()  # for stats() and the connection-time metrics
        self.observer: Any = None  # the client's telemetry, for the sessions made on the pool
        self._init_slots()

    def _init_slots(self) -> None:
        self._free: deque[Slot] = deque([None] * self.size)
        self._lent = 0
        self._waiters: deque[_Ticket] = deque()
        self._holders: dict[Any, PinnedConnection] = {}  # greenlet (or lease) -> connection
        self._open: set[PinnedConnection] = set()
        self._lent_at: dict[PinnedConnection, float] = {}

    # -- borrowing ------------------------------------------------------------------------
    def acquire(self, timeout: float | None = None, *, for_session: bool = False,
                holder: Any = None) -> PinnedConnection:
        """A clean connection for ``holder`` (default: the calling greenlet); PoolTimeout
        if none frees up. A holder other than a greenlet (a ``Lease``) may hold one
        connection besides those of the greenlets that use it.

        ``for_session``: the borrower keeps session state (``Session``, not a transaction);
        refused when that state could leak through a pooler.
        """
        if for_session:
            self.check_session_allowed()
        if self._closed:
            raise InterfaceError("the client is closed")
        if self.size == 0:
            raise InterfaceError("pinned_size=0: this client has no pinned connections")
        current = getcurrent() if holder is None else holder
        if current in self._holders:
            raise InterfaceError(
                "this greenlet already holds a pinned connection (an open session or "
                "transaction); use it instead of opening another, which could deadlock")
        started, queued = now(), not self._free or bool(self._waiters)
        try:
            item = self._take(self.acquire_timeout if timeout is None else timeout)
        except Exception as exc:
            self.counters.refused(exc)
            raise
        try:
            conn = self._usable(item)
        except BaseException as exc:
            self._give_back(_DROPPED if item is not None else None)
            self.counters.refused(exc)
            raise
        self._lent_at[conn] = at = now()
        conn.waited = at - started
        self.counters.acquired(conn.waited, queued)
        if for_session and self.pooler_detected and self.pooler is None:
            self.release(conn)  # the first connection just found the pooler
            self.check_session_allowed()
        conn.for_session = for_session
        self._holders[current] = conn
        return conn

    def check_session_allowed(self) -> None:
        """Raise InterfaceError when session state could leak through a pooler."""
        if self.pooler == "transaction":
            raise InterfaceError(
                "sessions are not available with pooler='transaction': the pooler hands each "
                "transaction to any server connection, so session state (SET, LISTEN, temp "
                "tables, session locks) would leak to other clients or be lost; use "
                "db.transaction(), or a session-mode pool with pooler='session'")
        if self.pooler_detected and self.pooler is None:
            raise InterfaceError(
                "a connection pooler sits between pgmux and the server (its backend pid is "
                "not the server's), and its pool mode cannot be seen from here: pass "
                "pooler='session' if it pools sessions (session() then works), or "
                "pooler='transaction' (session() is then refused); sessions are refused "
                "until then, since under transaction pooling their state would leak")

    def _usable(self, item: Slot) -> PinnedConnection:
        """The slot's connection if it is still fit, else a freshly opened one."""
        if isinstance(item, PinnedConnection):
            retired = self._expired(item) or self._misplaced(item)
            if retired or not item.probe():
                self.counters.connections_lost += not retired
                self._drop(item)
                item = _DROPPED
            else:
                return item
        conn = self._open_connection()
        if item is _DROPPED:
            self.reconnects += 1
        return conn

    def _open_connection(self) -> PinnedConnection:
        started = now()
        try:
            server = self._connect()
        except Exception:
            self.counters.connections_failed += 1
            raise
        self.counters.connected(now() - started)
        conn = PinnedConnection(server, self.registry,
                                descriptions=self.descriptions,
                                statement_cache_size=self._cache_size,
                                named_statements=self.pooler != "transaction",
                                on_notice=self._on_notice, cancel_grace=self.cancel_grace)
        conn.pool_generation = self._generation
        self._open.add(conn)
        try:
            if self.pooler is None and self.pooler_detected is None:
                self._detect_pooler(conn)
            for sql in self.setup:
                conn.command(sql)
            conn.used, conn.residue = False, NO_RESIDUE  # the setup is every borrower's
        except BaseException:
            self._drop(conn)
            raise
        return conn

    def _detect_pooler(self, conn: PinnedConnection) -> None:
        """One query on the first connection: is its BackendKeyData pid the server's?"""
        server_pid = conn.command("SELECT pg_backend_pid()").rows[0][0]
        conn.used = False  # a SELECT: nothing for the reset to undo
        self.pooler_detected = server_pid != conn.pid
        if self.pooler_detected:
            log.warning("pgmux: a connection pooler sits between pgmux and the server "
                        "(backend pid %d is not the server's %d); session() is refused until "
                        "Client(pooler='session' or 'transaction') says which kind",
                        conn.pid, server_pid)

    def _take(self, timeout: float | None) -> Slot:
        """A slot: free right away if nobody queues before us, else granted in turn."""
        if self._free and not self._waiters:
            self._lent += 1
            return self._free.popleft()
        ticket = _Ticket()
        self._waiters.append(ticket)
        timer = gevent.Timeout._start_new_or_dummy(timeout)
        try:
            ticket.waiter.get()
        except BaseException as exc:
            if not ticket.granted:
                self._waiters.remove(ticket)
                if exc is timer:
                    raise PoolTimeout(f"no pinned connection became free within {timeout}s "
                                      f"(pinned_size={self.size})") from None
                raise
            if exc is timer:
                return ticket.item  # granted as the timer fired: take it
            self._give_back(ticket.item)
            raise
        finally:
            timer.close()
        if ticket.error is not None:
            raise ticket.error
        return ticket.item

    # -- returning ------------------------------------------------------------------------
    def release(self, conn: PinnedConnection) -> None:
        """Take a connection back: reset it, or close it and free its slot empty."""
        for greenlet, held in list(self._holders.items()):
            if held is conn:
                del self._holders[greenlet]
        if conn.pool_generation != self._generation:
            conn.abandon()  # lent before a fork: the slot belongs to the old pool
            return
        lent_at = self._lent_at.pop(conn, None)
        if lent_at is not None:
            self.counters.used(now() - lent_at)
        item: Slot = _DROPPED
        try:
            if self._keep(conn) and conn.reset(self.reset_timeout, self.reset_for(conn)):
                item = conn
        finally:
            if item is not conn:
                self.counters.connections_lost += not self._closed and not self._expired(conn)
                self._drop(conn)
            self._give_back(item)

    def reset_for(self, conn: PinnedConnection) -> tuple[str, ...]:
        """What clears what ``conn``'s borrower may have left (see the module's docstring):
        nothing after a clean transaction."""
        level = USER_STATEMENTS if conn.for_session and conn.used else conn.residue
        return self._resets.get(level, ())

    def _keep(self, conn: PinnedConnection) -> bool:
        return not self._closed and conn.broken is None and not self._expired(conn)

    def _misplaced(self, conn: PinnedConnection) -> bool:
        """Whether a better host for the target is known to be up (no network involved)."""
        placement = self.placement
        if placement is None:
            return False
        placement.observe(conn.server)
        return placement.misplaced(conn.server, proven_only=True)

    def _expired(self, conn: PinnedConnection) -> bool:
        return self.max_lifetime is not None and conn.age >= self.max_lifetime

    def _drop(self, conn: PinnedConnection) -> None:
        self._open.discard(conn)
        try:
            conn.discard()
        except Exception as exc:
            log.debug("pgmux: closing a pinned connection failed: %s", exc)

    def _give_back(self, item: Slot) -> None:
        """Return a slot: to the first queued borrower, else to the free list."""
        if self._closed and isinstance(item, PinnedConnection):
            self._drop(item)
            item = None
        if self._waiters:
            ticket = self._waiters.popleft()
            ticket.granted = True
            ticket.item = item
            self._loop.run_callback(ticket.waiter.switch, None)
            return
        self._lent -= 1
        self._free.append(item)

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        """Close idle connections, fail queued borrowers; lent ones close when returned."""
        self._closed = True
        error = InterfaceError("the client is closed")
        while self._waiters:
            ticket = self._waiters.popleft()
            ticket.error = error
            self._loop.run_callback(ticket.waiter.switch, None)
        for index, item in enumerate(self._free):
            if isinstance(item, PinnedConnection):
                self._drop(item)
                self._free[index] = None

    def abandon_after_fork(self) -> None:
        """In a forked child: drop every inherited socket without sending on it."""
        for conn in list(self._open):
            conn.abandon()
        self._generation += 1
        self._init_slots()

    def stats(self) -> dict[str, int]:
        return {"size": self.size, "active": self._lent, "free": self.size - self._lent,
                "waiting": len(self._waiters)}

    def counter_stats(self) -> dict[str, Any]:
        """The running counts (``PoolCounters``), the connections open and reopened."""
        return {"connections": len(self._open), "reconnects": self.reconnects,
                **self.counters.stats()}

    def __repr__(self) -> str:
        return f"<PinnedPool {self.stats()}>"


def _setup_statements(idle_in_transaction_timeout: float | None) -> tuple[str, ...]:
    """Statements run on every new connection and after every reset."""
    if idle_in_transaction_timeout is None:
        return ()
    milliseconds = max(1, int(idle_in_transaction_timeout * 1000))
    return (f"SET idle_in_transaction_session_timeout = {milliseconds}",)


adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
