"""The goals ``pgmux bench --goals`` judges, one module per area, and the cases they need.

An area (``common.Area``) gives its lines (each met / not met / not measured, with the
figures behind it) and the cases its lines are judged on. Every line compares figures
measured side by side in one run, 4 server connections per client, or a count against a
baseline run (``--baseline``: an earlier run's JSON). To add an area, write its module
(see any of them) and list its ``AREA`` here.
"""

from __future__ import annotations

from pgmux.tooling.bench.goals import (
    atomic,
    control_path,
    fan_out,
    hot_path,
    http_apps,
    orm,
    psycopg2_dropin,
    pure_python,
    results,
    telemetry,
    transactions,
    transport,
)
from pgmux.tooling.bench.goals.common import Area, CaseKey, Goal, Plan, Run

AREAS: tuple[Area, ...] = (
    hot_path.AREA, control_path.AREA, fan_out.AREA, atomic.AREA, transactions.AREA,
    orm.AREA, results.AREA, http_apps.AREA, psycopg2_dropin.AREA, pure_python.AREA,
    telemetry.AREA, transport.AREA)
HTTP_RTTS = (0.0, 10.0)  # the http suite's in a goal run
PROFILED_WORKLOADS = ("select_int", "tpcb", "wide", "tpcb_unit")  # --profile in a goal run


def cases(plan: Plan) -> list[CaseKey]:
    """Every area's cases, in the areas' order, each once."""
    found: dict[CaseKey, None] = {}
    for area in AREAS:
        for case in area.cases(plan):
            found[case] = None
    return list(found)


def judge(run: Run) -> list[Goal]:
    """Every line of the areas judged: all of them with ``run.asked`` (--goals), else those
    whose figures were measured; each line with its area's key."""
    out = []
    for area in AREAS:
        if run.asked or area.measured(run):
            out += [{"area": area.key, **goal} for goal in area.judge(run)]
    return out


def titles() -> dict[str, str]:
    """Area key -> its title, in order."""
    return {area.key: area.title for area in AREAS}


__all__ = ["AREAS", "HTTP_RTTS", "PROFILED_WORKLOADS", "Plan", "Run", "cases", "judge",
           "titles"]
