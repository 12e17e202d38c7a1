"""Issue 19's goals: TPC-B at scale 1 as atomic units against each peer's best way of
sending a whole transaction, and the example app's /updates; the cases, the verdicts and
a plot of them.

Every goal is a ratio of figures measured side by side in one run, 64 greenlets and
4 server connections each: pgmux ``tpcb_unit`` (``db.atomic()``) against psycopg2's
``transaction()``-style TPC-B (``tpcb_unit_tx``), against ``pgbench -M prepared`` and
against the best one-shot form (the faster of psycopg2's multi-statement string and
psycopg 3's pipeline), locally and through the 10 ms delay line; and HTTP
``/updates?n=20`` against the psycopg2 app.
"""

from __future__ import annotations

from typing import Any

from pgmux.tooling.bench.goals import find_http
from pgmux.tooling.bench.report import find_result, plot_cdf, save_figure, style_cdf, target

Result = dict[str, Any]

GREENLETS, CONNECTIONS = 64, 4
RTT_MS = 10.0
CASES = (  # (workload, rtt_ms, clients), run for the clients installed and chosen
    ("tpcb_unit", 0.0, ("pgmux", "psycopg2", "psycopg3", "pgbench")),
    ("tpcb_unit_tx", 0.0, ("psycopg2", "pgmux")),
    ("tpcb_unit", RTT_MS, ("pgmux", "psycopg2", "psycopg3", "pgbench")),
    ("tpcb_unit_tx", RTT_MS, ("psycopg2", "pgmux")),
)
WORKLOADS = ("tpcb_unit", "tpcb_unit_tx")
ONE_SHOT = ("psycopg2", "psycopg3")  # the peers' whole-transaction-at-once forms
LOCAL_VS_TX, LOCAL_VS_PGBENCH, LOCAL_VS_ONE_SHOT = 2.0, 2.0, 1.0
RTT_VS_TX, RTT_VS_ONE_SHOT = 30.0, 12.0
HTTP_ENDPOINT = "/updates?n=20"
HTTP_LOCAL, HTTP_RTT = 2.0, 10.0


FORMS = {"pgmux": "atomic()", "psycopg2": "one string", "psycopg3": "pipeline",
         "pgbench": "-M prepared"}  # each client's whole transaction at once (tpcb_unit)


def label(r: Result) -> str:
    """A result's client and the form it sent its transactions in."""
    form = "transaction()" if r["workload"] == "tpcb_unit_tx" else FORMS.get(r["client"], "")
    return f"{r['client']} {form}".rstrip()


def unit_goal_cases(clients: list[str], rtts: list[float],
                    workloads: list[str] | None) -> list[tuple[float, str, int, int, str]]:
    """The cases as (rtt, workload, greenlets, connections, client), filtered by the
    options (``workloads`` None: all of them)."""
    return [(rtt, workload, GREENLETS, CONNECTIONS, client)
            for workload, rtt, wanted in CASES
            if rtt in rtts and (workloads is None or workload in workloads)
            for client in wanted if client in clients]


def _find(results: list[Result], client: str, workload: str, rtt: float) -> Result | None:
    return find_result(results, client, rtt, CONNECTIONS, GREENLETS, workload)


def _counted(results: list[Result], client: str, workload: str) -> Result | None:
    return next((r for r in results if r["client"] == client and r["workload"] == workload
                 and r.get("turns_counted") and r.get("turns_per_query") is not None), None)


def best_one_shot(results: list[Result], rtt: float) -> Result | None:
    found = [r for r in (_find(results, c, "tpcb_unit", rtt) for c in ONE_SHOT) if r]
    return max(found, key=lambda r: r["qps"]) if found else None


def _line(results: list[Result], client: str, workload: str, rtt: float) -> str | None:
    r = _find(results, client, workload, rtt)
    if r is None:
        return None
    text = (f"{label(r)} {r['qps']:,.0f} tx/s, p99 {_ms(r['latency_ms'].get('p99'))}, "
            f"{_us(r.get('cpu_us_per_query'))} CPU/tx, server {_us(r.get('server_cpu_us_per_query'))}")
    counted = _counted(results, client, workload) if rtt == 0 else None
    if counted is not None:
        text += f", {counted['turns_per_query']:.2f} turns/tx"
    return text


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms" if value < 100 else f"{value:,.0f} ms"


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} us"


def _ratio(key: str, text: str, mine: Result | None, peer: Result | None, goal: float,
           metric: str = "qps", detail: str = "") -> dict[str, Any]:
    """``mine[metric] / peer[metric] >= goal``; not measured without both."""
    if mine is None or peer is None or not peer[metric]:
        return target(key, text, None, "-", detail or "needs both sides of the ratio")
    ratio = mine[metric] / peer[metric]
    versus = label(peer) if "workload" in peer else peer["app"]
    return target(key, text, ratio >= goal, f"{ratio:.2f}x (vs {versus})", detail)


def tpcb_unit_goals(results: list[Result]) -> list[dict[str, Any]]:
    """The TPC-B lines, locally and at 10 ms."""
    out = []
    for rtt, where in ((0.0, "locally"), (RTT_MS, f"at {RTT_MS:g} ms RTT")):
        mux = _find(results, "pgmux", "tpcb_unit", rtt)
        detail = "; ".join(filter(None, [
            *(_line(results, c, "tpcb_unit", rtt) for c in ("pgmux", *ONE_SHOT, "pgbench")),
            *(_line(results, c, "tpcb_unit_tx", rtt) for c in ("psycopg2", "pgmux"))]))
        head = f"tpcb_unit (TPC-B, scale 1, 64 greenlets, 4 connections) {where}: atomic()"
        suffix = "" if rtt == 0 else "_rtt10"
        tx_goal = LOCAL_VS_TX if rtt == 0 else RTT_VS_TX
        shot_goal = LOCAL_VS_ONE_SHOT if rtt == 0 else RTT_VS_ONE_SHOT
        out.append(_ratio(f"unit_vs_tx{suffix}", f"{head} >= {tx_goal:g}x psycopg2's "
                          "transaction()-style", mux,
                          _find(results, "psycopg2", "tpcb_unit_tx", rtt), tx_goal,
                          detail=detail))
        if rtt == 0:
            out.append(_ratio("unit_vs_pgbench", f"{head} >= {LOCAL_VS_PGBENCH:g}x pgbench "
                              "-M prepared -c 4 -j 1", mux,
                              _find(results, "pgbench", "tpcb_unit", rtt), LOCAL_VS_PGBENCH))
        out.append(_ratio(f"unit_vs_one_shot{suffix}", f"{head} >= {shot_goal:g}x the best "
                          "one-shot form (psycopg2 one string, psycopg 3 pipeline)", mux,
                          best_one_shot(results, rtt), shot_goal))
    return out


def http_updates_goals(http: list[Result]) -> list[dict[str, Any]]:
    """HTTP /updates?n=20, pgmux's app against psycopg2's, locally and at 10 ms."""
    out = []
    for rtt, goal, where in ((0.0, HTTP_LOCAL, "locally"),
                             (RTT_MS, HTTP_RTT, f"at {RTT_MS:g} ms RTT")):
        mux = find_http(http, "pgmux", HTTP_ENDPOINT, rtt)
        peer = find_http(http, "psycopg2", HTTP_ENDPOINT, rtt)
        detail = "; ".join(f"{r['app']} {r['rps']:,.0f} req/s, p99 "
                           f"{_ms(r['latency_ms'].get('p99'))}, app CPU "
                           f"{_us(r.get('app_cpu_us_per_request'))}/req"
                           for r in (mux, peer) if r is not None)
        out.append(_ratio(f"http_updates20{'' if rtt == 0 else '_rtt10'}",
                          f"http {HTTP_ENDPOINT} (gunicorn, 2 gevent workers, wrk -c64) {where}: "
                          f"pgmux >= {goal:g}x psycopg2", mux, peer, goal, "rps", detail))
    return out


def evaluate_unit_goals(results: list[Result], http: list[Result]) -> list[dict[str, Any]]:
    """Every goal of issue 19, in the issue's order."""
    return [*tpcb_unit_goals(results), *http_updates_goals(http)]


def judge(asked: bool, results: list[Result], http: list[Result]) -> list[dict[str, Any]]:
    """The goals, when asked for (``--goals``) or when anything they judge was measured."""
    measured = any(r["workload"] in WORKLOADS for r in results) or any(
        r["endpoint"] == HTTP_ENDPOINT for r in http)
    return evaluate_unit_goals(results, http) if asked or measured else []


# -- plot ---------------------------------------------------------------------------------------


def plot_units(path: str, results: list[Result]) -> str | None:
    """One PNG: transactions/s per client and form (log scale) and the latency CDFs, a
    column per RTT; None when no tpcb_unit case ran. Raises ImportError without matplotlib."""
    rows = [r for r in results if r["workload"] in WORKLOADS and not r.get("profiled")
            and not r.get("turns_counted") and r["queries"]]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rtts = sorted({r["rtt_ms"] for r in rows})
    figure, axes = plt.subplots(2, len(rtts), figsize=(6.5 * len(rtts), 8), squeeze=False)
    for col, rtt in enumerate(rtts):
        mine = [r for r in rows if r["rtt_ms"] == rtt]
        labels = [label(r) for r in mine]
        ax = axes[0][col]
        bars = ax.bar(range(len(mine)), [r["qps"] for r in mine],
                      color=["tab:blue" if r["client"] == "pgmux" else "tab:gray" for r in mine])
        ax.bar_label(bars, [f"{r['qps']:,.0f}" for r in mine], fontsize=7)
        ax.set_xticks(range(len(mine)), labels, fontsize=7, rotation=20, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("transactions/s")
        ax.set_title(f"TPC-B scale 1, 64 greenlets, 4 connections, RTT {rtt:g} ms")
        ax.grid(True, axis="y", alpha=0.3)
        ax = axes[1][col]
        for r, name in zip(mine, labels, strict=True):
            cdf = r.get("cdf_ms") or []
            if cdf:
                plot_cdf(ax, cdf, name)
        style_cdf(ax, "transactions", f"latency CDF, RTT {rtt:g} ms", fontsize=7)
    return save_figure(plt, figure, path)

