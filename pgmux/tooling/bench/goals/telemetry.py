"""Telemetry costs nothing unless switched on: instructions per ``SELECT $1`` and per TPC-B
atomic unit with OpenTelemetry's API installed but no SDK configured, against the API
absent, compiled and pure Python (``instructions``: the medians of three alternating runs
of each); with an SDK exporting nowhere, printed beside them, not judged."""

from __future__ import annotations

from typing import Any

from pgmux.tooling.bench.goals.common import Area, Goal, Run, line, not_measured

GOAL_PERCENT = 2.0
WORKLOADS = ("select_int", "tpcb_unit")
IMPLEMENTATIONS = ("compiled", "python")


def _spread(row: dict[str, Any]) -> str:
    runs = row.get("runs", [])
    return f" ({min(runs):,.0f}-{max(runs):,.0f})" if len(runs) > 1 else ""


def judge(run: Run) -> list[Goal]:
    rows = {(r["implementation"], r["config"], r["workload"]): r for r in run.instructions}
    out = []
    for impl in IMPLEMENTATIONS:
        for workload in WORKLOADS:
            key = f"telemetry_{workload}_{impl}"
            text = (f"{workload}, {impl}: the API without an SDK within {GOAL_PERCENT:g} % of "
                    "the API absent")
            absent, api, sdk = (rows.get((impl, config, workload))
                                for config in ("absent", "api", "sdk"))
            if absent is None or api is None:
                out.append(not_measured(key, text, "needs --telemetry-cost (or --goals)"))
                continue
            unit = "instructions" if "instructions" in absent else "cpu_us"
            delta = (api[unit] - absent[unit]) / absent[unit] * 100 if absent[unit] else 0.0
            measured = (f"{delta:+.2f} % ({unit}/op, medians: absent {absent[unit]:,.0f}"
                        f"{_spread(absent)}, API {api[unit]:,.0f}{_spread(api)})")
            detail = "" if sdk is None else (
                f"SDK exporting nowhere: {sdk[unit]:,.0f} "
                f"({(sdk[unit] - absent[unit]) / absent[unit] * 100:+.1f} %)")
            if unit != "instructions":
                out.append(line(key, text, None, measured, "no valgrind: CPU time, too noisy "
                                "to judge 2 %"))
                continue
            out.append(line(key, text, abs(delta) <= GOAL_PERCENT, measured, detail))
    return out


def _extra(run: Run) -> bool:
    return any(r["config"] != "absent" for r in run.instructions)


AREA = Area("telemetry", "telemetry cost", judge, extra=_extra)
