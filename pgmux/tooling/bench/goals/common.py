"""What every goal area shares: a run's figures, one judged line, ratios and look-ups.

A goal line is a dict: ``id`` (unique across areas), ``area`` (the area's key, added
when the areas are judged together), ``target`` (what it asks, in words), ``status``
("met", "not met" or "not measured": a line whose figures are missing is never met),
``measured`` (the figure judged) and ``detail`` (the figures behind it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Result = dict[str, Any]
Goal = dict[str, Any]
CaseKey = tuple[float, str, int, int, str]  # (rtt, workload, greenlets, connections, client)

CONNECTIONS = 4  # server connections of every client in the goal cases
GREENLETS = 64
RTT_MS = 10.0  # the delay line's round trip in the goal cases that have one
PEERS = ("pgmux", "pgmux-python", "pgmux-before", "psycopg2", "psycopg3")
UNCHANGED = 0.9  # "unchanged or better": at least this share of the baseline's ratio


@dataclass
class Run:
    """Everything one run measured, and the baseline run it is judged against, if any."""

    results: list[Result]
    http: list[Result] = field(default_factory=list)
    micro: list[Result] = field(default_factory=list)
    instructions: list[Result] = field(default_factory=list)  # callgrind counts
    sqlalchemy_examples: list[Result] = field(default_factory=list)
    baseline: dict[str, Any] | None = None  # an earlier run's JSON document
    asked: bool = False  # --goals: judge every area, measured or not
    psycopg2_http: list[Result] = field(default_factory=list)  # the drop-in's http suite

    @property
    def baseline_results(self) -> list[Result] | None:
        return None if self.baseline is None else self.baseline.get("results", [])


@dataclass(frozen=True)
class Plan:
    """What the options allow the goal cases to use (``workloads`` None: every one)."""

    clients: Sequence[str]
    rtts: Sequence[float]
    workloads: Sequence[str] | None = None

    def allows(self, workload: str, rtt: float) -> bool:
        return rtt in self.rtts and (self.workloads is None or workload in self.workloads)

    def cases(self, workload: str, greenlets: int, rtt: float, clients: Sequence[str],
              connections: int = CONNECTIONS) -> list[CaseKey]:
        """The case of ``workload`` at that shape for each of ``clients`` chosen, in order."""
        if not self.allows(workload, rtt):
            return []
        return [(rtt, workload, greenlets, connections, client) for client in clients
                if client in self.clients]


@dataclass(frozen=True)
class Area:
    """A group of goal lines about one part of pgmux, and the cases they are judged on.

    ``judge(run)`` gives the lines; ``cases(plan)`` the cases to measure; without
    ``--goals`` the area is judged only when ``measured(run)`` says its figures are there.
    """

    key: str
    title: str
    judge: Callable[[Run], list[Goal]]
    cases: Callable[[Plan], list[CaseKey]] = lambda plan: []
    workloads: tuple[str, ...] = ()  # any of these measured: the area is judged
    endpoints: tuple[str, ...] = ()  # any of these http endpoints measured, likewise
    extra: Callable[[Run], bool] = lambda run: False  # other figures it judges

    def measured(self, run: Run) -> bool:
        return (any(r["workload"] in self.workloads for r in run.results)
                or any(r["endpoint"] in self.endpoints for r in run.http) or self.extra(run))


def line(key: str, text: str, met: bool | None, measured: str, detail: str = "") -> Goal:
    """One judged line: its status (met / not met / not measured) and figures."""
    status = "not measured" if met is None else ("met" if met else "not met")
    return {"id": key, "target": text, "status": status, "measured": measured, "detail": detail}


def not_measured(key: str, text: str, why: str) -> Goal:
    return line(key, text, None, "-", why)


def ratio(key: str, text: str, mine: Result | None, peer: Result | None,
          metric: Callable[[Result], float | None], goal: float, detail: str = "",
          versus: str = "") -> Goal:
    """``metric(mine) / metric(peer) >= goal``; not measured without both figures."""
    high = None if mine is None else metric(mine)
    low = None if peer is None else metric(peer)
    if high is None or not low:
        return not_measured(key, text, detail or "needs both sides of the ratio")
    value = high / low
    return line(key, text, value >= goal, f"{value:.2f}x" + (f" (vs {versus})" if versus else ""),
                detail)


def qps(r: Result) -> float:
    return r["qps"]


def rps(r: Result) -> float:
    return r["rps"]


def cpu(r: Result) -> float | None:
    return r.get("cpu_us_per_query")


def per_cpu(r: Result) -> float | None:
    """Operations per CPU second: higher is better, so it divides like a throughput."""
    value = r.get("cpu_us_per_query")
    return 1e6 / value if value else None


def find(results: list[Result] | None, client: str, workload: str, greenlets: int = GREENLETS,
         rtt: float = 0.0, connections: int = CONNECTIONS) -> Result | None:
    """The measured case of that shape, if any; the extra cases (profiled, turn-counted) and
    cases that completed nothing do not count."""
    for r in results or []:
        if (r["client"] == client and r["rtt_ms"] == rtt and r["greenlets"] == greenlets
                and r["connections"] == connections and r["workload"] == workload
                and not r.get("profiled") and not r.get("turns_counted") and r["queries"] > 0):
            return r
    return None


def counted(results: list[Result], client: str, workload: str) -> Result | None:
    """The turn-counted case of ``client``'s ``workload``, if it ran."""
    return next((r for r in results if r["client"] == client and r["workload"] == workload
                 and r.get("turns_counted") and r.get("turns_per_query") is not None), None)


def find_http(http: list[Result], app: str, endpoint: str, rtt: float = 0.0,
              connections: int | None = None) -> Result | None:
    """The measured http figures of that app, endpoint and RTT (from ``connections`` of
    wrk's, if given), if any."""
    for r in http:
        if (r["app"] == app and r["endpoint"] == endpoint and r["rtt_ms"] == rtt
                and r["requests"] and connections in (None, r["connections"])):
            return r
    return None


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms" if value < 100 else f"{value:,.0f} ms"


def us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} us" if value < 100 else f"{value:,.0f} us"


def figures(r: Result | None, unit: str = "query") -> str | None:
    """A client's throughput, p99 and CPU per operation, for a line's detail."""
    if r is None:
        return None
    return (f"{r['client']} {r['qps']:,.0f} {unit}/s, p99 {ms(r['latency_ms'].get('p99'))}, "
            f"{us(r.get('cpu_us_per_query'))} CPU/{unit}")


def http_figures(r: Result | None) -> str | None:
    if r is None:
        return None
    return (f"{r['app']} {r['rps']:,.0f} req/s, p99 {ms(r['latency_ms'].get('p99'))}, app CPU "
            f"{us(r.get('app_cpu_us_per_request'))}/req")


def joined(*parts: str | None) -> str:
    return "; ".join(part for part in parts if part)


def pair_ratio(results: list[Result] | None, mine: str, peer: str, workload: str,
               greenlets: int = GREENLETS, rtt: float = 0.0) -> float | None:
    """``mine``'s throughput over ``peer``'s at that shape, if both ran."""
    a, b = find(results, mine, workload, greenlets, rtt), find(results, peer, workload,
                                                                   greenlets, rtt)
    return a["qps"] / b["qps"] if a and b and b["qps"] else None


def unchanged(key: str, text: str, run: Run, workload: str, greenlets: int,
              rtt: float) -> Goal:
    """pgmux/psycopg2 at that shape at least ``UNCHANGED`` of the same ratio in the baseline."""
    now = pair_ratio(run.results, "pgmux", "psycopg2", workload, greenlets, rtt)
    before = pair_ratio(run.baseline_results, "pgmux", "psycopg2", workload, greenlets, rtt)
    detail = figures(find(run.results, "pgmux", workload, greenlets, rtt)) or ""
    if now is None:
        return not_measured(key, text, "needs pgmux and psycopg2 at this shape")
    if before is None:
        why = "pass --baseline RUN.json" if run.baseline is None else "not in the baseline"
        return line(key, text, None, f"{now:.2f}x now", joined(detail, f"{why} to judge"))
    return line(key, text, now >= UNCHANGED * before, f"{now:.2f}x (baseline {before:.2f}x)",
                detail)
