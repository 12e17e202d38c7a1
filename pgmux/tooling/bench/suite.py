"""Running the suite: the server, the delay proxies, the worker processes, the extra
measurements.

Theory of operation. The suite owns everything outside the measured processes: it
starts (or connects to) the server and seeds the tables, starts one delay proxy process
per RTT above zero, and for each (RTT, client, connection count) starts a worker process
(``workers``, running ``runner``) that runs its cases in turn and reports each as a JSON
line; in the goal runs a worker per case, each case's clients back to back; in the quick
run a worker per client. A workload with ``own_process`` (memory figures) gets a worker
of its own unless workers are shared.

The cases are the matrix of the options (workloads x greenlets x connections x RTTs x
clients) and/or the goal areas' cases (``goals``), each a (rtt, workload, greenlets,
connections, client) tuple, and gevent's floor (``floor``) whenever anything runs. After
the cases of an RTT come the extra cases: the turn-counted ones (RTT 0) and the http
suites (``http`` and ``psycopg2_http``, their apps booted together, then
``django_http``) through the same delay proxy; after all RTTs, the naive pool sized to
match and the profiles. Then what is not a timed case: the transport
micro-benchmarks (``micro``), instructions counted by callgrind (``instructions``) and
SQLAlchemy's performance examples (``sqla_examples``). ``output`` reports it all.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pgmux.tooling.bench import django_http, http, output, psycopg2_http, report
from pgmux.tooling.bench.delay import DelayLineProcess
from pgmux.tooling.bench.goals.common import find
from pgmux.tooling.bench.goals.hot_path import NAIVE, naive_needed
from pgmux.tooling.bench.profiles import (
    PROFILE_TOP,
    profile_breakdown,
    profile_top,
    profiled_client,
)
from pgmux.tooling.bench.server import Target, open_target, prepare_tables
from pgmux.tooling.bench.workers import (
    TURNS_SECONDS,
    CaseKey,
    Tracker,
    run_worker,
    turn_cases,
    worker_groups,
    worker_plan,
)
from pgmux.tooling.bench.workloads import tables_needed

WORKER_START_SECONDS = 1.0  # estimates, for the time the plan announces
CASE_OVERHEAD_SECONDS = 0.4
HTTP_APP_SECONDS = 4.0  # gunicorn start and stop, the endpoint checks
INSTRUCTION_SECONDS = {"none": 0, "control": 25, "telemetry": 240}
SQLALCHEMY_RUN_SECONDS = 4.0  # one process of one suite, besides its tests
TARGET_GREENLETS, TARGET_RTT_MS = 64, 10.0


@dataclass
class Settings:
    """What to run (filled from the command line and the presets)."""

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
    markdown_path: str | None = None
    profile_path: str | None = None
    profile_clock: str = "wall"
    verify_naive: bool = False
    embedded: str | None = None  # "debian" / "wheel" / None (either)
    command: str = ""
    notes: list[str] = field(default_factory=list)
    cases: list[CaseKey] = field(default_factory=list)  # what to measure, in order
    turn_clients: tuple[str, ...] | None = None  # whose cases are turn-counted (None: all)
    http_rtts: list[float] = field(default_factory=list)  # the http suite's (none: skipped)
    http_apps: list[str] = field(default_factory=list)
    http_seconds: tuple[int, int] | None = None  # wrk's warm-up and window (None: from above)
    django_rtts: list[float] = field(default_factory=list)  # the django_http suite's
    django_apps: list[str] = field(default_factory=list)
    psycopg2_http_rtts: list[float] = field(default_factory=list)  # the drop-in's http suite
    psycopg2_http_endpoints: list[str] | None = None  # its endpoints (None: all)
    rows: dict[str, int] = field(default_factory=dict)  # rows per operation overrides
    profile_workloads: list[str] = field(default_factory=lambda: ["select_int"])
    baseline_path: str | None = None
    goals: bool = False  # judge every goal area
    grouping: str = "client"  # workers: per "client", per "case" (the goal runs), "shared"
    stop_grace: float = 0.5  # seconds a case's greenlets get to finish their operation
    instructions: str = "none"  # callgrind's counts: "none", "control" or "telemetry"
    instruction_sizes: dict[str, int] = field(default_factory=dict)  # operations per segment
    instruction_implementations: tuple[str, ...] = ("compiled", "python")
    sqlalchemy: tuple[int, int] | None = None  # SQLAlchemy's examples: (--num, pairs)


class Suite:
    """One run of the suite: plan, execute, report."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.results: list[dict[str, Any]] = []
        self.http: list[dict[str, Any]] = []
        self.django_http: list[dict[str, Any]] = []
        self.psycopg2_http: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.micro: list[dict[str, Any]] = []
        self.instructions: list[dict[str, Any]] = []
        self.sqlalchemy_examples: list[dict[str, Any]] = []
        self.profiles: list[dict[str, Any]] = []
        self.target: Target | None = None
        self._index = 0
        self.timings: dict[str, float] = {}  # seconds each stage took
        self.load_before = report.machine_info(None)["load_average_1_5_15min"]

    def turn_cases(self) -> list[CaseKey]:
        clients = self.settings.turn_clients
        return [c for c in turn_cases(self.settings.cases) if clients is None or c[4] in clients]

    def case_count(self) -> int:
        s = self.settings
        return (len(s.cases) + len(self.turn_cases())
                + len(s.http_rtts) * len(s.http_apps) * len(http.ENDPOINTS)
                + len(s.psycopg2_http_rtts) * self.dropin_pass().measurements(
                    list(psycopg2_http.APPS))
                + len(s.django_rtts) * len(s.django_apps) * len(django_http.ENDPOINTS))

    def estimate_seconds(self) -> float:
        s = self.settings
        workers = sum(len(worker_groups([c for c in s.cases if c[0] == rtt], s.grouping))
                      for rtt in {c[0] for c in s.cases})
        workers += len({c[4] for c in self.turn_cases()})
        per_case = s.warmup + s.duration + CASE_OVERHEAD_SECONDS
        turns = len(self.turn_cases()) * (s.warmup + min(s.duration, TURNS_SECONDS))
        warmup, seconds = self.http_seconds()
        web = len(s.http_rtts) * len(s.http_apps) * (
            HTTP_APP_SECONDS + len(http.ENDPOINTS) * (warmup + seconds))
        web += len(s.psycopg2_http_rtts) * self.dropin_pass().measurements(
            list(psycopg2_http.APPS)) * (warmup + seconds)
        web += len(s.django_rtts) * len(s.django_apps) * (
            HTTP_APP_SECONDS + len(django_http.ENDPOINTS) * (warmup + seconds))
        micro = {"none": 0, "quick": 3, "full": 12}[s.micro]
        sqla = 0.0 if s.sqlalchemy is None else 4 * s.sqlalchemy[1] * SQLALCHEMY_RUN_SECONDS
        return (workers * WORKER_START_SECONDS + len(s.cases) * per_case + turns + web
                + micro + INSTRUCTION_SECONDS[s.instructions] + sqla + 5)

    def dropin_pass(self) -> http.Pass:
        """The drop-in's http suite, its endpoints those the settings allow."""
        return psycopg2_http.pass_of(self.settings.psycopg2_http_endpoints)

    def http_seconds(self) -> tuple[int, int]:
        """wrk's whole seconds of warm-up and of the measured window."""
        s = self.settings
        return s.http_seconds or http.HttpRun("", [], s.duration, s.warmup).seconds()

    def run(self) -> int:
        s = self.settings
        print(f"pgmux bench: {self.case_count()} cases, about "
              f"{_duration(self.estimate_seconds())}; pgmux implementation: "
              f"{report.machine_info(None)['pgmux_implementation']}", file=sys.stderr)
        timed = bool(s.cases or s.http_rtts or s.psycopg2_http_rtts or s.django_rtts)
        server = timed or s.instructions != "none" or s.sqlalchemy is not None
        started = time.monotonic()
        with open_target(s) if server else contextlib.nullcontext() as target:
            self.target = target
            self.timings["server"] = time.monotonic() - started
            if target is not None and timed:
                self._run_cases(target)
            if s.micro != "none":
                with self._timed("micro-benchmarks"):
                    self._run_micro()
            if target is not None and s.instructions != "none":
                with self._timed("instructions"):
                    self._run_instructions(target)
            if target is not None and s.sqlalchemy is not None:
                with self._timed("SQLAlchemy's examples"):
                    self._run_sqlalchemy(target)
        self.timings["total"] = time.monotonic() - started
        for r in self.results:
            if r["queries"] == 0:
                s.notes.append(f"{r['client']} {r['workload']} ({r['greenlets']} greenlets, "
                               f"{r['rtt_ms']:g} ms) completed nothing in its "
                               f"{r['duration_s']:g} s window")
        output.finish(self)
        return 1 if self.errors or self.failed() else 0

    def failed(self) -> bool:
        """Whether a case ran nothing at all (a client that is broken, not slow: a slow one
        has operations still running when its window closes, or wrk's connections open)."""
        return any(r["queries"] == 0 and not r.get("censored") for r in self.results) or any(
            r["requests"] == 0 and r["errors"]
            for r in self.http + self.psycopg2_http + self.django_http)

    @contextlib.contextmanager
    def _timed(self, stage: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.timings[stage] = self.timings.get(stage, 0.0) + time.monotonic() - started

    # -- end-to-end cases ----------------------------------------------------------------------
    def _run_cases(self, target: Target) -> None:
        s = self.settings
        extra = (len(s.profile_workloads) if s.profile_path else 0) + (1 if s.verify_naive else 0)
        tracker = Tracker(self.case_count() + extra, s.warmup + s.duration)
        try:
            with self._timed("tables"):
                self._prepare(target)
            rtts = ({c[0] for c in s.cases} | set(s.http_rtts) | set(s.psycopg2_http_rtts)
                    | set(s.django_rtts))
            for rtt in dict.fromkeys(sorted(rtts)):
                self._run_rtt(target, rtt, tracker)
            if s.verify_naive:
                self._verify_naive(target, tracker)
            if s.profile_path:
                self._profile(target, tracker)
        finally:
            tracker.close()

    def _prepare(self, target: Target) -> None:
        s = self.settings
        workloads = {c[1] for c in s.cases} | (set(s.profile_workloads) if s.profile_path
                                               else set())
        sets = tables_needed(sorted(workloads))
        if sets:
            prepare_tables(target, sets)
        if s.http_rtts or s.psycopg2_http_rtts or s.django_rtts:
            http.seed_world(target.dsn)

    def _run_rtt(self, target: Target, rtt: float, tracker: Tracker) -> None:
        s = self.settings
        cases = [c for c in s.cases if c[0] == rtt]
        with self._route(target, rtt) as params:
            if params is None:
                return
            with self._timed(f"cases at {rtt:g} ms"):
                for client, found in worker_groups(cases, s.grouping):
                    self._run_plan(worker_plan(s, target, client, rtt, params, found,
                                               self._index), tracker)
                if rtt == 0:
                    self._count_turns(target, tracker)
            self._run_http(target, rtt, params, tracker)
            warmup, seconds = self.http_seconds()
            if rtt in s.django_rtts:
                run = http.HttpRun(target.dsn, s.django_apps, seconds, warmup)
                with self._timed(f"django_http at {rtt:g} ms"):
                    django_http.run_rtt(run, rtt, params, tracker, self.django_http,
                                        self.errors)

    def _run_http(self, target: Target, rtt: float, params: dict[str, Any],
                  tracker: Tracker) -> None:
        """The http suite and the drop-in's (psycopg2_http), their apps booted together."""
        s = self.settings
        passes: list[tuple[http.Pass, list[dict[str, Any]]]] = []
        apps = []
        if rtt in s.http_rtts:
            passes.append((http.PASS, self.http))
            apps += s.http_apps
        if rtt in s.psycopg2_http_rtts:
            passes.append((self.dropin_pass(), self.psycopg2_http))
            apps += list(psycopg2_http.APPS)
        if not passes:
            return
        warmup, seconds = self.http_seconds()
        run = http.HttpRun(target.dsn, list(dict.fromkeys(apps)), seconds, warmup)
        with self._timed(f"http at {rtt:g} ms"):
            http.run_passes(run, rtt, params, tracker, passes, self.errors)

    def _count_turns(self, target: Target, tracker: Tracker) -> None:
        """The turn-counted cases: the same, through a counting proxy (needs a TCP server)."""
        cases = self.turn_cases()
        if not cases:
            return
        if target.upstream is None:
            self.errors.append("round trips not counted: the counting proxy needs a TCP server "
                               "address, not a Unix socket")
            return
        for client, found in worker_groups(cases, self.settings.grouping):
            self._run_plan(worker_plan(self.settings, target, client, 0.0, {}, found,
                                       self._index, count_turns=True), tracker)

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
        rtts = sorted((r for r in s.rtts if r > 0), key=lambda r: r != TARGET_RTT_MS)
        for rtt in rtts:
            mux = find(self.results, "pgmux", "select_int", rtt=rtt)
            naive = [r for r in (find(self.results, name, "select_int", rtt=rtt) for name in NAIVE
                                 if name != "pgmux-pinned") if r and r["qps"]]
            if mux is None or not naive:
                continue
            baseline = max(naive, key=lambda r: r["qps"])  # the strongest naive pool
            needed = math.ceil(naive_needed(mux, baseline))
            greenlets = max(TARGET_GREENLETS, needed)
            with self._route(target, rtt) as params:
                if params is None:
                    continue
                plan = worker_plan(s, target, baseline["client"], rtt, params,
                                   [("select_int", greenlets, needed)], self._index)
                for result in self._run_plan(plan, tracker):
                    result["verify"] = {"matching": "pgmux", "pgmux_qps": mux["qps"]}
            break  # one verification (at 10 ms if measured) is enough

    def _profile(self, target: Target, tracker: Tracker) -> None:
        """pgmux under cProfile, one case per profiled workload, at its measured shape."""
        s = self.settings
        first = os.path.abspath(s.profile_path or "pgmux-bench.prof")
        stem, ext = os.path.splitext(first)
        for index, workload in enumerate(s.profile_workloads):
            path = first if index == 0 else f"{stem}-{workload}{ext or '.prof'}"
            client = profiled_client(workload)
            greenlets, connections = self._profile_shape(workload, client)
            plan = worker_plan(s, target, client, 0.0, {}, [(workload, greenlets, connections)],
                               self._index, profile=path, profile_clock=s.profile_clock)
            results = self._run_plan(plan, tracker)
            if results and os.path.exists(path):
                self.profiles.append(self._profile_entry(workload, path, results[0]))

    def _profile_shape(self, workload: str, client: str) -> tuple[int, int]:
        """(greenlets, connections) of ``client``'s local case of ``workload``, else the
        options'."""
        s = self.settings
        for rtt, name, greenlets, connections, case_client in s.cases:
            if (rtt, name, case_client) == (0.0, workload, client):
                return greenlets, connections
        greenlets = TARGET_GREENLETS if TARGET_GREENLETS in s.greenlets else s.greenlets[0]
        return greenlets, s.connections[0]

    def _profile_entry(self, workload: str, path: str, result: dict[str, Any]) -> dict[str, Any]:
        top = profile_top(path, PROFILE_TOP)
        measured = find(self.results, result["client"], workload, result["greenlets"],
                        connections=result["connections"])
        cpu = measured["cpu_us_per_query"] if measured and self.settings.profile_clock == (
            "cpu") else None
        breakdown = profile_breakdown(path, result["queries"], result["rows_per_op"],
                                      result["unit"], PROFILE_TOP, cpu)
        with open(path + ".txt", "w") as f:
            f.write(breakdown + "\n\n" + top + "\n")
        return {"workload": workload, "client": result["client"], "path": path,
                "text": path + ".txt", "top": top,
                "breakdown": breakdown, "clock": self.settings.profile_clock,
                "greenlets": result["greenlets"], "unit": result["unit"],
                "operations": result["queries"], "qps_under_profiler": result["qps"]}

    # -- what is not a timed case ------------------------------------------------------------------
    def _run_micro(self) -> None:
        from pgmux.tooling.bench.micro import run_micro
        from pgmux.tooling.progress import Progress

        quick = self.settings.micro == "quick"
        with Progress(1.0, "micro") as bar:
            self.micro = run_micro(quick, lambda done, label: bar.update(done, f"micro {label}"))

    def _run_instructions(self, target: Target) -> None:
        from pgmux.tooling.bench import callgrind, instructions
        from pgmux.tooling.progress import Progress

        s = self.settings
        telemetry = s.instructions == "telemetry"
        if telemetry and instructions.missing():
            s.notes.append("telemetry cost not measured: " + ", ".join(instructions.missing()))
            telemetry = False
        if not callgrind.available():
            s.notes.append("instructions not counted: valgrind is not installed (apt-get "
                           "install valgrind); CPU time per operation instead")
        prepare_tables(target, ["tpcb1"])  # (TPC-B units and transactions)
        plan = instructions.plan(telemetry, s.instruction_sizes,
                                 implementations=s.instruction_implementations)
        with Progress(1.0, "instructions") as bar:
            try:
                self.instructions = instructions.measure(
                    target.dsn, plan, s.instruction_sizes,
                    lambda done, total, label: bar.update(done / total, f"instructions {label}"))
            except (RuntimeError, OSError) as exc:
                self.errors.append(f"instructions: {exc}")

    def _run_sqlalchemy(self, target: Target) -> None:
        from pgmux.tooling.bench import sqla_examples
        from pgmux.tooling.progress import Progress

        absent = sqla_examples.missing()
        if absent:
            self.settings.notes.append("SQLAlchemy's examples not run: " + ", ".join(absent)
                                       + " not installed")
            return
        num, pairs = self.settings.sqlalchemy or (0, 0)
        with Progress(1.0, "sqlalchemy") as bar:
            try:
                self.sqlalchemy_examples = sqla_examples.measure(
                    target.dsn, num, pairs,
                    lambda done, total, label: bar.update(done / total, f"sqlalchemy {label}"))
            except Exception as exc:  # the download, the database: say so, judge nothing
                self.sqlalchemy_examples = [{"suite": suite, "test": None, "error": str(exc)}
                                            for suite in sqla_examples.SUITES]


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
