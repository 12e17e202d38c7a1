"""What a run reports: the figures' tables, the goals by area, the JSON document, the
Markdown page's tables and the plots."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

from pgmux.tooling.bench import goals, psycopg2_http, report
from pgmux.tooling.bench.clients import CLIENTS
from pgmux.tooling.bench.floor import add_multiples
from pgmux.tooling.bench.goals.common import Run
from pgmux.tooling.bench.scaling import scaling_table

SCHEMA = 2
INSTRUCTION_COLUMNS = (
    ("implementation", lambda r: r["implementation"]),
    ("OpenTelemetry", lambda r: r["config"]),
    ("workload", lambda r: r["workload"]),
    ("greenlets", lambda r: str(r["greenlets"])),
    ("per operation", lambda r: f"{r.get('instructions', r.get('cpu_us', 0)):,.0f}"
                                + ("" if "instructions" in r else " us")),
    ("runs", lambda r: ", ".join(f"{v:,.0f}" for v in r["runs"])),
    ("N", lambda r: f"{r['n']:,}"),
)
SQLALCHEMY_COLUMNS = (
    ("suite", lambda r: r["suite"]),
    ("test", lambda r: r["test"]),
    ("N", lambda r: f"{r['num']:,}"),
    ("pgmux s", lambda r: f"{statistics.median(r['pgmux_s']):.3f}"),
    ("psycopg2 s", lambda r: f"{statistics.median(r['psycopg2_s']):.3f}"),
    ("ratio", lambda r: "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"),
    ("pairs", lambda r: ", ".join(f"{v:.2f}" for v in r["ratios"])),
)


def load_baseline(path: str | None) -> dict[str, Any] | None:
    """An earlier run's JSON document (``pgmux bench --json``), or None."""
    if path is None:
        return None
    with open(path) as f:
        document: dict[str, Any] = json.load(f)
    return document


def judge_again(document: dict[str, Any], baseline_path: str | None = None) -> None:
    """A run's goals judged again from its figures (as this version of the bench judges
    them): against ``baseline_path``, else the run's own baseline if it is still there."""
    settings = document.get("settings", {})
    path = baseline_path or settings.get("baseline")
    baseline = load_baseline(path) if path and os.path.exists(path) else None
    run = Run(document.get("results", []), document.get("http", []), document.get("micro", []),
              document.get("instructions", []), document.get("sqlalchemy_examples", []),
              baseline, bool(settings.get("goals")), document.get("psycopg2_http", []))
    document["goals"] = goals.judge(run)
    document["areas"] = goals.titles()
    if baseline is not None:
        document["baseline_instructions"] = baseline.get("instructions", [])


def finish(suite: Any) -> None:
    """Judge the goals, write the files asked for, print the figures and the goals."""
    s = suite.settings
    floor = add_multiples(suite.results)
    run = Run(suite.results, suite.http, suite.micro, suite.instructions,
              suite.sqlalchemy_examples, load_baseline(s.baseline_path), s.goals,
              suite.psycopg2_http)
    judged = goals.judge(run)
    document = make_document(suite, judged, floor)
    if run.baseline is not None:  # the counts before, beside this run's on the page
        document["baseline_instructions"] = run.baseline.get("instructions", [])
    if s.json_path:  # files first: a closed stdout must not lose them
        report.write_json(s.json_path, document)
    if s.markdown_path:
        write_markdown(s.markdown_path, document)
    written = _plot(suite) if s.plot_path else []
    print_figures(suite)
    print_goals(judged)
    for note in s.notes:
        print(f"note: {note}", file=sys.stderr)
    for error in suite.errors:
        print(f"error: {error}", file=sys.stderr)
    print("\ntime taken: " + ", ".join(f"{stage} {seconds:.0f} s"
                                      for stage, seconds in suite.timings.items()))
    for path, what in ((s.json_path, "JSON"), (s.markdown_path, "Markdown")):
        if path:
            print(f"\n{what} written to {path}")
    if written:
        print("plots written to " + ", ".join(written))


def write_markdown(path: str, document: dict[str, Any]) -> None:
    """The page at ``path`` with its generated tables from ``document`` (a new file: the
    tables alone)."""
    from pgmux.tooling.bench.markdown import update

    page = ""
    if os.path.exists(path):
        with open(path) as f:
            page = f.read()
    with open(path, "w") as f:
        f.write(update(page, document))


def print_figures(suite: Any) -> None:
    results = report.sort_results(suite.results)
    print(f"pgmux implementation: {report.machine_info(None)['pgmux_implementation']}")
    if results:
        print(report.table(results, report.RESULT_COLUMNS))
    operations = [r for r in results if report.has_operation_figures(r)]
    if operations:
        print("\nper operation (tpcb: a transaction; wide: a result; wide_stream: a stream; "
              "orm: a request, orm_sessions: a burst of sessions; floor: a round)")
        print(report.table(operations, report.OPERATION_COLUMNS))
    scaling = scaling_table(suite.results)
    if scaling:
        print("\nscaling: select_int, 4 connections")
        print(scaling)
    if suite.http:
        print("\nhttp (gunicorn, 2 gevent workers; wrk, 1 thread, 64 connections)")
        print(report.table(suite.http, report.HTTP_COLUMNS))
    if suite.psycopg2_http:
        print(f"\npsycopg2_http (examples/wsgi_app_psycopg2.py on pgmux.psycopg2 and on "
              f"psycopg2: gunicorn, 2 gevent workers; wrk, 1 thread, "
              f"{psycopg2_http.CONNECTIONS} connections)")
        print(report.table(suite.psycopg2_http, report.HTTP_COLUMNS))
    if suite.django_http:
        print("\ndjango_http (examples/django_app: gunicorn, 2 gevent workers; wrk, 1 "
              "thread, 64 connections)")
        print(report.table(suite.django_http, report.HTTP_COLUMNS))
    if suite.micro:
        print("\ntransport micro-benchmarks")
        print(report.table(suite.micro, report.MICRO_COLUMNS))
    if suite.instructions:
        print("\ninstructions per operation (callgrind; the median of the runs)")
        print(report.table(suite.instructions, INSTRUCTION_COLUMNS))
    tests = [t for t in suite.sqlalchemy_examples if t.get("test")]
    if tests:
        print("\nSQLAlchemy's examples/performance, single-threaded (ratio: psycopg2's time "
              "over pgmux's, the median of the pairs)")
        print(report.table(tests, SQLALCHEMY_COLUMNS))
    for entry in suite.profiles:
        print(f"\ncProfile of {entry['client']}, {entry['workload']}, {entry['greenlets']} "
              f"greenlets (own {entry['clock']} time; {entry['qps_under_profiler']:,.1f} "
              f"{report.plural(entry['unit'])}/s under the profiler), saved to "
              f"{entry['path']}:")
        print(entry["breakdown"])


def print_goals(judged: list[dict[str, Any]]) -> None:
    for key, title in goals.titles().items():
        lines = [g for g in judged if g["area"] == key]
        if lines:
            print(f"\ngoals: {title}")
            print(report.format_goals(lines))


def make_document(suite: Any, judged: list[dict[str, Any]],
                  floor: dict[str, Any] | None) -> dict[str, Any]:
    s = suite.settings
    target = suite.target
    return {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": s.command,
        "machine": {**report.machine_info(target.version if target else None),
                    "load_average_at_start": suite.load_before},
        "server": target.description if target else None,
        "settings": {"clients": s.clients, "workloads": s.workloads,
                     "greenlets": s.greenlets, "connections": s.connections,
                     "rtt_ms": s.rtts, "duration_s": s.duration, "warmup_s": s.warmup,
                     "goals": s.goals, "http_rtt_ms": s.http_rtts, "http_apps": s.http_apps,
                     "http_seconds": list(suite.http_seconds()),
                     "psycopg2_http_rtt_ms": s.psycopg2_http_rtts,
                     "psycopg2_http_endpoints": s.psycopg2_http_endpoints,
                     "django_http_rtt_ms": s.django_rtts, "django_http_apps": s.django_apps,
                     "rows": s.rows, "baseline": s.baseline_path,
                     "instructions": s.instructions, "instruction_sizes": s.instruction_sizes,
                     "sqlalchemy_examples": list(s.sqlalchemy) if s.sqlalchemy else None,
                     "cases": [list(c) for c in s.cases]},
        "clients": {name: CLIENTS[name].description for name in s.clients if name in CLIENTS},
        "notes": s.notes,
        "floor": floor,
        "results": report.sort_results(suite.results),
        "http": suite.http,
        "psycopg2_http": suite.psycopg2_http,
        "django_http": suite.django_http,
        "micro": suite.micro,
        "instructions": suite.instructions,
        "sqlalchemy_examples": suite.sqlalchemy_examples,
        "areas": goals.titles(),
        "goals": judged,
        "profiles": suite.profiles,
        "timings_s": {stage: round(seconds, 1) for stage, seconds in suite.timings.items()},
        "errors": suite.errors,
    }


def _plot(suite: Any) -> list[str]:
    if not (suite.results or suite.http or suite.psycopg2_http or suite.django_http):
        return []
    try:
        from pgmux.tooling.bench import plots
        from pgmux.tooling.bench.scaling import plot_scaling

        path = suite.settings.plot_path or ""
        written = plots.plot(path, suite.results) if suite.results else []
        for suffix, plot in (("units", plots.plot_units), ("scaling", plot_scaling)):
            written += plots.plot_next_to(path, suffix, plot, suite.results)
        stem, ext = os.path.splitext(path)
        for name, rows in (("http", suite.http), ("psycopg2_http", suite.psycopg2_http),
                           ("django_http", suite.django_http)):
            if rows:
                written.append(plots.plot_http(f"{stem}-{name}{ext or '.png'}", rows))
        return written
    except ImportError:
        print("no plot: matplotlib is not installed (pip install 'pgmux[bench]')",
              file=sys.stderr)
        return []
