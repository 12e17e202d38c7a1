"""Issue 27's goals: the multiplexed hot path at scale; its cases, verdicts, scaling table
and plot.

Every line compares figures measured side by side in one run, 4 server connections each:
``select_int`` (``SELECT $1::int``) for pgmux compiled and pure Python against psycopg2 +
psycogreen at 64 greenlets, pgmux at 4,096 greenlets against 64 (the cost per query flat in
the number of callers), the http suite's ``/queries?n=20``, ``/updates?n=20`` and ``/db``
(``examples/wsgi_app.py``, whose reads are fan-outs, against the psycopg2 app, which runs
its queries one after another as a sync app does), TPC-B as atomic units (``tpcb_unit``)
against the best one-shot form at 10 ms and ``pgbench -M prepared`` locally, and pure
Python against the code before (``pgmux-before``, ``goals.pure_goals``). The scaling table
is ``select_int`` at 64, 256, 1,024 and 4,096 greenlets.
"""

from __future__ import annotations

from typing import Any

from pgmux.tooling.bench.goals import find_http, flat_goals, pair_text, pure_goals, ratio_goal
from pgmux.tooling.bench.report import find_result, save_figure, table, target
from pgmux.tooling.bench.unit_goals import best_one_shot

Result = dict[str, Any]

CONNECTIONS = 4
SCALING_GREENLETS = (64, 256, 1024, 4096)
SCALING_CLIENTS = ("pgmux", "pgmux-python", "psycopg2")
MUX_RATIO, MUX_CPU_US, PURE_RATIO = 3.0, 8.0, 2.0
HTTP_LOCAL = {"/queries?n=20": 2.0, "/updates?n=20": 2.0, "/db": 1.6}
UNIT_RTT_MS, UNIT_VS_ONE_SHOT, UNIT_VS_PGBENCH = 10.0, 12.0, 2.0
PURE_CASES = (("select_int", 64, 0.0), ("select_int", 4096, 0.0))


def hot_goal_cases(clients: list[str], rtts: list[float],
                   workloads: list[str] | None) -> list[tuple[float, str, int, int, str]]:
    """The scaling cases as (rtt, workload, greenlets, connections, client), filtered by the
    options; the other lines' cases are issues 19's and 21's (the same figures)."""
    if 0.0 not in rtts or (workloads is not None and "select_int" not in workloads):
        return []
    return [(0.0, "select_int", greenlets, CONNECTIONS, client)
            for greenlets in SCALING_GREENLETS for client in SCALING_CLIENTS
            if client in clients]


def _find(results: list[Result], client: str, workload: str, greenlets: int = 64,
          rtt: float = 0.0) -> Result | None:
    return find_result(results, client, rtt, CONNECTIONS, greenlets, workload)


def _qps(r: Result) -> float:
    return r["qps"]


def _rps(r: Result) -> float:
    return r["rps"]


def mux_goals(results: list[Result]) -> list[dict[str, Any]]:
    """select_int at 64 greenlets: compiled and pure Python against psycopg2, and the CPU."""
    where = "select_int, 64 greenlets, 4 connections"
    peer = _find(results, "psycopg2", "select_int")
    mux, pure = _find(results, "pgmux", "select_int"), _find(results, "pgmux-python",
                                                             "select_int")
    cpu = mux.get("cpu_us_per_query") if mux else None
    return [
        ratio_goal("mux_local_27", f"{where}: pgmux (compiled) >= {MUX_RATIO:g}x psycopg2",
                   mux, peer, _qps, MUX_RATIO, _line(mux, peer)),
        target("mux_cpu_27", f"{where}: pgmux (compiled) client CPU <= {MUX_CPU_US:g} "
               "us/query", None if cpu is None else cpu <= MUX_CPU_US,
               "-" if cpu is None else f"{cpu:.1f} us/query"),
        ratio_goal("mux_python_27", f"{where}: pgmux pure Python >= {PURE_RATIO:g}x psycopg2",
                   pure, peer, _qps, PURE_RATIO, _line(pure, peer)),
    ]


def _line(mine: Result | None, peer: Result | None) -> str:
    return "; ".join(f"{r['client']} {r['qps']:,.0f} q/s, {r['cpu_us_per_query']:.1f} us CPU/"
                     "query" for r in (mine, peer) if r is not None)


def http_goals(http: list[Result]) -> list[dict[str, Any]]:
    """The example app's fan-out endpoints and /db, locally, against the psycopg2 app."""
    out = []
    for endpoint, goal in HTTP_LOCAL.items():
        mux, peer = (find_http(http, app, endpoint, 0.0) for app in ("pgmux", "psycopg2"))
        slug = endpoint.strip("/").replace("?n=", "")
        out.append(ratio_goal(f"http_{slug}_27", f"http {endpoint} (gunicorn, 2 gevent "
                              f"workers, wrk -c64), local: pgmux >= {goal:g}x psycopg2", mux,
                              peer, _rps, goal, pair_text(mux, peer)))
    return out


def unit_goals(results: list[Result]) -> list[dict[str, Any]]:
    """TPC-B atomic units: at 10 ms against the best one-shot form, locally against pgbench."""
    where = "tpcb_unit (TPC-B as atomic units, 64 greenlets, 4 connections)"
    return [
        ratio_goal("unit_rtt10_27", f"{where} at {UNIT_RTT_MS:g} ms: >= {UNIT_VS_ONE_SHOT:g}x the "
                   "best one-shot form (psycopg2 one string, psycopg 3 pipeline)",
                   _find(results, "pgmux", "tpcb_unit", rtt=UNIT_RTT_MS),
                   best_one_shot(results, UNIT_RTT_MS), _qps, UNIT_VS_ONE_SHOT),
        ratio_goal("unit_pgbench_27", f"{where} locally: >= {UNIT_VS_PGBENCH:g}x pgbench "
                   "-M prepared", _find(results, "pgmux", "tpcb_unit"),
                   _find(results, "pgbench", "tpcb_unit"), _qps, UNIT_VS_PGBENCH),
    ]


def evaluate_hot_goals(results: list[Result], http: list[Result],
                       baseline: list[Result] | None = None) -> list[dict[str, Any]]:
    """Every goal of issue 27, in the issue's order."""
    return [*mux_goals(results), *flat_goals(results, "_27"), *http_goals(http),
            *unit_goals(results), *pure_goals(results, baseline, PURE_CASES, "_27")]


def judge(asked: bool, results: list[Result], http: list[Result],
          baseline: list[Result] | None = None) -> list[dict[str, Any]]:
    """The goals, when asked for (``--goals``) or when a scaling case was measured."""
    measured = any(r["workload"] == "select_int" and r["greenlets"] == 256 for r in results)
    return evaluate_hot_goals(results, http, baseline) if asked or measured else []


# -- scaling ------------------------------------------------------------------------------------


def scaling_rows(results: list[Result]) -> list[dict[str, Any]]:
    """select_int at each of ``SCALING_GREENLETS``: q/s and CPU per query for each client,
    and each figure against the client's own at 64 greenlets."""
    rows = []
    for greenlets in SCALING_GREENLETS:
        row: dict[str, Any] = {"greenlets": f"{greenlets:,}"}
        for client in SCALING_CLIENTS:
            r, few = _find(results, client, "select_int", greenlets), _find(
                results, client, "select_int")
            if r is None or few is None or not few["qps"] or not few["cpu_us_per_query"]:
                row[client] = "-"
                continue
            row[client] = (f"{r['qps']:,.0f} q/s ({r['qps'] / few['qps']:.2f}x), "
                           f"{r['cpu_us_per_query']:.1f} us "
                           f"({r['cpu_us_per_query'] / few['cpu_us_per_query']:.2f}x)")
        rows.append(row)
    return rows if any(row[c] != "-" for row in rows for c in SCALING_CLIENTS) else []


def scaling_table(results: list[Result], markdown: bool = False) -> str:
    """The scaling rows as a table ('' when none was measured)."""
    rows = scaling_rows(results)
    columns = (("greenlets", _cell("greenlets")),
               *((f"{client}: q/s, CPU/query (vs 64)", _cell(client))
                 for client in SCALING_CLIENTS))
    return table(rows, columns, markdown) if rows else ""


def _cell(key: str) -> Any:
    return lambda row: row[key]


def plot_scaling(path: str, results: list[Result]) -> str | None:
    """One PNG: select_int q/s and CPU per query against the greenlets, a line per client;
    None when no scaling case ran. Raises ImportError without matplotlib."""
    found = {client: [r for g in SCALING_GREENLETS
                      if (r := _find(results, client, "select_int", g)) is not None]
             for client in SCALING_CLIENTS}
    if sum(len(rows) for rows in found.values()) < 2:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for client, rows in found.items():
        if not rows:
            continue
        greenlets = [r["greenlets"] for r in rows]
        axes[0].plot(greenlets, [r["qps"] for r in rows], marker="o", label=client)
        axes[1].plot(greenlets, [r["cpu_us_per_query"] for r in rows], marker="o", label=client)
    for ax, label in ((axes[0], "queries/s"), (axes[1], "client CPU per query (us)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(SCALING_GREENLETS, [f"{g:,}" for g in SCALING_GREENLETS])
        ax.set_xlabel("greenlets (4 server connections)")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_title("SELECT $1::int: throughput")
    axes[1].set_title("SELECT $1::int: CPU per query")
    return save_figure(plt, figure, path)
