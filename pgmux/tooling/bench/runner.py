"""Running benchmark cases inside a worker process: greenlets, timing, CPU, connection peaks.

Theory of operation. The suite starts one worker process per (client, RTT). A
worker reads its plan (JSON) on stdin and, for each case, opens a fresh client,
spawns the greenlets, lets them run through the warm-up, then measures a window:
wall time, ``time.process_time()`` of this process only (the server and the delay
proxy are other processes), one latency per completed query, and the peak count
of the case's server connections, sampled from ``pg_stat_activity`` over a
separate direct connection. Each case's result is written to stdout as one JSON
line as soon as it is done, so the suite can show progress.

Queries still running when the window closes enter the latency figures with
their time so far (a lower bound, counted as ``censored``), so a client that
starves some greenlets cannot hide their waits; they do not count as completed.
The figures include the harness's own per-query work (clock reads, list stores,
a random draw), the same for every client.

A workload with ``kinds`` also counts every operation of each kind that completed from
the first to the last (warm-up and the stop's grace included), and the greenlets stopped
in the middle of one (``killed``): what a test balancing a workload's writes against the
server needs.

"Query" here is one operation of the workload: a transaction for ``tpcb``, a
whole result or stream for ``wide``/``wide_stream`` (per-row figures divide by
its rows). Memory: the process's resident set when the client has started, and
its peak during the window (``VmHWM`` after resetting it through
``/proc/self/clear_refs``; else the largest ``VmRSS`` sampled). A case with
``count_turns`` runs its client through a turn-counting proxy in this process
(``pgmux.tooling.bench.turns``): its throughput is not comparable, its round trips are.
"""

from __future__ import annotations

import cProfile
import json
import os
import re
import sys
import time
from collections import Counter, defaultdict
from random import Random
from typing import Any

import gevent

from pgmux._native import implementation
from pgmux.tooling.bench.clients import CLIENTS, Adapter
from pgmux.tooling.bench.procstat import CpuWindow, per_operation
from pgmux.tooling.bench.turns import TurnCountingProxy
from pgmux.tooling.bench.workloads import WORKLOADS

SAMPLE_INTERVAL = 0.1  # seconds between pg_stat_activity samples
STOP_GRACE = 0.5  # seconds the greenlets get to finish their query before being killed
ERROR_PAUSE = 0.01  # a failing greenlet pauses so a broken setup does not spin
CDF_POINTS = 101  # latency quantiles 0%, 1%, ..., 100% kept for plots
SAMPLER_APP = "pgmux-bench-sampler"
COUNT_SQL = "SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1"
PIDS_SQL = "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
MIB = 1024 * 1024


class Memory:
    """This process's resident set (bytes), from /proc/self/status (Linux; else None)."""

    STATUS, CLEAR_REFS = "/proc/self/status", "/proc/self/clear_refs"

    def __init__(self) -> None:
        self.peak_resettable = self._reset_peak()
        self.sampled_peak = 0

    def _field(self, name: str) -> int | None:
        try:
            with open(self.STATUS) as f:
                found = re.search(rf"^{name}:\s+(\d+) kB", f.read(), re.MULTILINE)
        except OSError:
            return None
        return int(found[1]) * 1024 if found else None

    def _reset_peak(self) -> bool:
        try:
            with open(self.CLEAR_REFS, "w") as f:
                f.write("5")  # resets VmHWM to the current VmRSS
        except OSError:
            return False
        return True

    def current(self) -> int | None:
        return self._field("VmRSS")

    def start_window(self) -> None:
        self.peak_resettable = self._reset_peak()
        self.sampled_peak = self.current() or 0

    def sample(self) -> None:
        self.sampled_peak = max(self.sampled_peak, self.current() or 0)

    def peak(self) -> int | None:
        hwm = self._field("VmHWM") if self.peak_resettable else None
        peak = max(hwm or 0, self.sampled_peak)
        return peak or None


class ConnectionSampler:
    """Counts a case's server connections over its own direct connection."""

    def __init__(self, dsn: str | None, params: dict[str, Any]):
        import pgmux.client

        self.db = pgmux.client.Client(dsn, pipeline_size=1, pinned_size=0,
                                      **{**params, "application_name": SAMPLER_APP})

    def count(self, application_name: str) -> int:
        try:
            return int(self.db.fetchval(COUNT_SQL, (application_name,)) or 0)
        except Exception:
            return 0

    def backends(self, application_name: str) -> list[int]:
        """The server process ids of the case's connections (their CPU is readable when the
        server runs on this machine)."""
        try:
            return [row[0] for row in self.db.query(PIDS_SQL, (application_name,))]
        except Exception:
            return []

    def close(self) -> None:
        self.db.close(timeout=1.0)


def summarize(latencies: list[float]) -> dict[str, Any]:
    """Latency percentiles (milliseconds) and a 101-point CDF from seconds."""
    if not latencies:
        return {"latency_ms": {}, "cdf_ms": []}
    ordered = sorted(latencies)
    last = len(ordered) - 1

    def at(q: float) -> float:
        return round(ordered[min(last, int(q * last + 0.5))] * 1000.0, 4)

    figures = {"p50": at(0.50), "p95": at(0.95), "p99": at(0.99), "p999": at(0.999),
               "max": round(ordered[-1] * 1000.0, 4),
               "mean": round(sum(ordered) / len(ordered) * 1000.0, 4)}
    cdf = [at(i / (CDF_POINTS - 1)) for i in range(CDF_POINTS)]
    return {"latency_ms": figures, "cdf_ms": cdf}


class Case:
    """One measured run: a client, a workload, a number of greenlets."""

    def __init__(self, plan: dict[str, Any], case: dict[str, Any], sampler: ConnectionSampler):
        self.plan = plan
        self.case = case
        self.sampler = sampler
        self.adapter_class: type[Adapter] = CLIENTS[plan["client"]]
        self.workload = WORKLOADS[case["workload"]]
        self.rows = plan.get("rows", {}).get(self.workload.name, self.workload.rows)
        self.duration = case.get("duration", plan["duration"])
        self.connections: int = case.get("connections", plan["connections"])
        self.app_name = f"pgmux-bench-{os.getpid()}-{case['index']}"
        self.latencies: list[float] = []
        self.by_kind: defaultdict[str, list[float]] | None = (
            defaultdict(list) if self.workload.kinds else None)
        self.completed: Counter[str] = Counter()  # by kind, warm-up and stop included
        self.killed = 0  # greenlets still in an operation when the case stopped
        self.memory = Memory()
        self.rss_base: int | None = None
        self.proxy: TurnCountingProxy | None = None
        self.running: list[float | None] = [None] * case["greenlets"]  # start of each one's query
        self.censored: list[float] = []  # queries still running when the window closed
        self.recording = False
        self.stopping = False
        self.errors = 0
        self.first_error: str | None = None

    def _loop(self, adapter: Adapter, slot: int, seed: int) -> None:
        op = self.workload.build(adapter, Random(seed), self.rows)
        record = self.latencies.append
        by_kind = self.by_kind
        completed = self.completed
        clock = time.perf_counter
        running = self.running
        while not self.stopping:
            running[slot] = started = clock()
            try:
                kind = op()
            except Exception as exc:
                running[slot] = None
                self._failed(exc)
                continue
            running[slot] = None
            if by_kind is not None:
                completed[kind] += 1
            if self.recording:
                elapsed = clock() - started
                record(elapsed)
                if by_kind is not None:
                    by_kind[kind].append(elapsed)

    def _failed(self, exc: Exception) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = f"{type(exc).__name__}: {exc}"[:300]
        gevent.sleep(ERROR_PAUSE)

    def run(self) -> dict[str, Any]:
        plan = self.plan
        params = {**plan["params"], "application_name": self.app_name}
        if self.case.get("count_turns"):
            proxy = self.proxy = TurnCountingProxy(tuple(plan["upstream"]))
            proxy.start()
            params.update(host=proxy.address[0], port=proxy.port)
        adapter = self.adapter_class(plan["dsn"], self.connections, params,
                                     pinned=self.workload.pinned)
        greenlets: list[gevent.Greenlet] = []
        try:
            adapter.start()
            self.rss_base = self.memory.current()
            greenlets = [gevent.spawn(self._loop, adapter, i, self.case["index"] * 100_003 + i)
                         for i in range(self.case["greenlets"])]
            gevent.sleep(plan["warmup"])
            window = self._measure(adapter)
        finally:
            self._stop(greenlets)
            try:
                adapter.close()
            except Exception:
                pass
            if self.proxy is not None:
                self.proxy.stop()
        return self._result(window)

    def _measure(self, adapter: Adapter) -> dict[str, Any]:
        profiler = _profiler(self.case.get("profile_clock")) if self.case.get("profile") else None
        fill_before = adapter.fill()
        peak = self.sampler.count(self.app_name)
        turns_before = self.proxy.counts.snapshot() if self.proxy is not None else None
        server = CpuWindow(self.sampler.backends(self.app_name)).start()
        self.memory.start_window()
        self.recording = True
        times0 = os.times()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        if profiler is not None:
            profiler.enable()
        deadline = wall0 + self.duration
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            gevent.sleep(min(SAMPLE_INTERVAL, left))
            peak = max(peak, self.sampler.count(self.app_name))
            self.memory.sample()
        self.recording = False
        cpu1, wall1 = time.process_time(), time.perf_counter()
        times1 = os.times()
        turns = (self.proxy.counts.since(turns_before)
                 if self.proxy is not None and turns_before is not None else None)
        server_cpu = server.stop()
        self.censored = [wall1 - started for started in self.running if started is not None]
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(self.case["profile"])
        fill_after = adapter.fill()
        return {"wall": wall1 - wall0, "cpu": cpu1 - cpu0, "peak": peak,
                "user": times1.user - times0.user, "system": times1.system - times0.system,
                "fill": _fill_delta(fill_before, fill_after), "turns": turns,
                "rss_peak": self.memory.peak(), "server_cpu": server_cpu}

    def _stop(self, greenlets: list[gevent.Greenlet]) -> None:
        self.stopping = True
        self.recording = False
        gevent.joinall(greenlets, timeout=self.plan.get("stop_grace", STOP_GRACE))
        alive = [g for g in greenlets if not g.dead]
        self.killed = len(alive)
        gevent.killall(alive, block=True, timeout=5.0)

    def _result(self, window: dict[str, Any]) -> dict[str, Any]:
        count = len(self.latencies)
        wall = window["wall"]
        return {
            "client": self.plan["client"],
            "pgmux_implementation": implementation,  # this worker's (pgmux._native)
            "workload": self.workload.name,
            "unit": self.workload.unit,
            "rows_per_op": self.rows,
            "greenlets": self.case["greenlets"],
            "connections": self.connections,
            "rtt_ms": self.plan["rtt_ms"],
            "duration_s": round(wall, 3),
            "queries": count,
            "qps": round(count / wall, 1) if wall > 0 else 0.0,
            "cpu_us_per_query": per_operation(window["cpu"], count),
            "cpu_user_us_per_query": per_operation(window["user"], count),
            "cpu_system_us_per_query": per_operation(window["system"], count),
            "server_cpu_us_per_query": per_operation(window["server_cpu"], count),
            "peak_server_connections": window["peak"],
            "errors": self.errors,
            "first_error": self.first_error,
            "fill": window["fill"],
            "profiled": bool(self.case.get("profile")),
            "turns_counted": window["turns"] is not None,
            "censored": len(self.censored),
            **summarize(self.latencies + self.censored),
            **_rows_figures(count, self.rows, wall, window["cpu"]),
            **_turn_figures(window["turns"], count),
            **self._memory_figures(window["rss_peak"]),
            **self._kind_figures(),
        }

    def _memory_figures(self, peak: int | None) -> dict[str, Any]:
        base = self.rss_base
        return {"rss_base_mib": None if base is None else round(base / MIB, 1),
                "rss_peak_mib": None if peak is None else round(peak / MIB, 1),
                "rss_growth_mib": None if base is None or peak is None
                else round(max(0, peak - base) / MIB, 1)}

    def _kind_figures(self) -> dict[str, Any]:
        if self.by_kind is None:
            return {}
        by_kind = self.by_kind
        return {"killed": self.killed, "kinds": {
            kind: {"queries": len(by_kind[kind]), "completed": self.completed[kind],
                   "latency_ms": summarize(by_kind[kind])["latency_ms"]}
            for kind in sorted(by_kind.keys() | self.completed.keys())}}


def _rows_figures(count: int, rows: int, wall: float, cpu: float) -> dict[str, Any]:
    if rows <= 1:
        return {}
    return {"rows_per_s": round(count * rows / wall, 1) if wall > 0 else 0.0,
            "cpu_us_per_row": round(cpu / (count * rows) * 1e6, 3) if count else None}


def _turn_figures(turns: Any, count: int) -> dict[str, Any]:
    if turns is None:
        return {}

    def per(value: int) -> float | None:
        return round(value / count, 2) if count else None

    return {"turns_per_query": per(turns.turns), "bytes_out_per_query": per(turns.bytes_out),
            "bytes_in_per_query": per(turns.bytes_in)}


def _profiler(clock: str | None) -> cProfile.Profile:
    """cProfile with its own (wall) timer, or with ``process_time`` (``clock="cpu"``).

    The wall timer is cheap, but charges a syscall with the time the process was
    descheduled in it (on a busy 2-core box, a send that wakes the server often is);
    the CPU timer excludes that but costs a syscall per event, inflating small functions.
    """
    return cProfile.Profile(time.process_time) if clock == "cpu" else cProfile.Profile()


def _fill_delta(before: dict[str, float] | None,
                after: dict[str, float] | None) -> dict[str, float | None] | None:
    if before is None or after is None:
        return None
    units = after["units"] - before["units"]
    readables = after["readables"] - before["readables"]
    flushes = after["flush_calls"] - before["flush_calls"]
    return {
        "units_per_readable": round(units / readables, 2) if readables else None,
        "flush_calls_per_unit": round(flushes / units, 3) if units else None,
    }


def run_plan(plan: dict[str, Any], emit: Any) -> None:
    """Run every case of ``plan`` in order; ``emit(dict)`` each event."""
    sampler = ConnectionSampler(plan["dsn"], plan["direct_params"])
    try:
        for case in plan["cases"]:
            emit({"event": "start", "index": case["index"]})
            started = time.monotonic()
            try:
                result = (CLIENTS[plan["client"]].case_runner or Case)(plan, case, sampler).run()
                result["case_seconds"] = round(time.monotonic() - started, 2)  # all of it
            except Exception as exc:
                emit({"event": "error", "index": case["index"],
                      "error": f"{type(exc).__name__}: {exc}"[:500]})
                continue
            emit({"event": "result", "index": case["index"], "result": result})
    finally:
        sampler.close()


def worker_main() -> int:
    """Entry point of a worker process: the plan on stdin, JSON lines on stdout."""
    plan = json.loads(sys.stdin.read())
    out = sys.stdout

    def emit(event: dict[str, Any]) -> None:
        out.write(json.dumps(event) + "\n")
        out.flush()

    run_plan(plan, emit)
    return 0


# The command that starts a worker; argv[1] == "1" monkey-patches before anything else.
WORKER_BOOT = (
    "import sys\n"
    "if sys.argv[1] == '1':\n"
    "    from gevent import monkey; monkey.patch_all()\n"
    "from pgmux.tooling.bench.runner import worker_main\n"
    "sys.exit(worker_main())\n"
)


def worker_command(monkey_patch: bool) -> list[str]:
    return [sys.executable, "-c", WORKER_BOOT, "1" if monkey_patch else "0"]
