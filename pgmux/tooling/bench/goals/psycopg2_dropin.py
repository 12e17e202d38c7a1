"""The psycopg2 drop-in: code written for psycopg2, unchanged, on ``pgmux.psycopg2`` against
psycopg2 itself with psycogreen, side by side in one run.

* the example app under gunicorn's gevent workers (``psycopg2_http``): the same file and
  pool on either psycopg2, wrk with 256 connections, locally and through the 10 ms delay
  line;
* 200 greenlets, a psycopg2 connection each, a read transaction per request
  (``psycopg2_read_tx``): the server connections and the throughput;
* ``cursor.execute("SELECT %s")`` and ``fetchall()`` from 64 greenlets with a connection
  each (``cursor_select``): the drop-in's client CPU per statement over ``pgmux.dbapi``'s,
  timed and counted by callgrind (``psycopg2_cursor`` / ``dbapi_cursor``);
* the Celery example (``celery_tasks``), 2,000 short tasks on a worker of 500 greenlets:
  its server connections and tasks per second.
"""

from __future__ import annotations

import inspect
from typing import Any

from pgmux.client import Client
from pgmux.tooling.bench.goals.common import (
    RTT_MS,
    Area,
    Goal,
    Plan,
    Result,
    Run,
    figures,
    find,
    find_http,
    http_figures,
    joined,
    line,
    not_measured,
    qps,
    ratio,
    rps,
)
from pgmux.tooling.bench.instructions import per_operation
from pgmux.tooling.bench.psycopg2_http import CONNECTIONS as WRK_CONNECTIONS

DROP_IN, REAL = "pgmux-psycopg2", "psycopg2"  # the http apps
HTTP = (  # (id, endpoint, rtt, >= x psycopg2's req/s)
    ("dropin_http_db_local", "/db", 0.0, 1.5),
    ("dropin_http_queries20_local", "/queries?n=20", 0.0, 1.5),
    ("dropin_http_updates20_local", "/updates?n=20", 0.0, 1.5),
    ("dropin_http_db_rtt10", "/db", RTT_MS, 10.0),
    ("dropin_http_queries20_rtt10", "/queries?n=20", RTT_MS, 10.0),
    ("dropin_http_updates20_rtt10", "/updates?n=20", RTT_MS, 10.0),
)
# (workload, greenlets, connections the code makes, (the drop-in's client, the peer's))
READ_TX = ("psycopg2_read_tx", 200, 200, ("pgmux-psycopg2", "psycopg2-per-greenlet"))
CURSOR = ("cursor_select", 64, 64, ("pgmux-psycopg2", "pgmux-dbapi"))
CELERY = ("celery_tasks", 500, 100, ("celery-pgmux", "celery-psycopg2"))
CPU_MULTIPLE = 1.2  # the drop-in's client CPU per statement, at most, over pgmux.dbapi's


def _default(name: str) -> int:
    default: int = inspect.signature(Client).parameters[name].default
    return default


BOUND = _default("pipeline_size") + _default("pinned_size")  # the drop-in's connections


def http_lines(run: Run) -> list[Goal]:
    out = []
    for key, endpoint, rtt, goal in HTTP:
        where = "locally" if rtt == 0 else f"at {rtt:g} ms RTT"
        mine, peer = (find_http(run.psycopg2_http, app, endpoint, rtt, WRK_CONNECTIONS)
                      for app in (DROP_IN, REAL))
        text = (f"the psycopg2 example app, {endpoint} {where} (wrk {WRK_CONNECTIONS} "
                f"connections): pgmux.psycopg2 >= {goal:g}x psycopg2 req/s")
        detail = joined(_http_detail(mine), _http_detail(peer)) or (
            "needs the psycopg2_http suite here (--quick measures /db and /updates?n=20 at "
            "10 ms only)")
        out.append(ratio(key, text, mine, peer, rps, goal, detail))
    return out


def _http_detail(r: Result | None) -> str | None:
    text = http_figures(r)
    return None if r is None or text is None else (
        f"{text}, {r['peak_server_connections']} server connections")


def _pair(run: Run, shape: tuple[str, int, int, tuple[str, str]]
          ) -> tuple[Result | None, Result | None]:
    workload, greenlets, connections, (mine, peer) = shape
    return (find(run.results, mine, workload, greenlets, connections=connections),
            find(run.results, peer, workload, greenlets, connections=connections))


def _connections_line(key: str, text: str, mine: Result | None, peer: Result | None,
                      unit: str) -> Goal:
    """The drop-in's peak of server connections against BOUND; the peer's alongside."""
    if mine is None:
        return not_measured(key, text, "needs the drop-in's case")
    peak = mine["peak_server_connections"]
    theirs = "" if peer is None else f" (psycopg2 {peer['peak_server_connections']})"
    return line(key, text, 0 < peak <= BOUND, f"{peak}{theirs}",
                joined(figures(mine, unit), figures(peer, unit)))


def greenlet_lines(run: Run) -> list[Goal]:
    mine, peer = _pair(run, READ_TX)
    where = (f"{READ_TX[1]} greenlets, a psycopg2 connection each, a read transaction per "
             "request")
    return [
        _connections_line("dropin_greenlets_connections", f"{where}: pgmux.psycopg2's server "
                          f"connections <= pipeline_size + pinned_size ({BOUND}), psycopg2's "
                          f"{READ_TX[2]}", mine, peer, "tx"),
        ratio("dropin_greenlets_throughput", f"{where}: pgmux.psycopg2 >= 1x psycopg2 "
              "transactions/s", mine, peer, qps, 1.0,
              joined(figures(mine, "tx"), figures(peer, "tx")))]


def cursor_lines(run: Run) -> list[Goal]:
    where = ('cursor.execute("SELECT %s") + fetchall(), 64 greenlets with a connection each')
    mine, peer = _pair(run, CURSOR)
    text = (f"{where}: pgmux.psycopg2 client CPU per query <= {CPU_MULTIPLE:g}x "
            "pgmux.dbapi's")
    if mine is None or peer is None or not mine.get("cpu_us_per_query") or not peer.get(
            "cpu_us_per_query"):
        timed = not_measured("dropin_cursor_cpu", text, "needs both clients' cursor_select")
    else:
        multiple = mine["cpu_us_per_query"] / peer["cpu_us_per_query"]
        timed = line("dropin_cursor_cpu", text, multiple <= CPU_MULTIPLE, f"{multiple:.2f}x",
                     joined(figures(mine), figures(peer)))
    text = (f"{where}, compiled: pgmux.psycopg2 instructions per query <= {CPU_MULTIPLE:g}x "
            "pgmux.dbapi's")
    drop_in = per_operation(run.instructions, "compiled", "psycopg2_cursor")
    dbapi = per_operation(run.instructions, "compiled", "dbapi_cursor")
    if drop_in is None or not dbapi:
        counted = not_measured("dropin_cursor_instructions", text,
                               "needs callgrind's counts (valgrind): --instructions, or "
                               "--goals without --quick or --workloads")
    else:
        counted = line("dropin_cursor_instructions", text, drop_in <= CPU_MULTIPLE * dbapi,
                       f"{drop_in / dbapi:.2f}x",
                       f"pgmux.psycopg2 {drop_in:,.0f}, pgmux.dbapi {dbapi:,.0f}")
    return [timed, counted]


def celery_lines(run: Run) -> list[Goal]:
    mine, peer = _pair(run, CELERY)
    where = f"the Celery example, short tasks on {CELERY[1]} greenlets"
    return [
        _connections_line("dropin_celery_connections", f"{where}: pgmux.psycopg2's server "
                          f"connections <= pipeline_size + pinned_size ({BOUND})", mine, peer,
                          "task"),
        ratio("dropin_celery_tasks", f"{where}: pgmux.psycopg2 >= 1x psycopg2 tasks/s", mine,
              peer, qps, 1.0, joined(figures(mine, "task"), figures(peer, "task")))]


def judge(run: Run) -> list[Goal]:
    return [*http_lines(run), *greenlet_lines(run), *cursor_lines(run), *celery_lines(run)]


def cases(plan: Plan) -> list[Any]:
    return [case for workload, greenlets, connections, clients in (CURSOR, READ_TX, CELERY)
            for case in plan.cases(workload, greenlets, 0.0, clients, connections)]


def _extra(run: Run) -> bool:
    return bool(run.psycopg2_http) or per_operation(
        run.instructions, "compiled", "psycopg2_cursor") is not None


AREA = Area("psycopg2_dropin", "the psycopg2 drop-in", judge, cases,
            workloads=(CURSOR[0], READ_TX[0], CELERY[0]), extra=_extra)
