"""The OpenTelemetry API, if installed, and whether the application configured a provider.

pgmux depends on ``opentelemetry-api`` only (the ``otel`` extra) and never imports the SDK.
Instrumentation is on as soon as the application sets a global tracer or meter provider
(``trace.set_tracer_provider``, ``metrics.set_meter_provider``, or the
``OTEL_PYTHON_*_PROVIDER`` variables), the way native instrumentation works: no pgmux
call. Until then the API hands out proxy objects; asking them for every query would cost,
so pgmux asks once, when a client is made and when it opens its pool, and then once a
second (one loop timer per thread, until both providers are set): a provider set after
the client was made is noticed within a second, and a client with nothing configured pays
nothing per query.
"""

from __future__ import annotations

import weakref
from typing import Any

try:
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import trace as otel_trace
except ImportError:  # the otel extra is not installed: no instrumentation, nothing to check
    otel_metrics = otel_trace = None  # type: ignore[assignment]

AVAILABLE = otel_trace is not None
RECHECK_INTERVAL = 1.0  # seconds between looks for a provider set after the client was made


def _unset_meter_types() -> tuple[type, ...]:
    types: list[type] = [otel_metrics.NoOpMeterProvider]
    try:  # the API's placeholder until a provider is set (it has no public name)
        from opentelemetry.metrics._internal import _ProxyMeterProvider
        types.append(_ProxyMeterProvider)
    except ImportError:  # pragma: no cover - another API version
        pass
    return tuple(types)


_UNSET_TRACER = (otel_trace.ProxyTracerProvider, otel_trace.NoOpTracerProvider) if AVAILABLE \
    else ()
_UNSET_METER = _unset_meter_types() if AVAILABLE else ()


def global_providers() -> tuple[Any, Any]:
    """(tracer provider, meter provider) the application configured, each None if not."""
    if not AVAILABLE:
        return None, None
    tracer = otel_trace.get_tracer_provider()
    meter = otel_metrics.get_meter_provider()
    return (None if isinstance(tracer, _UNSET_TRACER) else tracer,
            None if isinstance(meter, _UNSET_METER) else meter)


class ProviderWatch:
    """Calls each registered client's ``refresh`` when a global provider appears."""

    def __init__(self, loop: Any):
        self._loop = loop
        self._waiting: weakref.WeakSet[Any] = weakref.WeakSet()
        self._timer: Any = None
        self._seen = global_providers()

    def register(self, client: Any) -> None:
        """Look for providers on ``client``'s behalf (its ``refresh_telemetry()`` is called)."""
        if not AVAILABLE or all(p is not None for p in self._seen):
            return
        self._waiting.add(client)
        if self._timer is None:
            self._timer = self._loop.timer(RECHECK_INTERVAL, RECHECK_INTERVAL, ref=False)
            self._timer.start(self.check)

    def check(self) -> None:
        """(In the hub, once a second) tell the waiting clients if a provider appeared."""
        seen = global_providers()
        if seen != self._seen:
            self._seen = seen
            for client in list(self._waiting):
                client.refresh_telemetry()
        if all(p is not None for p in seen) or not self._waiting:
            self.stop()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.close()
            self._timer = None


_watches: weakref.WeakKeyDictionary[Any, ProviderWatch] = weakref.WeakKeyDictionary()


def watch_for(hub: Any) -> ProviderWatch:
    """The provider watch of ``hub``'s thread (one timer however many clients)."""
    watch = _watches.get(hub)
    if watch is None:
        watch = _watches[hub] = ProviderWatch(hub.loop)
    return watch

