"""Instructions per operation of pgmux's control path, counted by callgrind (``callgrind``).

Wall-clock CPU on a shared 2-core machine moves by 10-20 % between runs; an instruction
count does not. Each measured process runs pgmux in one implementation (compiled or pure
Python) with OpenTelemetry in one configuration:

* ``absent``: the API hidden (as if ``pgmux[otel]`` were not installed);
* ``api``: the API installed, no SDK configured (every user without OpenTelemetry set up);
* ``sdk``: an SDK with a batch span processor and a metric reader exporting nowhere;

and counts, for each workload, N operations and then 3N, the difference divided by 2N
(what a segment costs besides its operations cancels out):

* ``floor``: gevent's park-and-wake round of 64 callers (``floor``), no pgmux at all;
* ``select_int``: ``SELECT $1::int`` multiplexed, 64 greenlets, 4 pipelined connections;
* ``tpcb_unit``: TPC-B (scale 1) as one ``atomic()`` unit, one greenlet, one connection
  (64 concurrent units share round trips as the server's timing lets them, which moves
  the count per unit);
* ``transaction``: three TPC-B statements (UPDATE, SELECT, INSERT) in ``transaction()``,
  one greenlet, one pinned connection;
* ``dbapi_cursor`` and ``psycopg2_cursor`` (compiled only): ``cursor.execute("SELECT %s",
  (i,))`` and ``fetchall()`` in autocommit mode through ``pgmux.dbapi`` and through the
  drop-in ``pgmux.psycopg2``, 64 greenlets with a connection each, on one shared client
  (4 pipelined connections): what the drop-in's psycopg2 layer costs a statement.

A count still moves by up to about 1 % between identical runs (how often a read finds its
reply already there is the server's timing), so lines with a small margin repeat a
configuration and judge the median.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from random import Random
from typing import Any

from pgmux.tooling.bench import callgrind

CONFIGS = ("absent", "api", "sdk")
CURSORS = {"dbapi_cursor": "pgmux.dbapi", "psycopg2_cursor": "pgmux.psycopg2"}  # the module
WORKLOADS = ("floor", "select_int", "tpcb_unit", "transaction", *CURSORS)
COMPILED_ONLY = ("floor", *CURSORS)
SIZES = {"floor": 5000, "select_int": 2000, "tpcb_unit": 400, "transaction": 400,
         "dbapi_cursor": 2000, "psycopg2_cursor": 2000}  # N, then 3N
QUICK_SIZES = {"floor": 640, "select_int": 96, "tpcb_unit": 12, "transaction": 12}
# (--quick leaves the cursors' counts to the full runs: their timed case judges the drop-in)
SMOKE_SIZES = {"floor": 256, "select_int": 64, "tpcb_unit": 16, "transaction": 16,
               "dbapi_cursor": 64, "psycopg2_cursor": 64}
SHAPE = {"floor": (64, 0), "select_int": (64, 4), "tpcb_unit": (1, 1),
         "transaction": (1, 1), "dbapi_cursor": (64, 4),
         "psycopg2_cursor": (64, 4)}  # greenlets, connections
WARM_UP = {"floor": 256, "select_int": 128, "tpcb_unit": 16, "transaction": 16,
           "dbapi_cursor": 128, "psycopg2_cursor": 128}  # operations
# before the count: described and prepared on every connection
TRANSACTION_STATEMENTS = (0, 1, 4)  # of TPC-B's five: UPDATE accounts, SELECT, INSERT history


@dataclass(frozen=True)
class Count:
    """One measured process: an implementation, a configuration, its workloads."""

    implementation: str  # "compiled" or "python"
    config: str
    workloads: tuple[str, ...]


def plan(telemetry: bool, sizes: dict[str, int], repeats: int = 3,
         implementations: Sequence[str] = ("compiled", "python")) -> list[Count]:
    """The processes to run: per implementation, the control path's workloads with the API
    absent; with ``telemetry``, the API absent and without an SDK ``repeats`` times each,
    alternating (a drift of the machine hits both), and the SDK once."""
    out = []
    for impl in implementations:
        every = tuple(w for w in WORKLOADS if w in sizes  # (the floor has no pgmux in it)
                      and (impl == "compiled" or w not in COMPILED_ONLY))
        if not telemetry:
            out.append(Count(impl, "absent", every))
            continue
        judged = tuple(w for w in ("select_int", "tpcb_unit") if w in sizes)
        for repeat in range(repeats):
            out += [Count(impl, "absent", every if repeat == 0 else judged),
                    Count(impl, "api", judged)]
        out.append(Count(impl, "sdk", judged))
    return out


def measure(dsn: str, counts: Sequence[Count], sizes: dict[str, int],
            progress: Callable[[int, int, str], None] | None = None) -> list[dict[str, Any]]:
    """Per implementation, configuration and workload: instructions per operation (the
    median of the runs; CPU us without valgrind), in the order first measured."""
    unit = "instructions" if callgrind.available() else "cpu_us"
    runs: dict[tuple[str, str, str], list[float]] = {}
    for index, count in enumerate(counts):
        if progress is not None:
            progress(index, len(counts), f"{count.implementation} {count.config}")
        env = dict(os.environ)
        env.pop("PGMUX_REQUIRE_COMPILED", None)
        env.pop("PGMUX_PURE_PYTHON", None)
        if count.implementation == "python":
            env["PGMUX_PURE_PYTHON"] = "1"
        plan_text = ",".join(f"{w}={sizes[w]}" for w in count.workloads)
        segments, _ = callgrind.count(command(count.config, plan_text, dsn), env)
        if len(segments) != 2 * len(count.workloads):
            raise RuntimeError(f"expected {2 * len(count.workloads)} segments, got "
                               f"{len(segments)}")
        for i, workload in enumerate(count.workloads):
            low, high = segments[2 * i], segments[2 * i + 1]
            per_op = (high - low) / (2 * sizes[workload]) * (1e6 if unit == "cpu_us" else 1)
            runs.setdefault((count.implementation, count.config, workload), []).append(
                round(per_op, 1))
    if progress is not None:
        progress(len(counts), len(counts), "done")
    return [{"implementation": impl, "config": config, "workload": workload,
             unit: statistics.median(values), "runs": values, "n": sizes[workload],
             "greenlets": SHAPE[workload][0], "connections": SHAPE[workload][1]}
            for (impl, config, workload), values in runs.items()]


def per_operation(found: list[dict[str, Any]], implementation: str, workload: str,
                  config: str = "absent") -> float | None:
    """The instructions per operation measured for that case, if any."""
    for row in found:
        if (row["implementation"], row["config"], row["workload"]) == (
                implementation, config, workload) and "instructions" in row:
            return float(row["instructions"])
    return None


def missing() -> list[str]:
    """What the ``api`` and ``sdk`` configurations need that is not installed."""
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return ["opentelemetry-sdk (pip install 'pgmux[test]')"]
    return []


# -- the measured process ----------------------------------------------------------------------

# The API hidden before anything imports pgmux (as if not installed).
BOOT = ("import sys\n"
        "if sys.argv[1] == 'absent':\n"
        "    sys.modules['opentelemetry'] = None  # any import of it fails\n"
        "from pgmux.tooling.bench.instructions import main\n"
        "sys.exit(main(sys.argv[1:]))\n")


def command(config: str, workloads: str, dsn: str) -> list[str]:
    """The measured process (``workloads``: "select_int=2000,..."; "probe": say what is
    configured, measure nothing)."""
    return [sys.executable, "-c", BOOT, config, workloads, dsn]


def _configure(config: str) -> None:
    """Check the API is hidden (BOOT hid it), leave it alone, or set up an SDK that exports
    nowhere."""
    from pgmux import telemetry

    if config == "absent":
        if telemetry.AVAILABLE:
            raise RuntimeError("the OpenTelemetry API was imported before it could be hidden")
        return
    if config == "api":
        return
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        MetricExporter,
        MetricExportResult,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class NoSpans(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    class NoMetrics(MetricExporter):
        def export(self, metrics_data: Any, timeout_millis: float = 10_000,
                   **kwargs: Any) -> MetricExportResult:
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            pass

    tracer = TracerProvider()
    tracer.add_span_processor(BatchSpanProcessor(NoSpans()))
    trace.set_tracer_provider(tracer)
    reader = PeriodicExportingMetricReader(NoMetrics(), export_interval_millis=1000)
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))


def _operation(workload: str, db: Any) -> Callable[[int], None]:
    """One operation of ``workload`` on ``db`` (its tables set up)."""
    from pgmux.tooling.bench.units import TPCB1, TPCB1_SCALE
    from pgmux.tooling.bench.workloads import tpcb_draw, tpcb_statements

    if workload == "select_int":
        fetchval = db.fetchval

        def select(i: int) -> None:
            fetchval("SELECT $1::int", [i])

        return select
    statements = tpcb_statements(TPCB1)
    draw = tpcb_draw(Random(7), TPCB1_SCALE)
    if workload == "tpcb_unit":
        def unit(i: int) -> None:
            with db.atomic() as unit:
                for sql, values in zip(statements, draw(), strict=True):
                    unit.query(sql, values)

        return unit

    def transaction(i: int) -> None:
        values = draw()
        with db.transaction() as tx:
            for index in TRANSACTION_STATEMENTS:
                tx.query(statements[index], values[index])

    return transaction


def _segments(run: Callable[[int], None], warm_up: int, n: int) -> None:
    """``run(warm_up)`` operations unmeasured, then ``run(n)`` and ``run(3 * n)`` each a
    measured segment."""
    run(warm_up)
    gc.collect()
    gc.freeze()  # a full collection's walk of the start-up's objects is not per operation
    for size in (n, 3 * n):
        callgrind.segment("on")
        started = time.process_time()
        run(size)
        callgrind.segment("dump", time.process_time() - started)
    gc.unfreeze()


def _floor(n: int) -> None:
    from pgmux.tooling.bench.floor import ParkAndWake

    callers = SHAPE["floor"][0]
    _segments(lambda size: ParkAndWake(callers, size).run(), WARM_UP["floor"], n)


def _cursors(workload: str, n: int, dsn: str) -> None:
    """``SELECT %s`` and ``fetchall()`` on a cursor per greenlet, each greenlet with a
    connection of its own (autocommit) through ``CURSORS[workload]``."""
    import importlib

    import gevent

    import pgmux.dbapi

    module = importlib.import_module(CURSORS[workload])
    greenlets = SHAPE[workload][0]
    connections = [module.connect(dsn) for _ in range(greenlets)]
    cursors = []
    for conn in connections:
        conn.autocommit = True
        cursors.append(conn.cursor())

    def run(count: int) -> None:
        def worker(offset: int) -> None:
            cursor = cursors[offset]
            for i in range(offset, count, greenlets):
                cursor.execute("SELECT %s", (i,))
                cursor.fetchall()
        gevent.joinall([gevent.spawn(worker, g) for g in range(greenlets)], raise_error=True)

    _segments(run, WARM_UP[workload], n)
    for conn in connections:
        conn.close()
    pgmux.dbapi.close_shared_clients()


def _loop(workload: str, n: int, dsn: str) -> None:
    import gevent

    import pgmux

    if workload == "floor":
        _floor(n)
        return
    if workload in CURSORS:
        _cursors(workload, n, dsn)
        return

    greenlets, connections = SHAPE[workload]
    pinned = workload == "transaction"
    db = pgmux.Client(dsn, pipeline_size=0 if pinned else connections,
                      pinned_size=connections if pinned else 0, max_in_flight=128)
    if not pinned:
        db.start()
    one = _operation(workload, db)

    def run(count: int) -> None:
        def worker(offset: int) -> None:
            for i in range(offset, count, greenlets):
                one(i)
        gevent.joinall([gevent.spawn(worker, g) for g in range(greenlets)], raise_error=True)

    _segments(run, WARM_UP[workload], n)
    db.close()


def main(argv: list[str]) -> int:
    config, workloads, dsn = argv
    _configure(config)
    if workloads == "probe":
        from pgmux.telemetry import AVAILABLE
        from pgmux.telemetry.api import global_providers

        print(AVAILABLE, [p is not None for p in global_providers()])
        return 0
    import pgmux
    from pgmux.tooling.bench.workloads import setup_tables

    with pgmux.Client(dsn, pipeline_size=1, pinned_size=0, guard="off") as setup:
        setup_tables(setup.execute, setup.fetchval, ["tpcb1"])
    for item in workloads.split(","):
        workload, n = item.split("=")
        _loop(workload, int(n), dsn)
    return 0
