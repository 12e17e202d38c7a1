"""ORM: SQLAlchemy's ORM, a ``Session`` per request at the default isolation, on
``postgresql+pgmux`` (transactions multiplexed until they must pin) against
``postgresql+psycopg2`` with psycogreen and a ``QueuePool``, 64 greenlets and 4 server
connections in all each, locally and through the 10 ms delay line; and a burst of 200
sessions held open 50 ms each on one pinned connection."""

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
    find,
    joined,
    line,
    ms,
    not_measured,
    qps,
    ratio,
    us,
)
from pgmux.tooling.bench.orm import (
    BURST_HOLD_SECONDS,
    BURST_SESSIONS,
    ORM_CLIENTS,
    ORM_WORKLOAD_NAMES,
    split_text,
)

PEER = "orm-psycopg2"
RATIOS = {  # workload: (what a request does, >= x orm-psycopg2 locally, at 10 ms)
    "orm_read": ("get by primary key, close", 2.5, 15.0),
    "orm_mixed": ("4 reads to 1 write", 1.3, 4.0),
    "orm_write": ("get, change a balance, commit", 1.3, 1.0),
}
SESSIONS, SESSIONS_CONNECTIONS = "orm_sessions", 2  # orm-pgmux on pipeline 1 + pinned 1
SESSIONS_LIMIT_S = 0.5


def cases(plan: Plan) -> list[Any]:
    out = [case for workload in RATIOS for rtt in (0.0, RTT_MS)
           for case in plan.cases(workload, GREENLETS, rtt, ORM_CLIENTS)]
    return out + plan.cases(SESSIONS, 1, 0.0, ("orm-pgmux",), SESSIONS_CONNECTIONS)


def _figures(r: Result | None) -> str | None:
    """A client's figures: requests/s, p99, client and server CPU, each kind's p99."""
    if r is None:
        return None
    name = r["client"] + (f" ({split_text(r['connections'])})" if r["client"] == "orm-pgmux"
                          else "")
    text = (f"{name} {r['qps']:,.0f} req/s, p99 {ms(r['latency_ms'].get('p99'))}, CPU "
            f"{us(r.get('cpu_us_per_query'))}/req, server "
            f"{us(r.get('server_cpu_us_per_query'))}/req")
    kinds = r.get("kinds") or {}
    if len(kinds) > 1:
        text += "".join(f", {kind}s p99 {ms(k['latency_ms'].get('p99'))}"
                        for kind, k in sorted(kinds.items()))
    return text


def ratio_lines(run: Run) -> list[Goal]:
    out = []
    for workload, (what, local, far) in RATIOS.items():
        for rtt, goal in ((0.0, local), (RTT_MS, far)):
            where = "locally" if rtt == 0 else f"at {rtt:g} ms RTT"
            found = [find(run.results, client, workload, rtt=rtt) for client in ORM_CLIENTS]
            key = f"{workload}_{'local' if rtt == 0 else 'rtt10'}"
            out.append(ratio(key, f"{workload} ({what}) {where}: orm-pgmux >= {goal:g}x "
                             f"{PEER} req/s", found[0], find(run.results, PEER, workload,
                                                             rtt=rtt), qps, goal,
                             joined(*map(_figures, found))))
    return out


def sessions_line(run: Run) -> Goal:
    text = (f"{SESSIONS} ({BURST_SESSIONS} read sessions open {BURST_HOLD_SECONDS * 1000:g} ms "
            f"each, pinned_size=1): each burst <= {SESSIONS_LIMIT_S:g} s (one after another: "
            f"{BURST_SESSIONS * BURST_HOLD_SECONDS:g} s)")
    r = next((r for r in run.results if r["client"] == "orm-pgmux"
              and r["workload"] == SESSIONS and r["connections"] == SESSIONS_CONNECTIONS
              and not r.get("profiled") and not r.get("turns_counted")), None)
    slowest = (r or {}).get("latency_ms", {}).get("max")
    if r is None or slowest is None:
        return not_measured("orm_sessions", text, "needs orm-pgmux's orm_sessions case")
    detail = (f"orm-pgmux ({split_text(SESSIONS_CONNECTIONS)}): {r['queries']} bursts ended "
              f"in the window, {r.get('censored', 0)} still running at its end (counted with "
              f"their time so far); p50 {ms(r['latency_ms'].get('p50'))}")
    return line("orm_sessions", text, slowest <= SESSIONS_LIMIT_S * 1000,
                f"{slowest / 1000:.2f} s", detail)


def judge(run: Run) -> list[Goal]:
    return [*ratio_lines(run), sessions_line(run)]


AREA = Area("orm", "ORM", judge, cases, workloads=ORM_WORKLOAD_NAMES)
