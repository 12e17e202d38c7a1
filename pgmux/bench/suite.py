"""Running the suite: the server, the delay proxies, one worker process per client, the output.

Theory of operation. The suite owns everything outside the measured processes:
it starts (or connects to) the server and seeds the tables, starts one delay
proxy process per RTT above zero, and for each (RTT, client, connection count)
starts a worker process (``pgmux.bench.runner``) that runs every (workload,
greenlets) case in turn and reports each as a JSON line. Separate processes keep
the client CPU figures clean (the proxy's and the suite's own work are not
counted), and let the psycopg 3 worker monkey-patch gevent without touching the
others.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pgmux.bench import report
from pgmux.bench.clients import CLIENTS, NAIVE
from pgmux.bench.delay import DelayLineProcess
from pgmux.bench.runner import worker_command
from pgmux.bench.workloads import WORKLOADS, setup_tables

WORKER_START_SECONDS = 1.0  # estimate, for the time the plan announces
CASE_OVERHEAD_SECONDS = 0.6
WORKER_SILENCE_LIMIT = 120.0  # seconds past a case's planned time before giving up on it
EMBEDDED_SETTINGS = {"max_connections": "300"}
PROFILE_TOP = 25


@dataclass
class Settings:
    """What to run (filled from the command line and the --quick / --smoke presets)."""

    dsn: str | None
    clients: list[str]
    workloads: list[str]
    greenlets: list[int]
    connections: list[int]
    rtts: list[float]
    duration: float
    warmup: float
    micro: str  # "none", "quick" or "full"
    json_path: str | None = None
    plot_path: str | None = None
    profile_path: str | None = None
    profile_clock: str = "wall"
    verify_naive: bool = False
    embedded: str | None = None  # "debian" / "wheel" / None (either)
    command: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass
class Target:
    """The server the clients talk to."""

    dsn: str
    upstream: tuple[str, int] | None  # TCP address for the delay proxy
    version: str
    description: str


# -- the server --------------------------------------------------------------------------------


@contextlib.contextmanager
def open_target(settings: Settings) -> Iterator[Target]:
    """The given DSN, or a throwaway embedded server removed on exit."""
    if settings.dsn is not None:
        yield _describe_target(settings.dsn, _upstream_of(settings.dsn), "the given DSN")
        return
    from pgmux.embedded import EmbeddedPostgres, find_postgres_bin

    bin_dir, _ = find_postgres_bin(settings.embedded)
    server = EmbeddedPostgres(bin_dir=bin_dir, settings=EMBEDDED_SETTINGS)
    server.start()
    try:
        yield _describe_target(server.dsn(), ("127.0.0.1", server.port),
                               f"embedded PostgreSQL {server.version} ({bin_dir})")
    finally:
        server.stop()


def _upstream_of(dsn: str) -> tuple[str, int] | None:
    from pgmux.io.conninfo import is_unix_host, make_conninfo

    info = make_conninfo(dsn)
    host = info.hostaddrs[0] if info.hostaddrs and info.hostaddrs[0] else info.hosts[0]
    return None if is_unix_host(host) else (host, info.ports[0])


def _describe_target(dsn: str, upstream: tuple[str, int] | None, description: str) -> Target:
    import pgmux.client

    with pgmux.client.Client(dsn, pipeline_size=1, pinned_size=0,
                             application_name="pgmux-bench-setup") as db:
        version = db.fetchval("SELECT current_setting('server_version')")
    return Target(dsn, upstream, version, description)


def prepare_tables(target: Target) -> bool:
    import pgmux.client

    # DDL and TRUNCATE change no session state; the guard would still refuse them.
    with pgmux.client.Client(target.dsn, pipeline_size=1, pinned_size=0, guard="off",
                             application_name="pgmux-bench-setup") as db:
        return setup_tables(db.execute, db.fetchval)


# -- progress ------------------------------------------------------------------------------------


class Tracker:
    """The progress bar: finished cases plus the elapsed part of the running one."""

    def __init__(self, total_cases: int, case_seconds: float):
        from pgmux.progress import Progress

        self.bar = Progress(total_cases, "bench")
        self.case_seconds = case_seconds
        self.done = 0
        self.started_at: float | None = None
        self.label = ""

    def start(self, label: str) -> None:
        self.started_at = time.monotonic()
        self.label = label
        self.tick()

    def finish_case(self) -> None:
        self.done += 1
        self.started_at = None
        self.tick()

    def tick(self) -> None:
        part = 0.0
        if self.started_at is not None:
            part = min(0.99, (time.monotonic() - self.started_at) / self.case_seconds)
        self.bar.update(self.done + part, f"{self.done}/{int(self.bar.total)} {self.label}")

    def close(self) -> None:
        self.bar.finish()


# -- workers ---------------------------------------------------------------------------------------


def run_worker(plan: dict[str, Any], tracker: Tracker) -> tuple[list[dict], list[str]]:
    """Run one worker process; its results and any error messages."""
    monkey = CLIENTS[plan["client"]].monkey_patch
    labels = {c["index"]: c["label"] for c in plan["cases"]}
    limit = plan["warmup"] + plan["duration"] + WORKER_SILENCE_LIMIT
    results, errors, pending = [], [], set(labels)
    with tempfile.TemporaryFile(mode="w+") as stderr:
        process = subprocess.Popen(worker_command(monkey), stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=stderr, text=True)
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps(plan))
        process.stdin.close()
        heard = time.monotonic()
        while True:
            ready, _, _ = select.select([process.stdout], [], [], 0.1)
            tracker.tick()
            if ready:
                line = process.stdout.readline()
                if not line:
                    break
                heard = time.monotonic()
                _handle_event(line, labels, tracker, results, errors, pending)
            elif time.monotonic() - heard > limit:
                process.kill()
                errors.append(f"{plan['client']}: the worker went silent; killed it")
                break
        process.wait()
        process.stdout.close()
        if pending:
            stderr.seek(0)
            tail = stderr.read()[-1500:].strip()
            for index in sorted(pending):
                errors.append(f"{labels[index]}: no result (worker exit {process.returncode})"
                              + (f"\n{tail}" if tail else ""))
                tracker.finish_case()
    return results, errors


def _handle_event(line: str, labels: dict[int, str], tracker: Tracker, results: list[dict],
                  errors: list[str], pending: set[int]) -> None:
    try:
        event = json.loads(line)
    except ValueError:
        return  # something else printed on stdout
    index = event.get("index")
    kind = event.get("event")
    if kind == "start":
        tracker.start(labels.get(index, ""))
        return
    if kind == "result":
        results.append(event["result"])
    elif kind == "error":
        errors.append(f"{labels.get(index, '?')}: {event['error']}")
    pending.discard(index)
    tracker.finish_case()


def worker_plan(settings: Settings, target: Target, client: str, connections: int, rtt: float,
                params: dict[str, Any], cases: list[tuple[str, int]], first_index: int,
                profile: str | None = None, profile_clock: str = "wall") -> dict[str, Any]:
    return {
        "client": client, "dsn": target.dsn, "params": params, "direct_params": {},
        "connections": connections, "rtt_ms": rtt, "duration": settings.duration,
        "warmup": settings.warmup,
        "cases": [{"index": first_index + i, "workload": workload, "greenlets": greenlets,
                   "profile": profile, "profile_clock": profile_clock,
                   "label": f"{client} {workload} g={greenlets} c={connections} rtt={rtt:g}ms"}
                  for i, (workload, greenlets) in enumerate(cases)],
    }


# -- the suite ---------------------------------------------------------------------------------------


class Suite:
    """One run of the suite: plan, execute, report."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.results: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.micro: list[dict[str, Any]] = []
        self.profile: dict[str, Any] | None = None
        self.target: Target | None = None
        self._index = 0
        self.load_before = report.machine_info(None)["load_average_1_5_15min"]

    def case_count(self) -> int:
        s = self.settings
        return len(s.rtts) * len(s.clients) * len(s.connections) * len(s.workloads) * len(
            s.greenlets)

    def estimate_seconds(self) -> float:
        s = self.settings
        workers = len(s.rtts) * len(s.clients) * len(s.connections)
        per_case = s.warmup + s.duration + CASE_OVERHEAD_SECONDS
        micro = {"none": 0, "quick": 3, "full": 12}[s.micro]
        return workers * WORKER_START_SECONDS + self.case_count() * per_case + micro + 5

    def run(self) -> int:
        s = self.settings
        if s.clients and s.workloads:
            self._run_cases()
        if s.micro != "none":
            self._run_micro()
        self._output()
        return 1 if self.errors or any(r["queries"] == 0 for r in self.results) else 0

    # -- end-to-end cases ----------------------------------------------------------------------
    def _run_cases(self) -> None:
        s = self.settings
        extra = (1 if s.profile_path else 0) + (1 if s.verify_naive else 0)
        tracker = Tracker(self.case_count() + extra, s.warmup + s.duration)
        print(f"pgmux bench: {self.case_count()} cases, about "
              f"{_duration(self.estimate_seconds())}", file=sys.stderr)
        try:
            with open_target(s) as target:
                self.target = target
                if any(WORKLOADS[w].needs_tables for w in s.workloads):
                    prepare_tables(target)
                for rtt in s.rtts:
                    self._run_rtt(target, rtt, tracker)
                if s.verify_naive:
                    self._verify_naive(target, tracker)
                if s.profile_path:
                    self._profile(target, tracker)
        finally:
            tracker.close()

    def _run_rtt(self, target: Target, rtt: float, tracker: Tracker) -> None:
        s = self.settings
        cases = [(w, g) for w in s.workloads for g in s.greenlets]
        with self._route(target, rtt) as params:
            if params is None:
                return
            for client in s.clients:
                for connections in s.connections:
                    self._run_plan(worker_plan(s, target, client, connections, rtt, params,
                                               cases, self._index), tracker)

    def _run_plan(self, plan: dict[str, Any], tracker: Tracker) -> list[dict[str, Any]]:
        self._index += len(plan["cases"])
        results, errors = run_worker(plan, tracker)
        self.results += results
        self.errors += errors
        return results

    @contextlib.contextmanager
    def _route(self, target: Target, rtt: float) -> Iterator[dict[str, Any] | None]:
        """Connection overrides for this RTT: none, or the address of a delay proxy."""
        if rtt <= 0:
            yield {}
            return
        if target.upstream is None:
            self.errors.append(f"RTT {rtt:g} ms skipped: the delay proxy needs a TCP server "
                               "address, not a Unix socket")
            yield None
            return
        with DelayLineProcess(target.upstream, rtt) as proxy:
            yield {"host": proxy.host, "port": proxy.port}

    def _verify_naive(self, target: Target, tracker: Tracker) -> None:
        """Run a naive pool with as many connections as it should need to match pgmux."""
        s = self.settings
        rtts = sorted((r for r in s.rtts if r > 0), key=lambda r: r != report.TARGET_RTT_MS)
        for rtt in rtts:
            mux = report.find_result(self.results, "pgmux", rtt)
            naive = [r for r in (report.find_result(self.results, name, rtt) for name in NAIVE
                                 if name != "pgmux-pinned") if r and r["qps"]]
            if mux is None or not naive:
                continue
            baseline = max(naive, key=lambda r: r["qps"])  # the strongest naive pool
            needed = math.ceil(report.naive_needed(mux, baseline))
            greenlets = max(report.TARGET_GREENLETS, needed)
            with self._route(target, rtt) as params:
                if params is None:
                    continue
                plan = worker_plan(s, target, baseline["client"], needed, rtt, params,
                                   [(report.TARGET_WORKLOAD, greenlets)], self._index)
                for result in self._run_plan(plan, tracker):
                    result["verify"] = {"matching": "pgmux", "pgmux_qps": mux["qps"]}
            break  # one verification (at 10 ms if measured) is enough

    def _profile(self, target: Target, tracker: Tracker) -> None:
        s = self.settings
        path = os.path.abspath(s.profile_path or "pgmux-bench.prof")
        greenlets = (report.TARGET_GREENLETS if report.TARGET_GREENLETS in s.greenlets
                     else s.greenlets[0])
        plan = worker_plan(s, target, "pgmux", s.connections[0], 0.0, {},
                           [(report.TARGET_WORKLOAD, greenlets)], self._index, profile=path,
                           profile_clock=s.profile_clock)
        results = self._run_plan(plan, tracker)
        if results and os.path.exists(path):
            top = profile_top(path, PROFILE_TOP)
            with open(path + ".txt", "w") as f:
                f.write(top)
            self.profile = {"path": path, "text": path + ".txt", "top": top,
                            "clock": s.profile_clock,
                            "qps_under_profiler": results[0]["qps"]}

    # -- micro-benchmarks ---------------------------------------------------------------------------
    def _run_micro(self) -> None:
        from pgmux.bench.micro import run_micro
        from pgmux.progress import Progress

        quick = self.settings.micro == "quick"
        with Progress(1.0, "micro") as bar:
            self.micro = run_micro(quick, lambda done, label: bar.update(done, f"micro {label}"))

    # -- output -------------------------------------------------------------------------------------
    def _output(self) -> None:
        s = self.settings
        targets = report.evaluate_targets(self.results, self.micro)
        if s.json_path:  # files first: a closed stdout must not lose them
            report.write_json(s.json_path, self.document(targets))
        written = self._plot() if s.plot_path and self.results else []
        if self.results:
            print(report.table(report.sort_results(self.results), report.RESULT_COLUMNS))
        if self.micro:
            print("\ntransport micro-benchmarks")
            print(report.table(self.micro, report.MICRO_COLUMNS))
        if self.profile:
            print(f"\ncProfile of pgmux, {report.TARGET_WORKLOAD} (top {PROFILE_TOP} by own "
                  f"{self.profile['clock']} time; {self.profile['qps_under_profiler']:,.0f} q/s "
                  f"under the profiler), saved to {self.profile['path']}:")
            print(self.profile["top"])
        if targets:
            print("\ntargets (issue 5)")
            print(report.format_targets(targets))
        for error in self.errors:
            print(f"error: {error}", file=sys.stderr)
        if s.json_path:
            print(f"\nJSON written to {s.json_path}")
        if written:
            print("plots written to " + ", ".join(written))

    def _plot(self) -> list[str]:
        try:
            return report.plot(self.settings.plot_path or "", self.results)
        except ImportError:
            print("no plot: matplotlib is not installed (pip install 'pgmux[bench]')",
                  file=sys.stderr)
            return []

    def document(self, targets: list[dict[str, Any]]) -> dict[str, Any]:
        s = self.settings
        target = self.target
        return {
            "schema": 1,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": s.command,
            "machine": {**report.machine_info(target.version if target else None),
                        "load_average_at_start": self.load_before},
            "server": target.description if target else None,
            "settings": {"clients": s.clients, "workloads": s.workloads,
                         "greenlets": s.greenlets, "connections": s.connections,
                         "rtt_ms": s.rtts, "duration_s": s.duration, "warmup_s": s.warmup},
            "clients": {name: CLIENTS[name].description for name in s.clients},
            "notes": s.notes,
            "results": report.sort_results(self.results),
            "micro": self.micro,
            "targets": targets,
            "profile": self.profile,
            "errors": self.errors,
        }


def profile_top(path: str, count: int) -> str:
    """The top ``count`` functions of a cProfile dump by own time, as text."""
    import io
    import pstats

    out = io.StringIO()
    stats = pstats.Stats(path, stream=out)
    stats.strip_dirs().sort_stats("tottime").print_stats(count)
    lines = out.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    return "\n".join(line for line in lines[start:] if line.strip())


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
