"""Running the suite: the server, the delay proxies, one worker process per client, the output.

Theory of operation. The suite owns everything outside the measured processes:
it starts (or connects to) the server and seeds the tables, starts one delay
proxy process per RTT above zero, and for each (RTT, client, connection count)
starts a worker process (``pgmux.tooling.bench.runner``) that runs every (workload,
greenlets) case in turn and reports each as a JSON line. Separate processes keep
the client CPU figures clean (the proxy's and the suite's own work are not
counted), and let the psycopg 3 worker monkey-patch gevent without touching the
others. A workload with ``own_process`` (memory figures) gets a worker of its own.

The cases are the matrix of the options (workloads x greenlets x connections x
RTTs x clients) and/or issue 14's goal cases (``pgmux.tooling.bench.goals``), each a
(rtt, workload, greenlets, connections, client) tuple. After the cases of an RTT
come the extra cases: the turn-counted ones (RTT 0) and the http suite
(``pgmux.tooling.bench.http``) through the same delay proxy; after all RTTs, the naive
pool sized to match and the profiles.
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

from pgmux.tooling.bench import django_http, goals, hot_goals, http, orm_goals, report, unit_goals
from pgmux.tooling.bench.clients import CLIENTS, NAIVE
from pgmux.tooling.bench.delay import DelayLineProcess
from pgmux.tooling.bench.runner import worker_command
from pgmux.tooling.bench.workloads import WORKLOADS, setup_tables, tables_needed

WORKER_START_SECONDS = 1.0  # estimate, for the time the plan announces
CASE_OVERHEAD_SECONDS = 0.6
HTTP_APP_SECONDS = 4.0  # gunicorn start and stop, the endpoint checks
WORKER_SILENCE_LIMIT = 120.0  # seconds past a case's planned time before giving up on it
TURNS_SECONDS = 2.0  # measured seconds of a turn-counted case, at most
EMBEDDED_SETTINGS = {"max_connections": "300"}
PROFILE_TOP = 25
PROFILE_FILES = 15

CaseKey = tuple[float, str, int, int, str]  # (rtt, workload, greenlets, connections, client)


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
    cases: list[CaseKey] = field(default_factory=list)  # what to measure, in order
    http_rtts: list[float] = field(default_factory=list)  # the http suite's (none: skipped)
    http_apps: list[str] = field(default_factory=list)
    django_rtts: list[float] = field(default_factory=list)  # the django_http suite's
    django_apps: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)  # rows per operation overrides
    profile_workloads: list[str] = field(default_factory=lambda: ["select_int"])
    baseline_path: str | None = None
    goals: bool = False  # judge issue 14's goals
    interleave: bool = False  # a worker per case, peers back to back (the goal-only runs)
    telemetry_cost: bool = False  # issue 28's instruction counts (telemetry_cost.py)
    smoke: bool = False  # the CI preset (tiny counts)


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
    from pgmux.tooling.embedded import EmbeddedPostgres, find_postgres_bin

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


def prepare_tables(target: Target, sets: list[str]) -> list[str]:
    import pgmux.client

    # DDL and TRUNCATE change no session state; the guard would still refuse them.
    with pgmux.client.Client(target.dsn, pipeline_size=1, pinned_size=0, guard="off",
                             application_name="pgmux-bench-setup") as db:
        return setup_tables(db.execute, db.fetchval, sets)


# -- progress ------------------------------------------------------------------------------------


class Tracker:
    """The progress bar: finished cases plus the elapsed part of the running one."""

    def __init__(self, total_cases: int, case_seconds: float):
        from pgmux.tooling.progress import Progress

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
    adapter = CLIENTS[plan["client"]]
    labels = {c["index"]: c["label"] for c in plan["cases"]}
    limit = plan["warmup"] + plan["duration"] + WORKER_SILENCE_LIMIT
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    pending = set(labels)
    with tempfile.TemporaryFile(mode="w+") as stderr:
        process = subprocess.Popen(worker_command(adapter.monkey_patch), stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=stderr, text=True,
                                   env={**os.environ, **adapter.worker_environment()},
                                   cwd=adapter.worker_directory())
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps({**plan, "client": adapter.runs_as or plan["client"]}))
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
                _handle_event(line, plan["client"], labels, tracker, results, errors, pending)
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


def _handle_event(line: str, client: str, labels: dict[int, str], tracker: Tracker,
                  results: list[dict], errors: list[str], pending: set[int]) -> None:
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
        results.append({**event["result"], "client": client})
    elif kind == "error":
        errors.append(f"{labels.get(index, '?')}: {event['error']}")
    pending.discard(index)
    tracker.finish_case()


def worker_plan(settings: Settings, target: Target, client: str, connections: int, rtt: float,
                params: dict[str, Any], cases: list[tuple[str, int]], first_index: int,
                profile: str | None = None, profile_clock: str = "wall",
                count_turns: bool = False) -> dict[str, Any]:
    extra = {"count_turns": True, "duration": min(settings.duration, TURNS_SECONDS)} if (
        count_turns) else {}
    mark = " (turns counted)" if count_turns else ""
    return {
        "client": client, "dsn": target.dsn, "params": params, "direct_params": {},
        "connections": connections, "rtt_ms": rtt, "duration": settings.duration,
        "warmup": settings.warmup, "rows": settings.rows, "upstream": target.upstream,
        "cases": [{"index": first_index + i, "workload": workload, "greenlets": greenlets,
                   "profile": profile, "profile_clock": profile_clock, **extra,
                   "label": f"{client} {workload} g={greenlets} c={connections} "
                            f"rtt={rtt:g}ms{mark}"}
                  for i, (workload, greenlets) in enumerate(cases)],
    }


def worker_groups(cases: list[CaseKey], interleave: bool = False,
                  ) -> list[tuple[str, int, list[tuple[str, int]]]]:
    """The cases of one RTT as worker plans: (client, connections, [(workload, greenlets)]).

    Grouped by client (one worker runs all of a client's cases; a workload with
    ``own_process`` gets a plan of its own), or with ``interleave`` one plan per case in
    the order given: the goal cases list each case's clients one after another, so a
    burst of load from elsewhere falls on the peers alike rather than on one client.
    """
    groups: dict[tuple[str, int, Any], list[tuple[str, int]]] = {}
    for index, (_, workload, greenlets, connections, client) in enumerate(cases):
        alone = index if interleave else workload if WORKLOADS[workload].own_process else ""
        groups.setdefault((client, connections, alone), []).append((workload, greenlets))
    return [(client, connections, found)
            for (client, connections, _), found in groups.items()]


def turn_cases(cases: list[CaseKey]) -> list[CaseKey]:
    """The cases that also run through the turn-counting proxy (RTT 0 only)."""
    return [c for c in cases if c[0] == 0 and WORKLOADS[c[1]].count_turns]


# -- the suite ---------------------------------------------------------------------------------------


class Suite:
    """One run of the suite: plan, execute, report."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.results: list[dict[str, Any]] = []
        self.http: list[dict[str, Any]] = []
        self.django_http: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.micro: list[dict[str, Any]] = []
        self.telemetry: list[dict[str, Any]] = []  # issue 28's cost, per case
        self.profiles: list[dict[str, Any]] = []
        self.target: Target | None = None
        self._index = 0
        self.load_before = report.machine_info(None)["load_average_1_5_15min"]

    def case_count(self) -> int:
        s = self.settings
        return (len(s.cases) + len(turn_cases(s.cases))
                + len(s.http_rtts) * len(s.http_apps) * len(http.ENDPOINTS)
                + len(s.django_rtts) * len(s.django_apps) * len(django_http.ENDPOINTS))

    def estimate_seconds(self) -> float:
        s = self.settings
        rtts = {c[0] for c in s.cases}
        workers = sum(len(worker_groups([c for c in s.cases if c[0] == rtt], s.interleave))
                      for rtt in rtts)
        workers += len({c[4] for c in turn_cases(s.cases)})
        per_case = s.warmup + s.duration + CASE_OVERHEAD_SECONDS
        turns = len(turn_cases(s.cases)) * (s.warmup + min(s.duration, TURNS_SECONDS))
        warmup, seconds = http.HttpRun("", [], s.duration, s.warmup).seconds()
        web = len(s.http_rtts) * len(s.http_apps) * (
            HTTP_APP_SECONDS + len(http.ENDPOINTS) * (warmup + seconds))
        web += len(s.django_rtts) * len(s.django_apps) * (
            HTTP_APP_SECONDS + len(django_http.ENDPOINTS) * (warmup + seconds))
        micro = {"none": 0, "quick": 3, "full": 12}[s.micro]
        return (workers * WORKER_START_SECONDS + len(s.cases) * per_case + turns + web
                + micro + 5)

    def run(self) -> int:
        s = self.settings
        if s.cases or s.http_rtts or s.django_rtts:
            self._run_cases()
        if s.micro != "none":
            self._run_micro()
        if s.telemetry_cost:
            self._run_telemetry_cost()
        self._output()
        failed = any(r["queries"] == 0 for r in self.results) or any(
            r["requests"] == 0 for r in self.http + self.django_http)
        return 1 if self.errors or failed else 0

    # -- end-to-end cases ----------------------------------------------------------------------
    def _run_cases(self) -> None:
        s = self.settings
        extra = (len(s.profile_workloads) if s.profile_path else 0) + (1 if s.verify_naive else 0)
        tracker = Tracker(self.case_count() + extra, s.warmup + s.duration)
        print(f"pgmux bench: {self.case_count()} cases, about "
              f"{_duration(self.estimate_seconds())}; pgmux implementation: "
              f"{report.machine_info(None)['pgmux_implementation']}", file=sys.stderr)
        try:
            with open_target(s) as target:
                self.target = target
                self._prepare(target)
                rtts = {c[0] for c in s.cases} | set(s.http_rtts) | set(s.django_rtts)
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
        if s.http_rtts or s.django_rtts:
            http.seed_world(target.dsn)

    def _run_rtt(self, target: Target, rtt: float, tracker: Tracker) -> None:
        s = self.settings
        cases = [c for c in s.cases if c[0] == rtt]
        with self._route(target, rtt) as params:
            if params is None:
                return
            for client, connections, found in worker_groups(cases, s.interleave):
                self._run_plan(worker_plan(s, target, client, connections, rtt, params,
                                           found, self._index), tracker)
            self._count_turns(target, turn_cases(cases), tracker)
            if rtt in s.http_rtts:
                run = http.HttpRun(target.dsn, s.http_apps, s.duration, s.warmup)
                http.run_rtt(run, rtt, params, tracker, self.http, self.errors)
            if rtt in s.django_rtts:
                run = http.HttpRun(target.dsn, s.django_apps, s.duration, s.warmup)
                django_http.run_rtt(run, rtt, params, tracker, self.django_http, self.errors)

    def _count_turns(self, target: Target, cases: list[CaseKey], tracker: Tracker) -> None:
        """The turn-counted cases: the same, through a counting proxy (needs a TCP server)."""
        if not cases:
            return
        if target.upstream is None:
            self.errors.append("round trips not counted: the counting proxy needs a TCP server "
                               "address, not a Unix socket")
            return
        for client, connections, found in worker_groups(cases, self.settings.interleave):
            self._run_plan(worker_plan(self.settings, target, client, connections, 0.0, {},
                                       found, self._index, count_turns=True), tracker)

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
        """pgmux under cProfile, one case per profiled workload, at its measured shape."""
        s = self.settings
        first = os.path.abspath(s.profile_path or "pgmux-bench.prof")
        stem, ext = os.path.splitext(first)
        for index, workload in enumerate(s.profile_workloads):
            path = first if index == 0 else f"{stem}-{workload}{ext or '.prof'}"
            client = profiled_client(workload)
            greenlets, connections = self._profile_shape(workload, client)
            plan = worker_plan(s, target, client, connections, 0.0, {}, [(workload, greenlets)],
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
        greenlets = (report.TARGET_GREENLETS if report.TARGET_GREENLETS in s.greenlets
                     else s.greenlets[0])
        return greenlets, s.connections[0]

    def _profile_entry(self, workload: str, path: str, result: dict[str, Any]) -> dict[str, Any]:
        top = profile_top(path, PROFILE_TOP)
        measured = report.find_result(self.results, result["client"], 0.0,
                                      result["connections"], result["greenlets"], workload)
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

    # -- issue 28: what telemetry costs ----------------------------------------------------------
    def _run_telemetry_cost(self) -> None:
        from pgmux.tooling.bench import telemetry_cost
        from pgmux.tooling.progress import Progress

        missing = telemetry_cost.available()
        if missing:
            self.settings.notes.append("telemetry cost not measured: " + ", ".join(missing))
            return
        with open_target(self.settings) as target, Progress(1.0, "telemetry") as bar:
            prepare_tables(target, ["tpcb1"])  # (TPC-B units)
            self.telemetry = telemetry_cost.measure(
                target.dsn, self.settings.smoke,
                lambda done, total, label: bar.update(done / total, f"telemetry {label}"))

    # -- micro-benchmarks ---------------------------------------------------------------------------
    def _run_micro(self) -> None:
        from pgmux.tooling.bench.micro import run_micro
        from pgmux.tooling.progress import Progress

        quick = self.settings.micro == "quick"
        with Progress(1.0, "micro") as bar:
            self.micro = run_micro(quick, lambda done, label: bar.update(done, f"micro {label}"))

    # -- output -------------------------------------------------------------------------------------
    def _output(self) -> None:
        s = self.settings
        targets = report.evaluate_targets(self.results, self.micro)
        judged = self._goals()
        units = unit_goals.judge(s.goals, self.results, self.http)
        baseline = goals.load_baseline(s.baseline_path)
        orm = orm_goals.judge(s.goals, self.results, baseline)
        hot = hot_goals.judge(s.goals, self.results, self.http, baseline)
        if s.json_path:  # files first: a closed stdout must not lose them
            report.write_json(s.json_path, self.document(targets, judged, units, orm, hot))
        written = self._plot() if s.plot_path and (
            self.results or self.http or self.django_http) else []
        self._print_figures()
        if targets:
            print("\ntargets (issue 5)")
            print(report.format_targets(targets))
        if judged:
            print("\ngoals (issues 14 and 21)")
            print(report.format_targets(judged))
        if units:
            print("\ngoals (issue 19: atomic units)")
            print(report.format_targets(units))
        if orm:
            print("\ngoals (issue 26: ORM transactions, multiplexed until they must pin)")
            print(report.format_targets(orm))
        scaling = hot_goals.scaling_table(self.results)
        if scaling:
            print("\nscaling (issue 27): select_int, 4 connections")
            print(scaling)
        if hot:
            print("\ngoals (issue 27: the multiplexed hot path at scale)")
            print(report.format_targets(hot))
        if self.telemetry:
            from pgmux.tooling.bench.telemetry_cost import judge

            print("\ngoals (issue 28: telemetry costs nothing unless switched on)")
            print(report.format_targets(judge(self.telemetry)))
        for note in s.notes:
            print(f"note: {note}", file=sys.stderr)
        for error in self.errors:
            print(f"error: {error}", file=sys.stderr)
        if s.json_path:
            print(f"\nJSON written to {s.json_path}")
        if written:
            print("plots written to " + ", ".join(written))

    def _print_figures(self) -> None:
        results = report.sort_results(self.results)
        print(f"pgmux implementation: {report.machine_info(None)['pgmux_implementation']}")
        if results:
            print(report.table(results, report.RESULT_COLUMNS))
        operations = [r for r in results if report.has_operation_figures(r)]
        if operations:
            print("\nper operation (tpcb: a transaction; wide: a result; wide_stream: a stream; "
                  "orm: a request, orm_sessions: a burst of sessions)")
            print(report.table(operations, report.OPERATION_COLUMNS))
        if self.http:
            print("\nhttp (gunicorn, 2 gevent workers; wrk, 1 thread, 64 connections)")
            print(report.table(self.http, report.HTTP_COLUMNS))
        if self.django_http:
            print("\ndjango_http (examples/django_app: gunicorn, 2 gevent workers; wrk, 1 "
                  "thread, 64 connections)")
            print(report.table(self.django_http, report.HTTP_COLUMNS))
        if self.micro:
            print("\ntransport micro-benchmarks")
            print(report.table(self.micro, report.MICRO_COLUMNS))
        for entry in self.profiles:
            print(f"\ncProfile of {entry['client']}, {entry['workload']}, {entry['greenlets']} "
                  "greenlets "
                  f"(own {entry['clock']} time; {entry['qps_under_profiler']:,.1f} "
                  f"{report.plural(entry['unit'])}/s under the profiler), saved to "
                  f"{entry['path']}:")
            print(entry["breakdown"])

    def _goals(self) -> list[dict[str, Any]]:
        """Issues 14's and 21's goals, judged when their cases (or any of their workloads) ran."""
        s = self.settings
        ran = {r["workload"] for r in self.results} & {w for w, _, _ in goals.GOAL_CASES}
        if not (s.goals or self.http or ran - {"select_int", "point_lookup"}):
            return []
        return goals.evaluate_goals(self.results, self.http,
                                    goals.load_baseline(s.baseline_path))

    def _plot(self) -> list[str]:
        try:
            written = report.plot(self.settings.plot_path or "", self.results) if (
                self.results) else []
            for suffix, plot in (("units", unit_goals.plot_units),
                                 ("scaling", hot_goals.plot_scaling)):
                written += report.plot_next_to(self.settings.plot_path or "", suffix, plot,
                                               self.results)
            stem, ext = os.path.splitext(self.settings.plot_path or "")
            if self.http:
                written.append(report.plot_http(f"{stem}-http{ext or '.png'}", self.http))
            if self.django_http:
                written.append(report.plot_http(f"{stem}-django_http{ext or '.png'}",
                                                self.django_http))
            return written
        except ImportError:
            print("no plot: matplotlib is not installed (pip install 'pgmux[bench]')",
                  file=sys.stderr)
            return []

    def document(self, targets: list[dict[str, Any]],
                 judged: list[dict[str, Any]] | None = None,
                 units: list[dict[str, Any]] | None = None,
                 orm: list[dict[str, Any]] | None = None,
                 hot: list[dict[str, Any]] | None = None) -> dict[str, Any]:
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
                         "rtt_ms": s.rtts, "duration_s": s.duration, "warmup_s": s.warmup,
                         "goals": s.goals, "http_rtt_ms": s.http_rtts, "http_apps": s.http_apps,
                         "django_http_rtt_ms": s.django_rtts, "django_http_apps": s.django_apps,
                         "rows": s.rows, "baseline": s.baseline_path,
                         "cases": [list(c) for c in s.cases]},
            "clients": {name: CLIENTS[name].description for name in s.clients},
            "notes": s.notes,
            "results": report.sort_results(self.results),
            "http": self.http,
            "django_http": self.django_http,
            "micro": self.micro,
            "targets": targets,
            "goals": judged or [],
            "unit_goals": units or [],
            "orm_goals": orm or [],
            "hot_goals": hot or [],
            "telemetry_cost": self.telemetry,
            "profile": self.profiles[0] if self.profiles else None,
            "profiles": self.profiles,
            "errors": self.errors,
        }


def profiled_client(workload: str) -> str:
    """The pgmux client ``--profile`` runs ``workload`` with: pgmux, unless the workload is
    for other clients only (the orm family: the first of them named after pgmux)."""
    allowed = WORKLOADS[workload].clients
    if allowed is None or "pgmux" in allowed:
        return "pgmux"
    return next((name for name in allowed if "pgmux" in name), "pgmux")


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


def profile_breakdown(path: str, operations: int, rows: int, unit: str, count: int,
                      measured_cpu_us: float | None = None) -> str:
    """The top ``count`` functions by own time: each one's share of the profiled time, its
    cost per operation under the profiler (and per row when an operation has several), and,
    given the unprofiled CPU per operation (CPU clock only: the wall clock also counts the
    waits), that share of it: an estimate of the function's real cost."""
    import pstats

    entries = pstats.Stats(path).stats  # type: ignore[attr-defined]  # {func: (cc, nc, tt, ...)}
    total = sum(tt for _, _, tt, _, _ in entries.values()) or 1.0
    ops = max(1, operations)
    ranked = sorted(entries.items(), key=lambda item: item[1][2], reverse=True)[:count]
    per_row = rows > 1
    columns = [("share", 6), (f"us/{unit}", 10)] + ([("us/row", 8)] if per_row else []) + (
        [(f"est us/{unit}", 11)] + ([("est us/row", 10)] if per_row else [])
        if measured_cpu_us else []) + [(f"calls/{unit}", 11)]
    lines = [" ".join(title.rjust(width) for title, width in columns) + "  function"]
    for (filename, line, name), (_, calls, tt, _, _) in ranked:
        cost = tt / ops * 1e6
        values = [f"{tt / total:.1%}", f"{cost:.2f}"] + ([f"{cost / rows:.3f}"] if per_row
                                                         else [])
        if measured_cpu_us:
            estimate = tt / total * measured_cpu_us
            values += [f"{estimate:.2f}"] + ([f"{estimate / rows:.3f}"] if per_row else [])
        values.append(f"{calls / ops:.2f}")
        lines.append(" ".join(v.rjust(width) for v, (_, width) in zip(values, columns,
                                                                        strict=True))
                     + f"  {os.path.basename(filename)}:{line}({name})")
    lines += ["by file (own time of its functions; builtins by name):",
              *_by_file(entries, total, measured_cpu_us or total / ops * 1e6, unit)]
    lines.append(f"total own time {total:.3f} s over {operations:,} {report.plural(unit)}: "
                 f"{total / ops * 1e6:,.1f} us/{unit} under the profiler"
                 + (f", {total / ops / rows * 1e6:.3f} us/row" if per_row else "")
                 + (f"; {measured_cpu_us:,.1f} us/{unit} measured without it" if measured_cpu_us
                    else ""))
    return "\n".join(lines)


def _by_file(entries: dict, total: float, per_op_us: float, unit: str,
             count: int = PROFILE_FILES) -> list[str]:
    """Own time summed per source file (per builtin for C functions): share and us/op."""
    files: dict[str, float] = {}
    for (filename, _, name), (_, _, tt, _, _) in entries.items():
        key = (f"builtin {name.split(' of ')[0].strip('<>{}')}" if filename == "~"
               else os.path.join(*filename.split(os.sep)[-2:]))  # package/module.py
        files[key] = files.get(key, 0.0) + tt
    ranked = sorted(files.items(), key=lambda item: item[1], reverse=True)[:count]
    return [f"{tt / total:6.1%} {tt / total * per_op_us:10.2f} us/{unit}  {key}"
            for key, tt in ranked]


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
