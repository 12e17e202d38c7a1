"""A client's metric instruments: the conventions' database client metrics and pgmux's own.

Per-operation and per-connection histograms are recorded as things happen (only while
metrics are on). Everything that is a level or a running count (connections used and idle,
the maximum, pending requests, timeouts, in flight per pipelined connection, reconnects,
rotations, host health, read-your-writes reads) is an observable instrument read from the
client's ``stats()`` when the SDK collects, so it costs nothing between collections and
always agrees with ``db.stats()``. Queries per socket read are sampled once a second per
pipelined connection (``sample``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from pgmux.telemetry import names
from pgmux.telemetry.api import otel_metrics
from pgmux.telemetry.failures import error_attributes


class Measured(Protocol):
    """What an ended operation tells its metrics (``operation.Operation``)."""

    kind: str  # the kind of connection that carried it
    operation: str | None
    summary: str | None
    slot_wait: float


class PoolMetrics:
    """The histograms one pool records into, with that pool's attributes."""

    __slots__ = ("instruments", "attributes")

    def __init__(self, instruments: Instruments, attributes: dict[str, str]):
        self.instruments = instruments
        self.attributes = attributes

    def created(self, seconds: float) -> None:
        self.instruments.create_time.record(seconds, self.attributes)

    def waited(self, seconds: float) -> None:
        self.instruments.wait_time.record(seconds, self.attributes)

    def used(self, seconds: float) -> None:
        self.instruments.use_time.record(seconds, self.attributes)


class Instruments:
    """The instruments of one meter provider, shared by every client measured through it (an
    instrument is made once per name); the observable ones read each client's ``stats()``."""

    def __init__(self, meter: Any):
        self.clients: weakref.WeakSet[ClientMetrics] = weakref.WeakSet()
        histogram = meter.create_histogram
        self.duration = histogram(*names.OPERATION_DURATION,
                                  explicit_bucket_boundaries_advisory=names.DURATION_BUCKETS)
        self.rows = histogram(*names.RETURNED_ROWS,
                              explicit_bucket_boundaries_advisory=names.ROWS_BUCKETS)
        self.create_time, self.wait_time, self.use_time = (
            histogram(*spec, explicit_bucket_boundaries_advisory=names.DURATION_BUCKETS)
            for spec in (names.CREATE_TIME, names.WAIT_TIME, names.USE_TIME))
        self.units_per_readable = histogram(
            *names.UNITS_PER_READABLE, explicit_bucket_boundaries_advisory=names.UNITS_BUCKETS)
        counter = meter.create_observable_counter
        updown = meter.create_observable_up_down_counter
        for make, spec, measure in (
                (updown, names.CONNECTION_COUNT, ClientMetrics.connection_count),
                (updown, names.CONNECTION_MAX, ClientMetrics.connection_max),
                (updown, names.PENDING_REQUESTS, ClientMetrics.pending),
                (counter, names.CONNECTION_TIMEOUTS, ClientMetrics.timeouts),
                (updown, names.IN_FLIGHT, ClientMetrics.in_flight),
                (counter, names.RECONNECTS, ClientMetrics.reconnects),
                (counter, names.ROTATIONS, ClientMetrics.rotations),
                (meter.create_observable_gauge, names.HOST_UP, ClientMetrics.hosts),
                (counter, names.RYW_READS, ClientMetrics.read_your_writes)):
            make(spec[0], [self._callback(measure)], *spec[1:])

    def _callback(self, measure: Callable[[ClientMetrics, dict[str, Any]], Measures],
                  ) -> Callable[[Any], list[Any]]:
        def callback(options: Any) -> list[Any]:
            found = []
            for client in list(self.clients):
                stats = client.stats()
                if stats is not None:
                    found += [otel_metrics.Observation(value, attributes)
                              for value, attributes in measure(client, stats)]
            return found
        return callback


Measures = Iterator[tuple[float, dict[str, Any]]]
_instruments: weakref.WeakKeyDictionary[Any, Instruments] = weakref.WeakKeyDictionary()


def instruments_of(meter_provider: Any) -> Instruments:
    """The instruments on ``meter_provider``'s pgmux meter, made on first use."""
    found = _instruments.get(meter_provider)
    if found is None:
        meter = meter_provider.get_meter(names.INSTRUMENTATION_NAME, names.version())
        found = _instruments[meter_provider] = Instruments(meter)
    return found


class ClientMetrics:
    """What one client records and is observed for, with its pools' attributes."""

    def __init__(self, instruments: Instruments, client: Any,
                 metric_attributes: dict[str, Any], pool_name: str):
        self.instruments = instruments
        self._client = weakref.ref(client)
        self.metric_attributes = metric_attributes
        self.pools = {kind: {names.POOL_NAME: pool_name, names.POOL_KIND: kind}
                      for kind in (names.PIPELINED, names.PINNED)}
        self._last_reads: dict[int, tuple[int, int]] = {}  # driver index -> (units, readables)
        instruments.clients.add(self)

    def stats(self) -> dict[str, Any] | None:
        """The client's stats(); None once it is gone or closed."""
        client = self._client()
        if client is None or client.closed:
            return None
        stats: dict[str, Any] = client.stats()
        return stats

    def pool(self, kind: str) -> PoolMetrics:
        return PoolMetrics(self.instruments, self.pools[kind])

    # -- recorded ----------------------------------------------------------------------------------
    def operation(self, op: Measured, seconds: float, rows: int | None,
                  error: BaseException | None) -> None:
        attributes = dict(self.metric_attributes)
        if op.operation is not None:
            attributes[names.DB_OPERATION_NAME] = op.operation
        if op.summary is not None:
            attributes[names.DB_QUERY_SUMMARY] = op.summary
        if error is not None:
            attributes.update(error_attributes(error))
            attributes.pop(names.OUTCOME, None)
        attributes[names.CONNECTION_KIND] = op.kind
        instruments = self.instruments
        instruments.duration.record(seconds, attributes)
        if rows is not None:
            instruments.rows.record(rows, attributes)
        if op.kind == names.PIPELINED and error is None:
            instruments.wait_time.record(op.slot_wait, self.pools[names.PIPELINED])

    def sample(self) -> None:
        """(Once a second) queries answered per socket read on each pipelined connection
        since the last sample."""
        stats = self.stats()
        if stats is None:
            return
        for driver in stats["pipeline"]["drivers"]:
            index, units, readables = driver["index"], driver["units"], driver["readables"]
            last_units, last_readables = self._last_reads.get(index, (0, 0))
            if readables < last_readables:  # a new connection in that slot
                last_units = last_readables = 0
            self._last_reads[index] = (units, readables)
            if readables > last_readables:
                self.instruments.units_per_readable.record(
                    (units - last_units) / (readables - last_readables),
                    {**self.pools[names.PIPELINED], names.CONNECTION_INDEX: index})

    # -- observed (from stats) ---------------------------------------------------------------------
    def connection_count(self, stats: dict[str, Any]) -> Measures:
        pipeline, pinned = stats["pipeline"], stats["pinned"]
        used = sum(1 for driver in pipeline["drivers"] if driver["load"])
        yield from self._states(names.PIPELINED, used, pipeline["live"] - used)
        opened = stats["counters"]["pinned"]["connections"]
        used = min(pinned["active"], opened)
        yield from self._states(names.PINNED, used, opened - used)

    def _states(self, kind: str, used: int, idle: int) -> Measures:
        pool = self.pools[kind]
        yield used, {**pool, names.CONNECTION_STATE: "used"}
        yield idle, {**pool, names.CONNECTION_STATE: "idle"}

    def connection_max(self, stats: dict[str, Any]) -> Measures:
        yield stats["pipeline"]["size"], self.pools[names.PIPELINED]
        yield stats["pinned"]["size"], self.pools[names.PINNED]

    def pending(self, stats: dict[str, Any]) -> Measures:
        yield stats["counters"]["pipeline"]["waiting"], self.pools[names.PIPELINED]
        yield stats["pinned"]["waiting"], self.pools[names.PINNED]

    def timeouts(self, stats: dict[str, Any]) -> Measures:
        yield stats["counters"]["pipeline"]["timeouts"], self.pools[names.PIPELINED]
        yield stats["counters"]["pinned"]["timeouts"], self.pools[names.PINNED]

    def in_flight(self, stats: dict[str, Any]) -> Measures:
        pool = self.pools[names.PIPELINED]
        for driver in stats["pipeline"]["drivers"]:
            yield driver["in_flight"], {**pool, names.CONNECTION_INDEX: driver["index"]}

    def reconnects(self, stats: dict[str, Any]) -> Measures:
        yield stats["counters"]["pipeline"]["reconnects"], self.pools[names.PIPELINED]
        yield stats["counters"]["pinned"]["reconnects"], self.pools[names.PINNED]

    def rotations(self, stats: dict[str, Any]) -> Measures:
        yield stats["pipeline"]["rotations"], self.pools[names.PIPELINED]

    def hosts(self, stats: dict[str, Any]) -> Measures:
        for host, state in stats["hosts"].items():
            yield (0 if state["down_for"] else 1), {names.HOST: host}

    def read_your_writes(self, stats: dict[str, Any]) -> Measures:
        counts = stats.get("read_your_writes")
        if counts is not None:
            for who in ("standby", "primary"):
                yield counts[who], {**self.pools[names.PIPELINED], names.RYW_ANSWERED_BY: who}
