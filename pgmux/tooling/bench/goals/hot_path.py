"""The multiplexed hot path: ``SELECT $1::int`` from many greenlets on 4 server connections.

pgmux (compiled and pure Python) against psycopg2 + psycogreen's naive pool at 64
greenlets; the cost per query as the callers grow to 4,096 (the scaling table); through
the 10 ms delay line against naive pools of the same size and of the size it would take
to match; and the fast queries' p99 when 1 % of the queries sleep 50 ms on the server
(``slow_mix`` against ``point_lookup``).
"""

from __future__ import annotations

import math
from typing import Any

from pgmux.tooling.bench.goals.common import (
    GREENLETS,
    PEERS,
    RTT_MS,
    Area,
    Goal,
    Plan,
    Result,
    Run,
    cpu,
    figures,
    find,
    joined,
    line,
    ms,
    not_measured,
    qps,
    ratio,
    unchanged,
)
from pgmux.tooling.bench.workloads import SLOW_FRACTION, SLOW_SECONDS

SELECT = "select_int"
VS_PSYCOPG2, CPU_US, QPS = 3.0, 8.0, 60_000
PYTHON_VS_PSYCOPG2 = 2.0
SCALING_GREENLETS = (64, 256, 1024, 4096)
SCALING_CLIENTS = ("pgmux", "pgmux-python", "psycopg2")
MANY, MANY_CPU, MANY_QPS = 4096, 1.2, 0.9  # callers; CPU per query and throughput vs 64
UNCHANGED_GREENLETS = 1024
NAIVE = ("pgmux-pinned", "pgmux-inflight1", "psycopg2", "psycopg3")  # no pipelining
RTT_VS_NAIVE, RTT_P99_RTTS, RTT_CONNECTIONS = 12.0, 2.0, 8.0
SLOW_P99 = 3.0
WHERE = "select_int (SELECT $1::int), 4 connections"


def cases(plan: Plan) -> list[Any]:
    out = plan.cases(SELECT, GREENLETS, 0.0, PEERS)
    for greenlets in SCALING_GREENLETS[1:]:
        out += plan.cases(SELECT, greenlets, 0.0, SCALING_CLIENTS)
    out += plan.cases(SELECT, GREENLETS, RTT_MS, PEERS)
    for workload in ("point_lookup", "slow_mix"):
        out += plan.cases(workload, GREENLETS, 0.0, PEERS)
    return out


def local_lines(run: Run) -> list[Goal]:
    mux, pure, peer = (find(run.results, c, SELECT) for c in ("pgmux", "pgmux-python",
                                                              "psycopg2"))
    where = f"{WHERE}, 64 greenlets"
    value = cpu(mux) if mux else None
    return [
        ratio("select_vs_psycopg2", f"{where}: pgmux >= {VS_PSYCOPG2:g}x psycopg2 q/s", mux, peer,
              qps, VS_PSYCOPG2, joined(figures(mux), figures(peer))),
        line("select_cpu", f"{where}: pgmux client CPU <= {CPU_US:g} us/query",
             None if value is None else value <= CPU_US, "-" if value is None else f"{value:.1f} us"),
        line("select_qps", f"{where}: pgmux >= {QPS:,} q/s", None if mux is None else
             mux["qps"] >= QPS, "-" if mux is None else f"{mux['qps']:,.0f} q/s"),
        ratio("select_python_vs_psycopg2", f"{where}: pgmux pure Python >= "
              f"{PYTHON_VS_PSYCOPG2:g}x psycopg2 q/s", pure, peer, qps, PYTHON_VS_PSYCOPG2,
              joined(figures(pure), figures(peer)) or "needs pgmux-python and psycopg2"),
    ]


def scaling_lines(run: Run) -> list[Goal]:
    few, many = find(run.results, "pgmux", SELECT), find(run.results, "pgmux", SELECT, MANY)
    where = f"{WHERE}, {MANY:,} greenlets against 64"
    texts = (f"{where}: CPU per query <= {MANY_CPU:g}x", f"{where}: q/s >= {MANY_QPS:g}x")
    same = unchanged("callers_1024_unchanged", f"{WHERE}, 1,024 greenlets: pgmux/psycopg2 "
                     "unchanged or better (>= 90 % of the baseline's ratio)", run, SELECT,
                     UNCHANGED_GREENLETS, 0.0)
    if few is None or many is None or not cpu(few) or not few["qps"]:
        why = "needs pgmux at 64 and 4,096 greenlets"
        return [not_measured("callers_4096_cpu", texts[0], why),
                not_measured("callers_4096_qps", texts[1], why), same]
    cost, share = many["cpu_us_per_query"] / few["cpu_us_per_query"], many["qps"] / few["qps"]
    detail = (f"pgmux {few['qps']:,.0f} q/s, {few['cpu_us_per_query']:.1f} us CPU/query at 64; "
              f"{many['qps']:,.0f} q/s, {many['cpu_us_per_query']:.1f} us at {MANY:,}")
    return [line("callers_4096_cpu", texts[0], cost <= MANY_CPU, f"{cost:.2f}x", detail),
            line("callers_4096_qps", texts[1], share >= MANY_QPS, f"{share:.2f}x"), same]


def naive_needed(mux: Result, naive: Result) -> float:
    """Connections a naive pool like ``naive`` needs to match ``mux``'s throughput."""
    per_connection = naive["qps"] / naive["connections"]
    return mux["qps"] / per_connection if per_connection else math.inf


def rtt_lines(run: Run) -> list[Goal]:
    where = f"{WHERE}, 64 greenlets, {RTT_MS:g} ms RTT"
    texts = {"rtt10_vs_naive": f"{where}: pgmux >= {RTT_VS_NAIVE:g}x the naive pool of the "
                               "same size",
             "rtt10_p99": f"{where}: pgmux p99 < {RTT_P99_RTTS:g} round trips",
             "rtt10_connections": f"{where}: a naive pool needs >= {RTT_CONNECTIONS:g}x the "
                                  "server connections to match pgmux"}
    mux = find(run.results, "pgmux", SELECT, rtt=RTT_MS)
    naive = [r for r in (find(run.results, c, SELECT, rtt=RTT_MS) for c in NAIVE) if r]
    out = []
    if mux is None or not naive:
        out += [not_measured(key, text, "needs pgmux and a naive pool at 10 ms")
                for key, text in texts.items()]
    else:
        strongest = max(naive, key=qps)
        value = mux["qps"] / strongest["qps"]
        each = ", ".join(f"{r['client']} {r['qps']:,.0f} q/s" for r in naive)
        p99 = mux["latency_ms"]["p99"]
        needs = {r["client"]: naive_needed(mux, r) for r in naive}
        held = mux.get("peak_server_connections") or mux["connections"]
        fewest = min(needs.values())
        out += [
            line("rtt10_vs_naive", texts["rtt10_vs_naive"], value >= RTT_VS_NAIVE,
                 f"{value:.1f}x (vs {strongest['client']})",
                 f"pgmux {mux['qps']:,.0f} q/s; {each}"),
            line("rtt10_p99", texts["rtt10_p99"], p99 < RTT_P99_RTTS * RTT_MS, ms(p99)),
            line("rtt10_connections", texts["rtt10_connections"],
                 fewest / held >= RTT_CONNECTIONS, f"{fewest / held:.1f}x ({fewest:.0f} vs "
                 f"{held})", "connections needed = pgmux q/s / the naive pool's q/s per "
                 "connection: " + ", ".join(f"{c} {n:.0f}" for c, n in needs.items())),
        ]
    out.append(unchanged("rtt10_unchanged", f"{where}: pgmux/psycopg2 unchanged or better "
                         "(>= 90 % of the baseline's ratio)", run, SELECT, GREENLETS, RTT_MS))
    return out


def slow_mix_line(run: Run) -> Goal:
    text = (f"slow_mix ({SLOW_FRACTION:.0%} pg_sleep({SLOW_SECONDS:g}), the rest point "
            f"lookups, 64 greenlets): pgmux fast-query p99 <= {SLOW_P99:g}x the p99 without "
            "slow queries (point_lookup)")
    lines, ratios = [], {}
    for client in PEERS:
        mixed, alone = (find(run.results, client, w) for w in ("slow_mix", "point_lookup"))
        fast = (mixed or {}).get("kinds", {}).get("fast", {}).get("latency_ms", {}).get("p99")
        if fast is None or alone is None or not alone["latency_ms"].get("p99"):
            continue
        ratios[client] = fast / alone["latency_ms"]["p99"]
        lines.append(f"{client} fast p99 {ms(fast)} vs {ms(alone['latency_ms']['p99'])} "
                     f"without: {ratios[client]:.2f}x")
    value = ratios.get("pgmux")
    return line("slow_mix_p99", text, None if value is None else value <= SLOW_P99,
                "-" if value is None else f"{value:.2f}x", "; ".join(lines))


def judge(run: Run) -> list[Goal]:
    return [*local_lines(run), *scaling_lines(run), *rtt_lines(run), slow_mix_line(run)]


AREA = Area("hot_path", "multiplexed hot path", judge, cases,
            workloads=(SELECT, "point_lookup", "slow_mix"))
