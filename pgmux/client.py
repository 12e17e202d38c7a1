"""The public facade: ``Client`` (its connections, pinned sessions, replica views, telemetry
and stats) and its ``with_target`` views.

What a client runs on the multiplexed path is its bases': ``pgmux.multiplexed`` (single
statements, the one entry they share, prepared handles), ``pgmux.batch`` (fan-outs) and
``pgmux.atomic`` (atomic units).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import weakref
from collections.abc import Callable
from typing import Any

from gevent.hub import get_hub

from pgmux.atomic import Atomic, AtomicUnit
from pgmux.batch import FanOut
from pgmux.engine import Descriptions, Exchange
from pgmux.engine.costs import StatementCosts
from pgmux.errors import InterfaceError
from pgmux.guard import Guard
from pgmux.io.connect import connect
from pgmux.io.conninfo import ConnInfo, make_conninfo
from pgmux.io.hosts import DEFAULT_BACKOFF as DEFAULT_HOST_BACKOFF
from pgmux.io.hosts import HostHealth, Placement
from pgmux.multiplexed import PreparedStatement, hub_of_this_thread
from pgmux.pool import dispatch
from pgmux.pool.counters import PoolCounters
from pgmux.pool.freshness import ReadYourWrites, WalFence, WriteClassifier, wal_position
from pgmux.pool.lazy import LazyPipelinePool
from pgmux.pool.pinned import PinnedPool
from pgmux.pool.router import CatalogEntry, PipelinePool
from pgmux.session import Session, Transaction
from pgmux.sql.scanner import literals_replaced
from pgmux.telemetry import PINNED, PIPELINED, Observer, Settings, for_client, watch_for
from pgmux.types import TypeRegistry, default_registry
from pgmux.types.introspect import TypeInfo, lookup_sql, parse_lookup

__all__ = ["Client", "PreparedStatement", "TargetView", "log_notice"]

log = logging.getLogger("pgmux")

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_REBALANCE_INTERVAL = 10.0  # seconds between checks for a better host
NoticeHandler = Callable[[dict[str, str]], None]


def log_notice(fields: dict[str, str]) -> None:
    """The default notice handler: the ``pgmux`` logger, at the notice's severity."""
    severity = fields.get("V", fields.get("S", "NOTICE"))
    level = logging.WARNING if severity == "WARNING" else logging.INFO
    log.log(level, "server %s: %s", severity, fields.get("M", ""))


class Client(FanOut, Atomic):
    """A process's PostgreSQL client: pipelined connections for independent queries,
    pinned connections for transactions and sessions.

    Safe to use from any number of greenlets at once.
    """

    def __init__(self, dsn: str | ConnInfo | None = None, *,
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
                 pooler: str | None = None,
                 host_backoff: float = DEFAULT_HOST_BACKOFF,
                 rebalance_interval: float | None = DEFAULT_REBALANCE_INTERVAL,
                 host_health: HostHealth | None = None,
                 slow_query_threshold: float = 0.01,
                 telemetry: bool = True, tracer_provider: Any = None, meter_provider: Any = None,
                 trace_parameters: bool = False, log_slow_queries: float | None = None,
                 pool_name: str | None = None, tune_gc: bool = True, **conninfo: Any):
        if pipeline_size < 0 or pinned_size < 0:
            raise InterfaceError("pipeline_size and pinned_size must not be negative")
        if max_in_flight < 1:
            raise InterfaceError("max_in_flight must be at least 1")
        info = _conninfo_for(dsn, connect_timeout, conninfo)
        self.conninfo: ConnInfo = info
        if host_backoff < 0 or (rebalance_interval is not None and rebalance_interval < 0):
            raise InterfaceError("host_backoff and rebalance_interval must not be negative")
        # What every connection of this client (and of its with_target views) learned
        # about the hosts: which are down, which are standbys.
        self.hosts = host_health if host_health is not None else HostHealth(host_backoff)
        # With one host there is nothing to choose: no ranking, no rebalancing.
        self._placement = Placement(self.hosts, info) if len(info.hosts) > 1 else None
        self._rebalance_interval = rebalance_interval
        # Statements that took the server long: kept off the connections fast ones use.
        self._costs = StatementCosts(slow_query_threshold)
        self._max_lifetime = max_lifetime
        self.pipeline_size = pipeline_size
        self.pinned_size = pinned_size
        self.max_in_flight = max_in_flight
        self.acquire_timeout = acquire_timeout
        self.statement_cache_size = statement_cache_size
        self.types = types if types is not None else default_registry.copy()
        if pipeline_size:  # what a transaction's snapshot cannot see is asked here
            self.types.outside = _outside_lookup(weakref.ref(self))
        self.notice_handler: NoticeHandler = notice_handler or log_notice
        self.guard = Guard(guard)
        self._check = None if guard == "off" else self.guard.check
        self._encode = self.types.encode_params
        self._descriptions = Descriptions()  # what each statement returns, for all connections
        self._hub = get_hub()
        self._vetted: dict[str, int] = {}  # SQL the guard passed -> parameters it takes
        open_connection = functools.partial(connect, info, hosts=self.hosts)
        self._pinned = PinnedPool(
            open_connection, self.types, descriptions=self._descriptions, size=pinned_size,
            acquire_timeout=acquire_timeout, statement_cache_size=statement_cache_size,
            on_notice=self._notice,
            idle_in_transaction_timeout=idle_in_transaction_timeout,
            max_lifetime=max_lifetime,
            cancel_grace=cancel_grace,
            reset_timeout=reset_timeout,
            pooler=pooler,
            placement=self._placement,
        )
        # What sits in front of the server: None (nothing known), "session" or "transaction"
        # (statements then go unnamed: nothing of ours may outlive a transaction).
        self.pooler: str | None = pooler
        self._catalog: dict[str, CatalogEntry] = {}
        self._preparing = {}  # names whose prepare() is under way
        self._closed = False
        self._pipelines = LazyPipelinePool(pipeline_size, dict(
            connect=open_connection, registry=self.types,
            max_in_flight=max_in_flight, acquire_timeout=acquire_timeout,
            statement_cache_size=statement_cache_size, descriptions=self._descriptions,
            costs=self._costs, on_notice=self._notice,
            named_statements=pooler != "transaction",
            probe_interval=probe_interval, probe_timeout=probe_timeout,
            max_lifetime=max_lifetime, placement=self._placement,
            rebalance_interval=rebalance_interval, catalog=self._catalog), tune_gc=tune_gc)
        # What a with_target view is made with (besides its target and size).
        self._view_options: dict[str, Any] = dict(
            max_in_flight=max_in_flight, guard=guard, acquire_timeout=acquire_timeout,
            statement_cache_size=statement_cache_size, notice_handler=notice_handler,
            types=self.types, probe_interval=probe_interval, probe_timeout=probe_timeout,
            max_lifetime=max_lifetime, pooler=pooler, rebalance_interval=rebalance_interval,
            slow_query_threshold=slow_query_threshold, telemetry=telemetry,
            tracer_provider=tracer_provider, meter_provider=meter_provider,
            trace_parameters=trace_parameters, log_slow_queries=log_slow_queries,
            pool_name=pool_name, tune_gc=tune_gc)
        self._views: dict[tuple[str, bool, int], TargetView] = {}
        self._fence: WalFence | None = None  # set by the first read_your_writes view
        self._reads: ReadYourWrites | None = None  # a read_your_writes view's routing
        self._writes = WriteClassifier()
        _register_fork_hook(self)
        self._observer: Observer | None = None  # pgmux.telemetry: None while nothing emits
        self._telemetry = Settings(telemetry, tracer_provider, meter_provider,
                                   trace_parameters, log_slow_queries, pool_name)
        self.refresh_telemetry()
        if not self._telemetry.complete:
            watch_for(self._hub).register(self)

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
        self._pipelines.get()
        return self

    def close(self, timeout: float = 5.0) -> None:
        """Finish in-flight work, fail waiting callers, Terminate every connection
        (its with_target views' too)."""
        self._closed = True
        if self._observer is not None:
            self._observer.close()
        for view in list(self._views.values()):
            view.close(timeout)
        if self._fence is not None:
            self._fence.close()
        self._pipelines.close(timeout)
        self._pinned.close()

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called."""
        return self._closed

    @property
    def pooler_detected(self) -> bool | None:
        """Whether the first pinned connection found a pooler in front of the server
        (None until one was opened; always None when ``pooler`` was given)."""
        return self._pinned.pooler_detected

    def _notice(self, fields: dict[str, str]) -> None:
        try:
            self.notice_handler(fields)
        except Exception:
            log.exception("pgmux: the notice handler raised")

    @property
    def _pipeline(self) -> PipelinePool | None:
        """The pipeline pool, if it is open."""
        return self._pipelines.current

    def _after_fork_in_child(self) -> None:
        """Drop every inherited socket without sending on it; reconnect on next use."""
        self._pipelines.abandon_after_fork()
        self._pinned.abandon_after_fork()
        if self._fence is not None:
            self._fence.after_fork()
    # -- pinned path ----------------------------------------------------------------
    def session(self, *, timeout: float | None = None) -> Session:
        """An exclusive connection for session-scoped work, reset when the block exits."""
        self._in_own_thread()
        if self._closed:
            raise InterfaceError("the client is closed")
        self._pinned.check_session_allowed()
        return Session(self._pinned, acquire_timeout=timeout, on_exit=self._after_write_block)

    def pinned_session(self, *, timeout: float | None = None) -> Session:
        """(For adapters that hold a pinned connection across calls, ``pgmux.dbapi``) a
        ``Session`` lent for transactions rather than for session state: allowed behind a
        transaction pooler, and reset on return as a ``transaction()``'s connection is."""
        self._in_own_thread()
        if self._closed:
            raise InterfaceError("the client is closed")
        return Session(self._pinned, acquire_timeout=timeout, session_scoped=False)

    def transaction(self, isolation: str | None = None, readonly: bool = False,
                    deferrable: bool = False, *, timeout: float | None = None) -> Transaction:
        """A transaction on an exclusive connection: COMMIT on success, ROLLBACK on error."""
        if hub_of_this_thread() is not self._hub:
            self._in_own_thread()  # raises
        if self._closed:
            raise InterfaceError("the client is closed")
        return Transaction.on_new_session(
            Session(self._pinned, acquire_timeout=timeout, session_scoped=False),
            isolation=isolation, readonly=readonly, deferrable=deferrable,
            on_commit=None if readonly else self._after_write_block)

    # -- replicas -------------------------------------------------------------------
    def with_target(self, attrs: str, read_your_writes: bool = False, *,
                    pipeline_size: int | None = None) -> TargetView:
        """The multiplexed API over connections to the hosts matching ``attrs``
        (``target_session_attrs``: "prefer-standby", "standby", "any", ...).

        The view shares this client's host health, codecs, guard and prepared statements
        and is closed with it; asking again returns the same view. With
        ``read_your_writes``, a read started after a write through this client returned
        sees that write (see ``pgmux/pool/freshness.py``).
        """
        size = self.pipeline_size if pipeline_size is None else pipeline_size
        if size < 1:
            raise InterfaceError("a with_target view needs pipelined connections: "
                                 "pipeline_size must be at least 1")
        key = (attrs, bool(read_your_writes), size)
        view = self._views.get(key)
        if view is None or view.closed:
            if self._closed:
                raise InterfaceError("the client is closed")
            view = self._views[key] = TargetView(self, attrs, bool(read_your_writes), size)
        return view

    def _enable_fence(self) -> WalFence:
        """The fence read-your-writes views rely on; writes made so far are fenced too."""
        if self.pipeline_size == 0:
            raise InterfaceError("read_your_writes takes the primary's WAL position on the "
                                 "client's pipelined connections: pipeline_size must be > 0")
        if self._fence is None:
            sample = functools.partial(wal_position, self._pipelines, self.acquire_timeout)
            self._fence = WalFence(sample, timeout=self.acquire_timeout)
            self._fence.after_write()
        return self._fence

    # -- observability --------------------------------------------------------------
    def refresh_telemetry(self) -> None:
        """Switch telemetry on as the options and the configured providers say (called when
        a global provider appears, see ``pgmux.telemetry.api``)."""
        if self._closed:
            return
        if self._observer is not None:
            self._observer.close()
        self._observer = observer = for_client(self._telemetry, self, literals_replaced)
        self._pinned.observer = observer
        self._pinned.counters.observer = observer.pool(PINNED) if observer else None
        self._pipelines.set_observer(observer.pool(PIPELINED) if observer else None)

    def stats(self) -> dict[str, Any]:
        """A snapshot of both pools: sizes, each pipelined connection's load, counters,
        prepared statements, reconnects and hosts, as a dict; :doc:`/guide/observability`
        says what each key means."""
        pool = self._pipelines.current
        pipeline = pool.stats() if pool is not None else {
            "size": self.pipeline_size, "live": 0, "rotations": 0, "draining": 0, "drivers": []}
        counters = pool.counter_stats() if pool is not None else {
            "waiting": 0, "reconnects": 0, **PoolCounters().stats(), "requests": 0}
        return {
            "pipeline": pipeline,
            "pinned": self._pinned.stats(),
            "counters": {"pipeline": counters, "pinned": self._pinned.counter_stats()},
            "prepared_statements": len(self._catalog),
            "reconnects": (pool.reconnects if pool is not None else 0)
            + self._pinned.reconnects,
            "hosts": self.hosts.snapshot(),
        }

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("started" if self._pipeline else "idle")
        return f"<pgmux.Client {self.conninfo.describe()} {state}>"


class TargetView(Client):
    """``db.with_target(attrs)``: the multiplexed API (query, fetchone, fetchval, execute,
    prepare, stats) over pipelined connections of its own to the hosts matching ``attrs``.

    It shares its client's host health, codecs, guard and prepared statements. With
    ``read_your_writes`` its reads are routed by the client's WAL fence: a standby that
    has not replayed the latest write that returned is skipped, the client's own
    connections (the primary) answer instead.
    """

    def __init__(self, parent: Client, attrs: str, read_your_writes: bool, pipeline_size: int):
        info = dataclasses.replace(parent.conninfo, target_session_attrs=attrs)
        super().__init__(info, pipeline_size=pipeline_size, pinned_size=0,
                         host_health=parent.hosts, **parent._view_options)
        self.parent = parent
        self.target = attrs
        self._catalog = parent._catalog  # one namespace of prepared statements
        self._preparing = parent._preparing
        self._descriptions = parent._descriptions  # same schema: described once for both
        self._costs = parent._costs  # and the same statements are slow
        self._pipelines.options.update(catalog=self._catalog, descriptions=self._descriptions,
                                       costs=self._costs)
        self._reads = ReadYourWrites(parent._enable_fence()) if read_your_writes else None
        self.refresh_telemetry()  # (its pool is named with its target)

    def _send(self, pool: PipelinePool, build: dispatch.Build, args: tuple[Any, ...],
              timeout: float | None, slow: bool = False, statements: int = 1) -> Exchange:
        reads = self._reads
        if reads is None:
            return dispatch.run(pool, build, args, timeout, slow, statements)
        return reads.dispatch(pool, build, args, timeout, self.parent._pipelines, statements)

    def _fan_out_pool(self, statements: int) -> PipelinePool:
        """The view's pool; for a read_your_writes view, see ``ReadYourWrites.fan_out_pool``."""
        reads = self._reads
        if reads is None:
            return self._pipelines.get()
        return reads.fan_out_pool(self._pipelines.get(), self.parent._pipelines, statements)

    def session(self, *, timeout: float | None = None) -> Session:
        raise InterfaceError("a with_target view has the multiplexed API only: "
                             "use the client's session()")

    def transaction(self, isolation: str | None = None, readonly: bool = False,
                    deferrable: bool = False, *, timeout: float | None = None) -> Transaction:
        raise InterfaceError("a with_target view has the multiplexed API only: "
                             "use the client's transaction()")

    def atomic(self, isolation: str | None = None, read_only: bool = False, retries: int = 0,
               timeout: float | None = None) -> AtomicUnit:
        raise InterfaceError("a with_target view reads: run atomic units on the client "
                             "(its primary)")

    def with_target(self, attrs: str, read_your_writes: bool = False, *,
                    pipeline_size: int | None = None) -> TargetView:
        return self.parent.with_target(attrs, read_your_writes, pipeline_size=pipeline_size)

    def _enable_fence(self) -> WalFence:
        return self.parent._enable_fence()

    def stats(self) -> dict[str, Any]:
        """The client's stats shape, plus ``target`` and, with read_your_writes, the
        ``read_your_writes`` counts (reads answered by a standby or by the primary)."""
        stats = super().stats()
        stats["target"] = self.target
        if self._reads is not None:
            stats["read_your_writes"] = self._reads.stats()
        return stats

    def __repr__(self) -> str:
        return f"<pgmux.TargetView {self.target!r} of {self.parent!r}>"


def _conninfo_for(dsn: str | ConnInfo | None, connect_timeout: float | None,
                  conninfo: dict[str, Any]) -> ConnInfo:
    """The client's ConnInfo: parsed from ``dsn`` and keywords, or given ready-made."""
    if isinstance(dsn, ConnInfo):
        if conninfo:
            raise InterfaceError("pass connection keywords or a ConnInfo, not both")
        info = dsn
        if connect_timeout is not None:
            info = dataclasses.replace(info, connect_timeout=connect_timeout)
    else:
        if connect_timeout is not None:
            conninfo["connect_timeout"] = connect_timeout
        info = make_conninfo(dsn, **conninfo)
    if info.connect_timeout is None:  # neither argument, DSN nor PGCONNECT_TIMEOUT
        info = dataclasses.replace(info, connect_timeout=DEFAULT_CONNECT_TIMEOUT)
    return info


_clients: weakref.WeakSet[Client] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for client in list(_clients):
        client._after_fork_in_child()


def _register_fork_hook(client: Client) -> None:
    if not _clients and not getattr(_register_fork_hook, "installed", False):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _register_fork_hook.installed = True  # type: ignore[attr-defined]
    _clients.add(client)


def _outside_lookup(client: weakref.ref[Client]) -> Callable[[tuple[int, ...], bool],
                                                             list[TypeInfo]]:
    """The registry's lookup of types out of any transaction (``TypeRegistry.outside``):
    a read on the client's multiplexed connections, which sees every committed type. A
    pinned connection in a REPEATABLE READ or SERIALIZABLE transaction needs it for a type
    another session created after its snapshot was taken."""
    def outside(oids: tuple[int, ...], multiranges: bool) -> list[TypeInfo]:
        alive = client()
        if alive is None:
            return []
        return parse_lookup(alive.query(lookup_sql(oids, multiranges)).rows)
    return outside

