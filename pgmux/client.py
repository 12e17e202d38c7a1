"""The public facade: ``Client``, its multiplexed queries, prepared handles and stats."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from gevent.event import Event
from gevent.lock import Semaphore

from pgmux.errors import (
    InterfaceError,
    NotDispatchedError,
    PoolTimeout,
    QueryTimeout,
)
from pgmux.guard import Guard, check_parameter_count
from pgmux.io.connect import ServerConnection, connect
from pgmux.io.conninfo import ConnInfo, make_conninfo
from pgmux.io.pipeline import PipelineDriver, Unit
from pgmux.io.shapes import ShapeFactory
from pgmux.pool.pinned import PinnedPool
from pgmux.pool.router import CatalogEntry, PipelinePool
from pgmux.protocol.result import Reply, Result, Row
from pgmux.protocol.statements import is_stale_statement_error
from pgmux.session import Session, Transaction
from pgmux.types import TypeRegistry, default_registry
from pgmux.types.oids import TYPES

log = logging.getLogger("pgmux")

Params = Sequence[Any]
DEFAULT_CONNECT_TIMEOUT = 10.0
NoticeHandler = Callable[[dict[str, str]], None]


_TYPE_ALIASES = {
    "int": "int4", "integer": "int4", "smallint": "int2", "bigint": "int8",
    "real": "float4", "double precision": "float8", "boolean": "bool",
    "character varying": "varchar", "character": "bpchar", "decimal": "numeric",
    "timestamp without time zone": "timestamp", "timestamp with time zone": "timestamptz",
    "time without time zone": "time", "time with time zone": "timetz",
}


def type_oid(name: str) -> int:
    """The OID of a built-in type given by name (``"int"``, ``"text[]"``, ``"timestamptz"``)."""
    text = " ".join(name.lower().split())
    array = text.endswith("[]")
    base = text[:-2].strip() if array else text
    entry = TYPES.get(_TYPE_ALIASES.get(base, base))
    if entry is None or (array and not entry[1]):
        raise InterfaceError(f"unknown type name {name!r}; pass its OID instead")
    return entry[1] if array else entry[0]


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
        self._shapes = ShapeFactory(self.types)
        self._probe = (probe_interval, probe_timeout)
        self._pipeline: PipelinePool | None = None
        self._pinned = PinnedPool(
            self._connect, self._shapes, size=pinned_size, acquire_timeout=acquire_timeout,
            statement_cache_size=statement_cache_size,
            on_notice=self._notice,
            idle_in_transaction_timeout=idle_in_transaction_timeout,
            max_lifetime=max_lifetime,
            cancel_grace=cancel_grace,
            reset_timeout=reset_timeout,
        )
        self._catalog: dict[str, CatalogEntry] = {}
        self._preparing: dict[str, Event] = {}  # names whose prepare() is under way
        self._statement_ids = itertools.count(1)
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
                self._connect, self._shapes, size=self.pipeline_size,
                max_in_flight=self.max_in_flight, acquire_timeout=self.acquire_timeout,
                statement_cache_size=self.statement_cache_size, on_notice=self._notice,
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
        result = self._run(sql, params, timeout).result()
        return result.rows[0] if result.rows else None

    def fetchval(self, sql: str, params: Params = (), *, timeout: float | None = None) -> Any:
        """The first column of the first row, or None."""
        result = self._run(sql, params, timeout).result()
        return result.rows[0][0] if result.rows else None

    def execute(self, sql: str, params: Params = (), *, timeout: float | None = None) -> int:
        """Run a command and return its row count (-1 if its tag has none)."""
        return self._run(sql, params, timeout).result().rowcount

    def _run(self, sql: str, params: Params, timeout: float | None) -> Reply:
        if self._check is not None:
            self._check(sql)
        if params:
            check_parameter_count(sql, len(params))
        oids, formats, values = self._encode(params)
        return self._dispatch(
            lambda driver: driver.build_unit(sql, oids, formats, values), timeout)

    def _dispatch(self, build: Callable[[PipelineDriver], Unit],
                  timeout: float | None) -> Reply:
        """Send a unit to the least-loaded driver, retrying what provably never ran."""
        pool = self._pipeline or self._pipeline_pool()
        deadline = None if timeout is None else time.monotonic() + timeout
        attempts = 1
        stale_on: list[PipelineDriver] = []  # drivers where the statement proved stale
        while True:
            driver = self._acquire(pool, deadline, timeout)
            unit = build(driver)
            try:
                driver.submit(unit)
            except NotDispatchedError:
                if attempts >= self.pipeline_size:
                    raise
                attempts += 1
                continue
            if deadline is None:
                unit.wait(None)
            else:
                unit.wait(max(deadline - time.monotonic(), 0.0),
                          QueryTimeout(f"no result within {timeout}s"))
            failure = unit.failure
            if failure is not None:
                if isinstance(failure, NotDispatchedError) and attempts < self.pipeline_size:
                    attempts += 1
                    continue
                raise failure
            reply = unit.reply
            if (reply.error is not None and unit.statement is not None
                    and driver not in stale_on and is_stale_statement_error(reply.error)):
                # The failed unit changed nothing and that driver evicted the statement. The
                # retry may land on another driver whose copy is stale too: one retry per
                # driver, not one in all.
                stale_on.append(driver)
                continue
            return reply

    def _acquire(self, pool: PipelinePool, deadline: float | None,
                 timeout: float | None) -> PipelineDriver:
        """A driver with a free slot, waiting no longer than the caller's own deadline."""
        if deadline is None:
            return pool.acquire()
        remaining = deadline - time.monotonic()
        if remaining >= self.acquire_timeout:
            return pool.acquire()
        try:
            return pool.acquire(max(remaining, 0.0))
        except PoolTimeout:
            raise QueryTimeout(f"no result within {timeout}s (waiting for a slot)") from None

    def prepare(self, name: str, sql: str,
                types: Sequence[int | str] | None = None) -> PreparedStatement:
        """Register a named statement, prepared on every pipeline connection before returning."""
        if self._check is not None:
            self._check(sql)
        oids = tuple(type_oid(t) if isinstance(t, str) else int(t) for t in types or ())
        while (existing := self._catalog.get(name)) is not None:
            if existing.sql != sql or existing.param_oids != oids:
                raise InterfaceError(f"a statement named {name!r} is already prepared "
                                     "with different SQL")
            preparing = self._preparing.get(name)
            if preparing is None:
                return PreparedStatement(self, existing)
            preparing.wait()  # another greenlet is preparing it: wait for its outcome
        pool = self._pipeline_pool()
        entry = CatalogEntry(name, sql, oids, b"pgmux_p%d" % next(self._statement_ids))
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
        if self._closed:
            raise InterfaceError("the client is closed")
        return Session(self._pinned, acquire_timeout=timeout)

    def transaction(self, isolation: str | None = None, readonly: bool = False,
                    deferrable: bool = False, *, timeout: float | None = None) -> Transaction:
        """A transaction on an exclusive connection: COMMIT on success, ROLLBACK on error."""
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
        entry = self._entry
        oids, formats, values = client._encode(params)
        return client._dispatch(
            lambda driver: driver.catalog_unit(entry.name, entry.statement, formats, values),
            timeout)

    def query(self, params: Params = (), *, timeout: float | None = None) -> Result:
        return self._run(params, timeout).result()

    def fetchone(self, params: Params = (), *, timeout: float | None = None) -> Row | None:
        result = self._run(params, timeout).result()
        return result.rows[0] if result.rows else None

    def fetchval(self, params: Params = (), *, timeout: float | None = None) -> Any:
        result = self._run(params, timeout).result()
        return result.rows[0][0] if result.rows else None

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
