"""Transactions on pinned connections: pgbench's TPC-B transaction through
``db.transaction()`` (BEGIN rides with the first statement, a round trip per statement,
the connection kept without a reset) against psycopg2's BEGIN ... COMMIT, 64 greenlets
and 4 server connections each: at scale 4 (``tpcb``, with its round trips counted
through a proxy) and at scale 1 (``tpcb_unit_tx``, every transaction on the one branch
row, with the server's CPU per transaction)."""

from __future__ import annotations

from typing import Any

from pgmux.tooling.bench.goals.common import (
    GREENLETS,
    PEERS,
    Area,
    Goal,
    Plan,
    Run,
    counted,
    figures,
    find,
    joined,
    line,
    not_measured,
    qps,
    ratio,
    us,
)

SCALE4, SCALE1 = "tpcb", "tpcb_unit_tx"
SCALE4_RATIO, SCALE1_RATIO = 1.0, 1.5  # >= x psycopg2's tx/s
ROUND_TRIPS = 6.0  # 5 statements + COMMIT: BEGIN rides with the first, the reset costs none


def cases(plan: Plan) -> list[Any]:
    return [*plan.cases(SCALE4, GREENLETS, 0.0, PEERS),
            *plan.cases(SCALE1, GREENLETS, 0.0, ("psycopg2", "pgmux"))]


def _server_cpu(r: dict[str, Any]) -> float | None:
    """Transactions per server CPU second (higher is better: it divides like a rate)."""
    value = r.get("server_cpu_us_per_query")
    return 1e6 / value if value else None


def _with_server(r: dict[str, Any] | None) -> str | None:
    text = figures(r, "tx")
    if r is None or text is None:
        return None
    return f"{text}, server {us(r.get('server_cpu_us_per_query'))} CPU/tx"


def judge(run: Run) -> list[Goal]:
    mux, peer = (find(run.results, c, SCALE4) for c in ("pgmux", "psycopg2"))
    where = f"{SCALE4} (TPC-B, scale 4, through transaction(), 64 greenlets)"
    out = [ratio("tpcb_vs_psycopg2", f"{where}: pgmux >= {SCALE4_RATIO:g}x psycopg2 tx/s",
                 mux, peer, qps, SCALE4_RATIO,
                 joined(*(figures(find(run.results, c, SCALE4), "tx") for c in PEERS)))]
    turns, reference = counted(run.results, "pgmux", SCALE4), counted(run.results, "psycopg2",
                                                                       SCALE4)
    text = (f"{where}: pgmux round trips per transaction <= {ROUND_TRIPS:g} (5 statements + "
            "COMMIT; BEGIN and the reset ride along)")
    if turns is None:
        out.append(not_measured("tpcb_round_trips", text, "needs the turn-counted case (a TCP "
                                "server address)"))
    else:
        value = turns["turns_per_query"]
        out.append(line("tpcb_round_trips", text, value <= ROUND_TRIPS + 0.05, f"{value:.2f}",
                        "" if reference is None else
                        f"psycopg2 {reference['turns_per_query']:.2f}"))
    mux, peer = (find(run.results, c, SCALE1) for c in ("pgmux", "psycopg2"))
    where = f"{SCALE1} (TPC-B, scale 1, through transaction(), 64 greenlets)"
    detail = joined(*(_with_server(r) for r in (mux, peer)))
    out += [ratio("tpcb_scale1_vs_psycopg2", f"{where}: pgmux >= {SCALE1_RATIO:g}x psycopg2 "
                  "tx/s", mux, peer, qps, SCALE1_RATIO, detail),
            ratio("tpcb_scale1_server_cpu", f"{where}: pgmux's server CPU per transaction <= "
                  "psycopg2's (ratio: psycopg2's / pgmux's)", mux, peer, _server_cpu, 1.0)]
    return out


AREA = Area("transactions", "transactions on pinned connections", judge, cases,
            workloads=(SCALE4, SCALE1))
