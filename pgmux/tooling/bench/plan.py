"""From the command line to ``Settings``: the presets and the cases they run.

Presets (explicit options win): ``default`` is the matrix of the options plus every goal
case, the micro-benchmarks, the instruction counts and SQLAlchemy's examples; ``goals``
the goal cases only, each case in a worker of its own with its clients back to back;
``quick`` every goal case briefly, a worker per client; ``smoke`` a few seconds for CI.
gevent's floor is measured whenever any case runs.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import Any

from pgmux.tooling.bench import floor, goals
from pgmux.tooling.bench.clients import CLIENTS, parse_clients
from pgmux.tooling.bench.goals.common import Plan
from pgmux.tooling.bench.instructions import QUICK_SIZES, SIZES, SMOKE_SIZES
from pgmux.tooling.bench.suite import Settings
from pgmux.tooling.bench.workloads import WIDE_ROWS, WORKLOADS, parse_workloads

HTTP, DJANGO_HTTP = "http", "django_http"  # the http suites' names among the workloads
PSYCOPG2_HTTP = "psycopg2_http"
SUITES = (HTTP, PSYCOPG2_HTTP, DJANGO_HTTP)
MATRIX_WORKLOADS = "select_int,point_lookup,ten_rows,insert_returning,slow_mix"
SMOKE_STREAM_ROWS = 2_000
QUICK_STREAM_ROWS = 20_000
CELERY_TASKS, QUICK_CELERY_TASKS, SMOKE_CELERY_TASKS = 2_000, 200, 100
# --quick: the drop-in's http suite at 10 ms only, two endpoints (its backlogs take seconds)
QUICK_PSYCOPG2_HTTP = ((10.0,), ("/db", "/updates?n=20"))
PRESETS: dict[str, dict[str, Any]] = {
    "default": {"workloads": MATRIX_WORKLOADS, "greenlets": "16,64,256,1024",
                "connections": "4", "rtt_ms": "0,1,10", "duration": 3.0, "warmup": 1.0,
                "micro": "full", "matrix": True, "goals": True, "stream_rows": WIDE_ROWS,
                "instructions": "telemetry", "sizes": SIZES, "sqlalchemy": (1000, 3),
                "http_seconds": None, "turns": None, "grouping": "client",
                "reference": ("pgmux-python", "pgmux-before"), "celery_tasks": CELERY_TASKS},
    "goals": {"workloads": MATRIX_WORKLOADS, "greenlets": "64", "connections": "4",
              "rtt_ms": "0,10", "duration": 5.0, "warmup": 1.0, "micro": "full",
              "matrix": False, "goals": True, "stream_rows": WIDE_ROWS,
              "instructions": "telemetry", "sizes": SIZES, "sqlalchemy": (1000, 3),
              "http_seconds": None, "turns": None, "grouping": "case",
              "reference": ("pgmux-python", "pgmux-before"), "celery_tasks": CELERY_TASKS},
    "quick": {"workloads": MATRIX_WORKLOADS, "greenlets": "64", "connections": "4",
              "rtt_ms": "0,10", "duration": 0.25, "warmup": 0.1, "micro": "quick",
              "matrix": False, "goals": True, "stream_rows": QUICK_STREAM_ROWS,
              "instructions": "control", "sizes": QUICK_SIZES, "sqlalchemy": (50, 1),
              "http_seconds": (0, 1), "turns": ("pgmux",), "grouping": "shared",
              "implementations": ("compiled",), "stop_grace": 0.1,
              "celery_tasks": QUICK_CELERY_TASKS, "psycopg2_http": QUICK_PSYCOPG2_HTTP},
    "smoke": {"workloads": "select_int,ten_rows", "greenlets": "8", "connections": "2",
              "rtt_ms": "0", "duration": 0.25, "warmup": 0.1, "micro": "none",
              "matrix": True, "goals": False, "stream_rows": SMOKE_STREAM_ROWS,
              "instructions": "none", "sizes": SMOKE_SIZES, "sqlalchemy": None,
              "http_seconds": None, "turns": None, "grouping": "client",
              "celery_tasks": SMOKE_CELERY_TASKS},
}
QUICK_BUDGET = (  # what --help says --quick spends, per kind of measurement
    "each goal case 0.1 s of warm-up and 0.25 s measured (a worker process per client and "
    "RTT), its round trips counted for pgmux only; streams of 20,000 rows; the Celery "
    f"example's {QUICK_CELERY_TASKS} tasks; each http endpoint 1 s of wrk (the drop-in's "
    f"{' and '.join(QUICK_PSYCOPG2_HTTP[1])} at 10 ms only); the "
    "micro-benchmarks 0.05 s per stream; callgrind's counts, compiled, of 640 floor rounds, "
    "96 SELECTs, 12 TPC-B units and 12 transactions (and 3 times as many; the cursors' in "
    "the full runs only); SQLAlchemy's examples at --num 50, one pair")


def _numbers(text: str, kind: Callable[[str], Any]) -> list[Any]:
    values = [kind(part) for part in text.split(",") if part.strip()]
    if not values or any(v < 0 for v in values):
        raise ValueError(f"expected a comma-separated list of non-negative numbers: {text!r}")
    return values


def preset_of(args: argparse.Namespace) -> dict[str, Any]:
    """The preset the options chose; ``matrix``/``goals``: which cases it runs. Explicit
    --workloads, --greenlets or --connections without --goals mean the matrix only."""
    name = "quick" if args.quick else "smoke" if args.smoke else "goals" if args.goals else (
        "default")
    preset = dict(PRESETS[name])
    if args.goals:
        preset.update(matrix=False, goals=True)
        if args.smoke:
            preset.update(grouping="shared")
    elif name == "default" and any(getattr(args, option) is not None
                                   for option in ("workloads", "greenlets", "connections")):
        preset.update(goals=False)
    return preset


def settings_from(args: argparse.Namespace, argv: Sequence[str]) -> Settings:
    """Options plus the preset they chose -> ``Settings`` (raises ValueError when invalid)."""
    preset = preset_of(args)

    def pick(name: str) -> Any:
        value = getattr(args, name)
        return preset[name] if value is None else value

    clients, notes = _clients(args.clients)
    if args.clients is None:  # the pure-Python reference, where the goals want its lines
        clients += [c for c in preset.get("reference", ()) if not CLIENTS[c].missing()]
    micro = "none" if args.no_micro else preset["micro"]
    names = parse_workloads(pick("workloads"), extra=SUITES)
    whole = args.workloads is None  # the extras run only in a run of everything
    settings = Settings(
        dsn=args.dsn, clients=clients, workloads=[n for n in names if n not in SUITES],
        greenlets=[g for g in _numbers(pick("greenlets"), int) if g > 0],
        connections=[c for c in _numbers(pick("connections"), int) if c > 0],
        rtts=_numbers(pick("rtt_ms"), float), duration=float(pick("duration")),
        warmup=float(pick("warmup")), micro=micro if whole else "none", json_path=args.json,
        plot_path=args.plot, markdown_path=args.markdown, profile_path=args.profile,
        profile_clock=args.profile_clock, verify_naive=args.verify_naive,
        embedded=args.embedded, command=command(argv), notes=notes,
        rows={"wide_stream": _stream_rows(pick("stream_rows")),
              "celery_tasks": preset["celery_tasks"]},
        baseline_path=args.baseline, goals=preset["goals"], grouping=preset["grouping"],
        turn_clients=preset["turns"], http_seconds=preset["http_seconds"],
        stop_grace=preset.get("stop_grace", 0.5),
        instructions=preset["instructions"] if whole and preset["goals"] else "none",
        instruction_sizes=dict(preset["sizes"]),
        instruction_implementations=preset.get("implementations", ("compiled", "python")),
        sqlalchemy=preset["sqlalchemy"] if whole and preset["goals"] else None)
    if args.duration is not None or args.warmup is not None:
        settings.http_seconds = None  # wrk follows the options
    _only(settings, args)
    if not _alone(args):
        _plan(settings, preset, names if args.workloads is not None else None)
    measured = list(dict.fromkeys(case[1] for case in settings.cases))
    if args.profile_workloads is not None:
        settings.profile_workloads = parse_workloads(args.profile_workloads)
    elif settings.goals:
        settings.profile_workloads = [w for w in goals.PROFILED_WORKLOADS if w in measured] or [
            "select_int"]
    settings.workloads = measured
    return settings


def _alone(args: argparse.Namespace) -> bool:
    """Whether an option asked for one kind of measurement alone."""
    return bool(args.micro or args.instructions or args.sqlalchemy_examples)


def _only(settings: Settings, args: argparse.Namespace) -> None:
    """--micro, --instructions, --sqlalchemy-examples: that measurement alone (together if
    several are given)."""
    if not _alone(args):
        return
    settings.clients = []
    settings.goals = bool(args.goals)  # judge every area only when asked
    settings.micro = ("quick" if args.quick else "full") if args.micro else "none"
    settings.instructions = "telemetry" if args.instructions and not (
        args.quick or args.smoke) else "control" if args.instructions else "none"
    if not args.sqlalchemy_examples:
        settings.sqlalchemy = None
    elif settings.sqlalchemy is None:
        settings.sqlalchemy = PRESETS["goals"]["sqlalchemy"]


def _stream_rows(rows: int) -> int:
    if not 1 <= rows <= WIDE_ROWS:
        raise ValueError(f"--stream-rows must be between 1 and {WIDE_ROWS:,}")
    return rows


def _plan(settings: Settings, preset: dict[str, Any], chosen: list[str] | None) -> None:
    """Fill ``settings.cases`` and the http suites' RTTs and apps from the preset's modes;
    ``chosen``: the --workloads given (a filter on the goal cases), if any."""
    from pgmux.tooling.bench.http import APPS, missing

    s = settings
    cases: dict[tuple, None] = {}
    http_rtts: list[float] = []
    dropin_rtts: list[float] = []
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
        if chosen is not None and PSYCOPG2_HTTP in chosen:
            dropin_rtts = list(s.rtts)
    if preset["goals"]:
        for case in goals.cases(Plan([*s.clients, floor.CLIENT], s.rtts, chosen)):
            cases[case] = None
        if chosen is None or HTTP in chosen:
            http_rtts += [rtt for rtt in goals.HTTP_RTTS if rtt in s.rtts and rtt not in http_rtts]
        if chosen is None or PSYCOPG2_HTTP in chosen:
            dropin_rtts += [rtt for rtt in goals.HTTP_RTTS
                            if rtt in s.rtts and rtt not in dropin_rtts]
    # gevent's floor, first, in every run that times anything
    s.cases = [floor.CASE, *(c for c in cases if c != floor.CASE)] if cases else []
    if s.cases and floor.CLIENT not in s.clients:
        s.clients.append(floor.CLIENT)
    apps = [name for name in APPS if name in s.clients]
    reasons = missing(apps) if http_rtts and apps else []
    if reasons:
        s.notes.append("http suite skipped: " + "; ".join(reasons))
    elif http_rtts and apps:
        s.http_rtts, s.http_apps = sorted(http_rtts), apps
    if dropin_rtts:
        only = preset.get("psycopg2_http")
        if only is not None:
            dropin_rtts = [rtt for rtt in dropin_rtts if rtt in only[0]]
            s.psycopg2_http_endpoints = list(only[1])
        _plan_psycopg2_http(s, dropin_rtts, chosen is not None and PSYCOPG2_HTTP in chosen)
    if chosen is not None and DJANGO_HTTP in chosen:
        _plan_django(s)


def _plan_psycopg2_http(settings: Settings, rtts: list[float], named: bool) -> None:
    """The drop-in's http suite at ``rtts``, when its two apps' clients are chosen and can
    run (``named``: --workloads asked for it: say why it cannot)."""
    from pgmux.tooling.bench import psycopg2_http

    absent = [name for name in psycopg2_http.APPS if name not in settings.clients]
    reasons = psycopg2_http.missing()
    if absent:
        if named:
            settings.notes.append(f"{PSYCOPG2_HTTP} skipped: needs the clients "
                                  f"{', '.join(absent)}")
    elif reasons:
        settings.notes.append(f"{PSYCOPG2_HTTP} skipped: " + "; ".join(reasons))
    elif rtts:
        settings.psycopg2_http_rtts = sorted(rtts)


def _plan_django(settings: Settings) -> None:
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


def command(argv: Sequence[str]) -> str:
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
