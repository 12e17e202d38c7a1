"""Atomic units: pgbench's TPC-B transaction at scale 1 as one ``db.atomic()`` unit (one
Sync on a pipelined connection), against each peer's best way of sending a whole
transaction (psycopg2's multi-statement string, psycopg 3's pipeline, ``pgbench -M
prepared``) and against psycopg2's BEGIN ... COMMIT a round trip per statement, 64
greenlets and 4 server connections each, locally and through the 10 ms delay line."""

from __future__ import annotations

from typing import Any

from pgmux.tooling.bench.goals.common import (
    GREENLETS,
    RTT_MS,
    Area,
    Goal,
    Plan,
    Result,
    Run,
    counted,
    find,
    joined,
    ms,
    qps,
    ratio,
    us,
)

UNIT, TX = "tpcb_unit", "tpcb_unit_tx"
UNIT_CLIENTS = ("pgmux", "psycopg2", "psycopg3", "pgbench")
ONE_SHOT = ("psycopg2", "psycopg3")  # the peers' whole-transaction-at-once forms
FORMS = {"pgmux": "atomic()", "psycopg2": "one string", "psycopg3": "pipeline",
         "pgbench": "-M prepared"}
GOALS = {  # rtt: (>= x psycopg2's transaction(), >= x the best one-shot form)
    0.0: (2.0, 1.0), RTT_MS: (30.0, 12.0)}
VS_PGBENCH = 2.0  # locally


def label(r: Result) -> str:
    """A result's client and the form it sent its transactions in."""
    form = "transaction()" if r["workload"] == TX else FORMS.get(r["client"], "")
    return f"{r['client']} {form}".rstrip()


def cases(plan: Plan) -> list[Any]:
    out = []
    for rtt in (0.0, RTT_MS):
        out += plan.cases(UNIT, GREENLETS, rtt, UNIT_CLIENTS)
        out += plan.cases(TX, GREENLETS, rtt, ("psycopg2",))
    return out


def best_one_shot(results: list[Result], rtt: float) -> Result | None:
    found = [r for r in (find(results, c, UNIT, rtt=rtt) for c in ONE_SHOT) if r]
    return max(found, key=qps) if found else None


def _figures(results: list[Result], client: str, workload: str, rtt: float) -> str | None:
    r = find(results, client, workload, rtt=rtt)
    if r is None:
        return None
    text = (f"{label(r)} {r['qps']:,.0f} tx/s, p99 {ms(r['latency_ms'].get('p99'))}, "
            f"{us(r.get('cpu_us_per_query'))} CPU/tx, server "
            f"{us(r.get('server_cpu_us_per_query'))}")
    turns = counted(results, client, workload) if rtt == 0 else None
    return text + (f", {turns['turns_per_query']:.2f} round trips/tx" if turns else "")


def judge(run: Run) -> list[Goal]:
    out = []
    for rtt, (vs_tx, vs_shot) in GOALS.items():
        where = f"{UNIT} (TPC-B, scale 1, 64 greenlets) " + (
            "locally" if rtt == 0 else f"at {rtt:g} ms RTT")
        suffix = "" if rtt == 0 else "_rtt10"
        mux = find(run.results, "pgmux", UNIT, rtt=rtt)
        detail = joined(*(_figures(run.results, c, UNIT, rtt) for c in UNIT_CLIENTS),
                        _figures(run.results, "psycopg2", TX, rtt))
        peer = find(run.results, "psycopg2", TX, rtt=rtt)
        out.append(ratio(f"unit_vs_transaction{suffix}", f"{where}: atomic() >= {vs_tx:g}x "
                         "psycopg2's BEGIN ... COMMIT", mux, peer, qps, vs_tx, detail))
        if rtt == 0:
            out.append(ratio("unit_vs_pgbench", f"{where}: atomic() >= {VS_PGBENCH:g}x pgbench "
                             "-M prepared -c 4 -j 1", mux, find(run.results, "pgbench", UNIT),
                             qps, VS_PGBENCH))
        shot = best_one_shot(run.results, rtt)
        out.append(ratio(f"unit_vs_one_shot{suffix}", f"{where}: atomic() >= {vs_shot:g}x the "
                         "best one-shot form (psycopg2 one string, psycopg 3 pipeline)", mux,
                         shot, qps, vs_shot, versus=label(shot) if shot else ""))
    return out


AREA = Area("atomic", "atomic units", judge, cases, workloads=(UNIT,))
