"""What one client emits, and when it is switched on.

A client holds ``None`` where an ``Observer`` would be while there is nothing to emit (no
provider configured, ``telemetry=False``, no slow-query log): the one check on the hot path
is that attribute. ``for_client`` makes the observer once a provider is there (given to the
client, or set globally by the application, see ``api``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from pgmux.cache import put_bounded
from pgmux.telemetry import names
from pgmux.telemetry.api import AVAILABLE, global_providers, otel_trace
from pgmux.telemetry.metrics import ClientMetrics, instruments_of
from pgmux.telemetry.operation import Operation, active

TEXTS_LIMIT = 1024  # statements without parameters whose recorded text is kept
MAX_TEXT = 4096  # longer ones are sanitized each time (not kept)


class Settings:
    """A client's telemetry options, as given."""

    __slots__ = ("enabled", "tracer_provider", "meter_provider", "trace_parameters", "slow",
                 "pool_name")

    def __init__(self, enabled: bool = True, tracer_provider: Any = None,
                 meter_provider: Any = None, trace_parameters: bool = False,
                 slow: float | None = None, pool_name: str | None = None):
        self.enabled = enabled
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.trace_parameters = trace_parameters
        self.slow = slow
        self.pool_name = pool_name

    def providers(self) -> tuple[Any, Any]:
        """(tracer provider, meter provider) to use: the client's own, else the global ones."""
        if not self.enabled or not AVAILABLE:
            return None, None
        tracer, meter = self.tracer_provider, self.meter_provider
        if tracer is None or meter is None:
            global_tracer, global_meter = global_providers()
            tracer = tracer if tracer is not None else global_tracer
            meter = meter if meter is not None else global_meter
        return tracer, meter

    @property
    def complete(self) -> bool:
        """Nothing more can switch on later (off, or both providers known)."""
        return not self.enabled or not AVAILABLE or None not in self.providers()


class Observer:
    """A client's tracer, metrics and slow-query threshold, and the attributes of its spans."""

    def __init__(self, settings: Settings, tracer_provider: Any, meter_provider: Any,
                 client: Any, address: tuple[str, int], dbname: str, pool_name: str,
                 sanitize: Callable[[str], str] = str):
        self.settings = settings
        self._sanitize = sanitize
        self._texts: dict[str, str] = {}  # SQL without parameters -> the text recorded
        self.trace_parameters = settings.trace_parameters
        self.slow = settings.slow
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.tracer = (otel_trace.get_tracer(names.INSTRUMENTATION_NAME, names.version(),
                                             tracer_provider=tracer_provider)
                       if tracer_provider is not None else None)
        host, port = address
        self.namespace = dbname
        common: dict[str, Any] = {names.DB_SYSTEM_NAME: names.DB_SYSTEM,
                                  names.DB_NAMESPACE: dbname, names.SERVER_ADDRESS: host}
        if port != names.DEFAULT_PORT:
            common[names.SERVER_PORT] = port
        self.span_attributes = common
        self._sampler: Any = None
        self.instruments = (ClientMetrics(instruments_of(meter_provider), client, dict(common),
                                          pool_name)
                            if meter_provider is not None else None)

    def start_sampling(self, loop: Any) -> None:
        """Sample the pipelined connections' fill once a second (while metrics are on)."""
        if self.instruments is not None and self._sampler is None:
            self._sampler = loop.timer(1.0, 1.0, ref=False)
            self._sampler.start(self.instruments.sample)

    def close(self) -> None:
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None

    def span_name(self, operation: str | None, summary: str | None = None) -> str:
        """``{db.operation.name} {db.namespace}`` when the operation is known, else the
        caller's ``db.query.summary``, else ``postgresql``."""
        if operation:
            return f"{operation} {self.namespace}"
        return summary or names.DB_SYSTEM

    def query_text(self, sql: str, parameterized: bool = False) -> str:
        """What ``db.query.text`` and the slow-query log record of ``sql``: the text as given
        when it has parameters; else with its literals replaced by ``?`` (the conventions
        collect non-parameterized text only sanitized), kept per text."""
        if parameterized:
            return sql
        text = self._texts.get(sql)
        if text is None:
            text = self._sanitize(sql)
            if len(sql) <= MAX_TEXT:
                put_bounded(self._texts, sql, text, TEXTS_LIMIT)
        return text

    def begin(self, sql: str, kind: str, params: Any = (), *, batch: int | None = None,
              operation: str | None = None, exclusive: bool = True, wait: float = 0.0,
              verbatim: bool = False) -> Operation | None:
        """A new operation, or None inside another one (which is told ``kind``); ``wait``:
        seconds waited for the pinned connection it runs on, not yet told to an operation;
        ``sql`` is recorded as ``query_text`` says (as it is if ``verbatim``: already so)."""
        outer = active()
        if outer is not None:
            outer.carried_by(kind)
            if wait:
                outer.waited(wait)
            return None
        if not (params or verbatim):
            sql = self.query_text(sql)
        return Operation(self, sql, kind, params=params, batch=batch, operation=operation,
                         exclusive=exclusive, waited=wait)

    def pool(self, kind: str) -> Any:
        """What the ``kind`` pool records its connection times into (None: no metrics)."""
        return self.instruments.pool(kind) if self.instruments is not None else None


def for_client(settings: Settings, client: Any,
               sanitize: Callable[[str], str] = str) -> Observer | None:
    """The observer of ``client`` (a ``Client``: its ``conninfo``, a view's ``target``), or
    None while there is nothing to emit; ``sanitize``: SQL without parameters -> the text to
    record (its literals replaced).

    ``server.address`` and ``server.port`` are the first host's of the configuration; the
    pools are named ``pool_name`` if given, else ``host:port/dbname``, with ``#2``, ``#3`` ...
    for the next open clients of that name (a with_target view's with ``?target=...``).
    """
    tracer, meter = settings.providers()
    if tracer is None and meter is None and settings.slow is None:
        return None
    info = client.conninfo
    host, port = info.hosts[0], info.ports[0]
    target = getattr(client, "target", None)
    suffix = f"?target={target}" if target else ""
    name = (settings.pool_name + suffix if settings.pool_name is not None
            else _unique_name(client, f"{host}:{port}/{info.dbname}{suffix}"))
    return Observer(settings, tracer, meter, client, (host, port), info.dbname, name, sanitize)


_named: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()  # client -> name
_holders: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()


def _unique_name(client: Any, base: str) -> str:
    """``base``, or ``base#2``, ``#3`` ... when another open client has it (the conventions
    want a pool name unique within the application); a client keeps its name."""
    name = _named.get(client)
    if name is not None:
        return name
    name, number = base, 1
    while (holder := _holders.get(name)) is not None and not holder.closed:
        number += 1
        name = f"{base}#{number}"
    _named[client] = name
    _holders[name] = client
    return name

