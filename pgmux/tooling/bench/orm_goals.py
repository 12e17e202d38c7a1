"""Issue 26's goals: ORM transactions multiplexed until they must pin; the cases and verdicts.

Every goal compares figures measured side by side in one run, 64 greenlets and 4 server
connections in all for every client (``orm-pgmux``'s split between pipelined and pinned
ones is ``orm.orm_split``, printed in each line): the ``orm`` family
(``pgmux.tooling.bench.orm``) against ``orm-psycopg2``, locally and through the 10 ms
delay line; TPC-B through ``transaction()`` (``tpcb_unit_tx``: pgmux's pinned path
against psycopg2's BEGIN ... COMMIT) in throughput and in server CPU per transaction;
the 200 sessions of 50 ms on ``pinned_size=1``; and pure Python against the code before
on the multiplexed workloads, as issue 21's line (``goals.pure_goals``).

Server CPU is the user + system time of the case's own backends (found in
pg_stat_activity by the case's application_name) from ``/proc/<pid>/stat`` over the
measured window, divided by the operations (``procstat``): it needs the server on the
same machine, and is "-" otherwise.
"""

from __future__ import annotations

from typing import Any

from pgmux.tooling.bench.goals import pure_goals
from pgmux.tooling.bench.orm import (
    BURST_HOLD_SECONDS,
    BURST_SESSIONS,
    ORM_CLIENTS,
    ORM_WORKLOAD_NAMES,
    split_text,
)
from pgmux.tooling.bench.report import find_result, target

Result = dict[str, Any]

GREENLETS, CONNECTIONS = 64, 4
RTT_MS = 10.0
PEER = "orm-psycopg2"
RATIOS = {  # workload: (what a request does, >= x orm-psycopg2 locally, at 10 ms)
    "orm_read": ("get by primary key, close", 1.3, 15.0),
    "orm_mixed": ("4 reads to 1 write", 1.3, 4.0),
    "orm_write": ("get, change a balance, commit", 1.2, 1.0),
}
SESSIONS, SESSIONS_CONNECTIONS = "orm_sessions", 2  # orm-pgmux on pipeline 1 + pinned 1
SESSIONS_LIMIT_S = 0.5  # "well under a second"
TPCB, TPCB_CLIENTS, TPCB_RATIO = "tpcb_unit_tx", ("psycopg2", "pgmux"), 1.0
PURE_CASES = (("select_int", 64, 0.0), ("point_lookup", 64, 0.0), ("wide", 16, 0.0))


def orm_goal_cases(clients: list[str], rtts: list[float],
                   workloads: list[str] | None) -> list[tuple[float, str, int, int, str]]:
    """The cases as (rtt, workload, greenlets, connections, client), filtered by the
    options (``workloads`` None: all of them); a case's clients one after another."""
    wanted = [(workload, rtt) for workload in RATIOS for rtt in (0.0, RTT_MS)]
    out = [(rtt, workload, GREENLETS, CONNECTIONS, client) for workload, rtt in wanted
           if rtt in rtts and (workloads is None or workload in workloads)
           for client in ORM_CLIENTS if client in clients]
    if 0.0 in rtts and (workloads is None or SESSIONS in workloads) and "orm-pgmux" in clients:
        out.append((0.0, SESSIONS, 1, SESSIONS_CONNECTIONS, "orm-pgmux"))
    if 0.0 in rtts and (workloads is None or TPCB in workloads):
        out += [(0.0, TPCB, GREENLETS, CONNECTIONS, c) for c in TPCB_CLIENTS if c in clients]
    return out


def _find(results: list[Result], client: str, workload: str, rtt: float = 0.0) -> Result | None:
    return find_result(results, client, rtt, CONNECTIONS, GREENLETS, workload)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms" if value < 100 else f"{value:,.0f} ms"


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} us"


def _line(r: Result | None, unit: str) -> str | None:
    """A client's figures: throughput, p99 beside it, client and server CPU, the kinds'."""
    if r is None:
        return None
    name = r["client"] + (f" ({split_text(r['connections'])})" if r["client"] == "orm-pgmux"
                          else "")
    text = (f"{name} {r['qps']:,.0f} {unit}/s, p99 {_ms(r['latency_ms'].get('p99'))}, "
            f"CPU {_us(r.get('cpu_us_per_query'))}/{unit}, server "
            f"{_us(r.get('server_cpu_us_per_query'))}/{unit}")
    kinds = r.get("kinds") or {}
    if len(kinds) > 1:
        text += "".join(f", {kind}s p99 {_ms(k['latency_ms'].get('p99'))}"
                        for kind, k in sorted(kinds.items()))
    return text


def _ratio(key: str, text: str, mine: Result | None, peer: Result | None, goal: float,
           metric: str = "qps", detail: str = "", inverse: bool = False) -> dict[str, Any]:
    """``mine[metric] / peer[metric] >= goal`` (``inverse``: peer's over mine, for costs);
    not measured without both."""
    low, high = (mine, peer) if inverse else (peer, mine)
    if low is None or high is None or not low.get(metric) or high.get(metric) is None:
        return target(key, text, None, "-", detail or "needs both sides of the ratio")
    ratio = high[metric] / low[metric]
    return target(key, text, ratio >= goal, f"{ratio:.2f}x", detail)


def ratio_goals(results: list[Result]) -> list[dict[str, Any]]:
    """orm-pgmux against orm-psycopg2, each case locally and at 10 ms."""
    out = []
    for workload, (what, local, far) in RATIOS.items():
        for rtt, goal in ((0.0, local), (RTT_MS, far)):
            where = "locally" if rtt == 0 else f"at {rtt:g} ms RTT"
            found = [_find(results, client, workload, rtt) for client in ORM_CLIENTS]
            detail = "; ".join(filter(None, (_line(r, "req") for r in found)))
            text = f"{workload} ({what}) {where}: orm-pgmux >= {goal:g}x {PEER}"
            out.append(_ratio(f"{workload}{'' if rtt == 0 else '_rtt10'}_26", text,
                              found[0], _find(results, PEER, workload, rtt), goal,
                              detail=detail))
    return out


def tpcb_goals(results: list[Result]) -> list[dict[str, Any]]:
    """TPC-B (scale 1) through transaction(): pgmux's pinned path against psycopg2's."""
    mux, peer = (_find(results, client, TPCB) for client in ("pgmux", "psycopg2"))
    detail = "; ".join(filter(None, (_line(r, "tx") for r in (mux, peer))))
    where = f"{TPCB} (TPC-B, scale 1, through transaction())"
    return [
        _ratio("tpcb_tx_26", f"{where}: pgmux >= {TPCB_RATIO:g}x psycopg2 tx/s", mux, peer,
               TPCB_RATIO, detail=detail),
        _ratio("tpcb_tx_server_cpu_26", f"{where}: pgmux server CPU/tx <= psycopg2's "
               "(ratio: psycopg2's / pgmux's)", mux, peer, 1.0, "server_cpu_us_per_query",
               inverse=True),
    ]


def _burst(results: list[Result]) -> Result | None:
    """orm-pgmux's orm_sessions case, even if no burst ended in the window (censored)."""
    return next((r for r in results if r["client"] == "orm-pgmux"
                 and r["workload"] == SESSIONS and r["connections"] == SESSIONS_CONNECTIONS
                 and not r.get("profiled") and not r.get("turns_counted")), None)


def sessions_goal(results: list[Result]) -> dict[str, Any]:
    """The slowest burst of 200 sessions of 50 ms on pinned_size=1, against the limit."""
    sequential = BURST_SESSIONS * BURST_HOLD_SECONDS
    text = (f"{SESSIONS} ({BURST_SESSIONS} read sessions open {BURST_HOLD_SECONDS * 1000:g} ms "
            f"each, pinned_size=1): each burst <= {SESSIONS_LIMIT_S:g} s (in turn: "
            f"{sequential:g} s)")
    r = _burst(results)
    slowest = (r or {}).get("latency_ms", {}).get("max")
    if r is None or slowest is None:
        return target("orm_sessions_26", text, None, "-", "needs orm-pgmux's orm_sessions case")
    detail = (f"orm-pgmux ({split_text(SESSIONS_CONNECTIONS)}): {r['queries']} bursts "
              f"ended in the window, {r.get('censored', 0)} still running "
              f"at its end (counted with their time so far); p50 "
              f"{_ms(r['latency_ms'].get('p50'))}, CPU {_us(r.get('cpu_us_per_row'))}/session")
    return target("orm_sessions_26", text, slowest <= SESSIONS_LIMIT_S * 1000,
                  f"{slowest / 1000:.2f} s", detail)


def evaluate_orm_goals(results: list[Result],
                       baseline: list[Result] | None = None) -> list[dict[str, Any]]:
    """Every goal of issue 26, in the issue's order."""
    return [*ratio_goals(results), *tpcb_goals(results), sessions_goal(results),
            *pure_goals(results, baseline, PURE_CASES, "_26")]


def judge(asked: bool, results: list[Result],
          baseline: list[Result] | None = None) -> list[dict[str, Any]]:
    """The goals, when asked for (``--goals``) or when an orm case ran."""
    measured = any(r["workload"] in ORM_WORKLOAD_NAMES for r in results)
    return evaluate_orm_goals(results, baseline) if asked or measured else []
