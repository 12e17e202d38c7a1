"""The public facade: ``Client``, its multiplexed queries, prepared handles and stats."""

from __future__ import annotations

import dataclasses
import logging
import os
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from gevent.event import Event
from gevent.hub import get_hub
from gevent.lock import Semaphore

from pgmux.engine import Descriptions, Engine, Reply
from pgmux.errors import InterfaceError
from pgmux.guard import Guard, check_parameter_count
from pgmux.io.connect import ServerConnection, connect
from pgmux.io.conninfo import ConnInfo, make_conninfo
from pgmux.pool import dispatch
from pgmux.pool.pinned import PinnedPool
from pgmux.pool.router import CatalogEntry, PipelinePool
from pgmux.protocol.result import Result, Row, first_row, first_value
from pgmux.session import Session, Transaction
from pgmux.types import TypeRegistry, default_registry
from pgmux.types.names import type_oid

try:  # the hub of the calling thread, without creating one in a foreign thread
    from gevent._hub_local import get_hub_if_exists as _hub_of_this_thread
except ImportError:  # pragma: no cover - older gevent
    _hub_of_this_thread = get_hub

log = logging.getLogger("pgmux")

Params = Sequence[Any]
DEFAULT_CONNECT_TIMEOUT = 10.0
NoticeHandler = Callable[[dict[str, str]], None]


def log_notice(fields: dict[str, str]) -> None:
    """The default notice handler: the ``pgmux`` logger, at the notice's severity."""
    severity = fields.get("V", fields.get("S", "NOTICE"))
    level = logging.WARNING if severity == "WARNING" else logging.INFO
    log.log(level, "server %s: %s", severity, fields.get("M", ""))


class Client:
    """A process's PostgreSQL client: pipelined connections for independent queries,
    pinned connections for transactions and sessions.

    Safe to use from any number of greenlets at once.
    """

    def __init__(self, dsn: str | None = None, *,
                 pipeline_size: int = 4,
                 pinned_size: int = 2,
                 max_in_flight: int = 64,
                 guard: str = "default",
                 connect_timeout: float | None = None,
                 acquire_timeout: float = 30.0,
                 statement_cache_size: int = 512,
                 notice_handler: NoticeHandler | None = None,
                 types: TypeRegistry | None = None,
                 probe_interval: float = 10.0,
                 probe_timeout: float = 5.0,
                 cancel_grace: float = 5.0,
                 reset_timeout: float = 10.0,
                 idle_in_transaction_timeout: float | None = None,
                 max_lifetime: float | None = None,
                 **conninfo: Any):
        if pipeline_size < 0 or pinned_size < 0:
            raise InterfaceError("pipeline_size and pinned_size must not be negative")
        if max_in_flight < 1:
            raise InterfaceError("max_in_flight must be at least 1")
        if connect_timeout is not None:
            conninfo["connect_timeout"] = connect_timeout
        info = make_conninfo(dsn, **conninfo)
        if info.connect_timeout is None:  # neither argument, DSN nor PGCONNECT_TIMEOUT
            info = dataclasses.replace(info, connect_timeout=DEFAULT_CONNECT_TIMEOUT)
        self.conninfo: ConnInfo = info
        self.pipeline_size = pipeline_size
        self.pinned_size = pinned_size
        self.max_in_flight = max_in_flight
        self.acquire_timeout = acquire_timeout
        self.statement_cache_size = statement_cache_size
        self.types = types if types is not None else default_registry.copy()
        self.notice_handler: NoticeHandler = notice_handler or log_notice
        self.guard = Guard(guard)
        self._check = None if guard == "off" else self.guard.check
        self._encode = self.types.encode_params
        self._descriptions = Descriptions()  # what each statement returns, for all connections
        self._probe = (probe_interval, probe_timeout)
        self._pipeline: PipelinePool | None = None
        self._hub = get_hub()
        self._pinned = PinnedPool(
            self._connect, self.types, descriptions=self._descriptions, size=pinned_size,
            acquire_timeout=acquire_timeout, statement_cache_size=statement_cache_size,
            on_notice=self._notice,
            idle_in_transaction_timeout=idle_in_transaction_timeout,
            max_lifetime=max_lifetime,
            cancel_grace=cancel_grace,
            reset_timeout=reset_timeout,
        )
        self._catalog: dict[str, CatalogEntry] = {}
        self._preparing: dict[str, Event] = {}  # names whose prepare() is under way
        self._closed = False
        self._start_lock = Semaphore()
        self._pid = os.getpid()
        _register_fork_hook(self)

    # -- lifecycle ------------------------------------------------------------------
    @classmethod
    def open(cls, dsn: str | None = None, **options: Any) -> Client:
        """A client to use as a context manager: started on enter, closed on exit."""
        return cls(dsn, **options)

    def __enter__(self) -> Client:
        self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def start(self) -> Client:
        """Open the pipeline connections now (otherwise they open on first use)."""
        self._pipeline_pool()
        return self

    def close(self, timeout: float = 5.0) -> None:
        """Finish in-flight work, fail waiting callers, Terminate every connection."""
        self._closed = True
        pool, self._pipeline = self._pipeline, None
        if pool is not None:
            pool.close(timeout)
        self._pinned.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def _connect(self) -> ServerConnection:
        return connect(self.conninfo)

    def _notice(self, fields: dict[str, str]) -> None:
        try:
            self.notice_handler(fields)
        except Exception:
            log.exception("pgmux: the notice handler raised")

    def _pipeline_pool(self) -> PipelinePool:
        pool = self._pipeline
        if pool is not None:
            return pool
        with self._start_lock:  # concurrent first callers wait for one start
            if self._pipeline is not None:
                return self._pipeline
            if self._closed:
                raise InterfaceError("the client is closed")
            if self.pipeline_size == 0:
                raise InterfaceError("pipeline_size=0: use db.session() or db.transaction()")
            pool = PipelinePool(
                self._connect, self.types, size=self.pipeline_size,
                max_in_flight=self.max_in_flight, acquire_timeout=self.acquire_timeout,
                statement_cache_size=self.statement_cache_size,
                descriptions=self._descriptions, on_notice=self._notice,
                probe_interval=self._probe[0], probe_timeout=self._probe[1],
            )
            pool.catalog = self._catalog
            try:
                pool.start()
            except BaseException:
                pool.close(0)
                raise
            self._pipeline = pool
            return pool

    def _after_fork_in_child(self) -> None:
        """Drop every inherited socket without sending on it; reconnect on next use."""
        pool, self._pipeline = self._pipeline, None
        if pool is not None:
            pool.abandon_after_fork()
        self._pinned.abandon_after_fork()
        self._pid = os.getpid()

    # -- multiplexed path -----------------------------------------------------------
    def query(self, sql: str, params: Params = (), *, timeout: float | None = None) -> Result:
        """Run one statement on the multiplexed path and return its rows."""
        return self._run(sql, params, timeout).result()

    def fetchone(self, sql: str, params: Params = (), *,
                 timeout: float | None = None) -> Row | None:
        """The first row, or None."""
        return first_row(self._run(sql, params, timeout).result())

    def fetchval(self, sql: str, params: Params = (), *, timeout: float | None = None) -> Any:
        """The first column of the first row, or None."""
        return first_value(self._run(sql, params, timeout).result())

    def execute(self, sql: str, params: Params = (), *, timeout: float | None = None) -> int:
        """Run a command and return its row count (-1 if its tag has none)."""
        return self._run(sql, params, timeout).result().rowcount

    def _run(self, sql: str, params: Params, timeout: float | None) -> Reply:
        if _hub_of_this_thread() is not self._hub:
            self._in_own_thread()  # raises
        pool = self._pipeline
        if self._check is not None:
            if pool is None:  # refused with no server at all, or checked once it is known
                self._check(sql)
                pool = self._pipeline_pool()
                if not pool.standard_conforming_strings:
                    self._check(sql, False)
            else:
                self._check(sql, pool.standard_conforming_strings)
        elif pool is None:
            pool = self._pipeline_pool()
        if params:
            check_parameter_count(sql, len(params))
        oids, formats, values = self._encode(params)
        return dispatch.run(pool, Engine.query, (sql, oids, formats, values), timeout)

    def _in_own_thread(self) -> None:
        """Refuse a call from another native thread (gevent's thread pool, a Thread)."""
        if _hub_of_this_thread() is not self._hub:
            raise InterfaceError("a pgmux Client can be used only from the thread (gevent hub) "
                                 "that created it; this call came from another native thread")

    def prepare(self, name: str, sql: str,
                types: Sequence[int | str] | None = None) -> PreparedStatement:
        """Register a named statement, prepared on every pipeline connection before returning."""
        self._in_own_thread()
        pool = self._pipeline_pool()
        if self._check is not None:
            self._check(sql, pool.standard_conforming_strings)
        oids = tuple(type_oid(t) if isinstance(t, str) else int(t) for t in types or ())
        while (existing := self._catalog.get(name)) is not None:
            if existing.sql != sql or existing.param_oids != oids:
                raise InterfaceError(f"a statement named {name!r} is already prepared "
                                     "with different SQL")
            preparing = self._preparing.get(name)
            if preparing is None:
                return PreparedStatement(self, existing)
            preparing.wait()  # another greenlet is preparing it: wait for its outcome
        entry = CatalogEntry(name, sql, oids)
        self._catalog[name] = entry
        self._preparing[name] = done = Event()
        try:
            pool.prepare_everywhere(entry, self.acquire_timeout)
        except BaseException:
            if self._catalog.get(name) is entry:
                del self._catalog[name]
            raise
        finally:
            del self._preparing[name]
            done.set()
        return PreparedStatement(self, entry)

    # -- pinned path ----------------------------------------------------------------
    def session(self, *, timeout: float | None = None) -> Session:
        """An exclusive connection for session-scoped work, reset when the block exits."""
        self._in_own_thread()
        if self._closed:
            raise InterfaceError("the client is closed")
        return Session(self._pinned, acquire_timeout=timeout)

    def transaction(self, isolation: str | None = None, readonly: bool = False,
                    deferrable: bool = False, *, timeout: float | None = None) -> Transaction:
        """A transaction on an exclusive connection: COMMIT on success, ROLLBACK on error."""
        self._in_own_thread()
        if self._closed:
            raise InterfaceError("the client is closed")
        return Transaction.on_new_session(
            Session(self._pinned, acquire_timeout=timeout),
            isolation=isolation, readonly=readonly, deferrable=deferrable)

    # -- observability --------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counters for both pools; see the README for what each key means."""
        pool = self._pipeline
        pipeline = pool.stats() if pool is not None else {
            "size": self.pipeline_size, "live": 0, "drivers": []}
        pinned = self._pinned.stats()
        return {
            "pipeline": pipeline,
            "pinned": pinned,
            "prepared_statements": len(self._catalog),
            "reconnects": (pool.reconnects if pool is not None else 0)
            + self._pinned.reconnects,
        }

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("started" if self._pipeline else "idle")
        return f"<pgmux.Client {self.conninfo.describe()} {state}>"


class PreparedStatement:
    """A handle to a statement registered with ``Client.prepare``."""

    def __init__(self, client: Client, entry: CatalogEntry):
        self._client = client
        self._entry = entry

    @property
    def name(self) -> str:
        return self._entry.name

    @property
    def sql(self) -> str:
        return self._entry.sql

    def _run(self, params: Params, timeout: float | None) -> Reply:
        client = self._client
        client._in_own_thread()
        entry = self._entry
        pool = client._pipeline or client._pipeline_pool()
        return dispatch.run(pool, Engine.catalog_query,
                            (entry.name, entry.sql, entry.param_oids, params), timeout)

    def query(self, params: Params = (), *, timeout: float | None = None) -> Result:
        return self._run(params, timeout).result()

    def fetchone(self, params: Params = (), *, timeout: float | None = None) -> Row | None:
        return first_row(self._run(params, timeout).result())

    def fetchval(self, params: Params = (), *, timeout: float | None = None) -> Any:
        return first_value(self._run(params, timeout).result())

    def execute(self, params: Params = (), *, timeout: float | None = None) -> int:
        return self._run(params, timeout).result().rowcount

    def __repr__(self) -> str:
        return f"<PreparedStatement {self._entry.name!r}>"


_clients: weakref.WeakSet[Client] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for client in list(_clients):
        client._after_fork_in_child()


def _register_fork_hook(client: Client) -> None:
    if not _clients and not getattr(_register_fork_hook, "installed", False):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _register_fork_hook.installed = True  # type: ignore[attr-defined]
    _clients.add(client)
