"""Pure Python, the reference implementation: no slower than a baseline.

Counted by callgrind (``instructions``): pure Python's instructions per ``SELECT $1``, per
TPC-B atomic unit and per 3-statement ``transaction()`` against a baseline run's counts
(``--baseline``), within the counts' own noise. Timed: ``pgmux-python`` against
``pgmux-before`` (the checkout in ``$PGMUX_BENCH_BEFORE``) in this run, throughput and CPU
per operation; else pure Python's ratio to psycopg2 in this run against the same ratio in
the baseline run.
"""

from __future__ import annotations

from typing import Any

from pgmux.tooling.bench.goals.common import (
    GREENLETS,
    Area,
    Goal,
    Result,
    Run,
    find,
    line,
    not_measured,
)
from pgmux.tooling.bench.instructions import per_operation

INSTRUCTIONS = (("python_select_instructions", "select_int", "SELECT $1 multiplexed"),
                ("python_unit_instructions", "tpcb_unit", "a TPC-B atomic unit"),
                ("python_transaction_instructions", "transaction", "a 3-statement transaction()"))
NOISE = 1.02  # a count moves by up to about 1 % between identical runs
SHARE = 0.95  # timed: at least this share of before
CASES = (  # (id, workload, greenlets)
    ("python_select_int", "select_int", GREENLETS), ("python_select_int_4096", "select_int", 4096),
    ("python_point_lookup", "point_lookup", GREENLETS), ("python_wide", "wide", 16),
    ("python_tpcb", "tpcb", GREENLETS))


def instruction_lines(run: Run) -> list[Goal]:
    before_rows = (run.baseline or {}).get("instructions") or []
    out = []
    for key, workload, what in INSTRUCTIONS:
        text = (f"{what}, pure Python: instructions <= the baseline run's (+{NOISE - 1:.0%}, "
                "the counts' noise)")
        now = per_operation(run.instructions, "python", workload)
        before = per_operation(before_rows, "python", workload)
        if now is None:
            out.append(not_measured(key, text, "needs callgrind's counts (valgrind)"))
        elif before is None:
            why = "pass --baseline RUN.json" if run.baseline is None else "not in the baseline"
            out.append(line(key, text, None, f"{now:,.0f}", f"{why} to judge"))
        else:
            out.append(line(key, text, now <= NOISE * before, f"{now:,.0f} ({now / before:.1%} "
                            "of the baseline's)", f"baseline {before:,.0f}"))
    return out


def _pure(results: list[Result] | None, workload: str, greenlets: int) -> Result | None:
    """Pure Python's result: pgmux-python's, else pgmux's from a PGMUX_PURE_PYTHON=1 run."""
    found = find(results, "pgmux-python", workload, greenlets)
    if found is None:
        found = find(results, "pgmux", workload, greenlets)
        if found is not None and found.get("pgmux_implementation") != "python":
            return None
    return found


def _versus_psycopg2(results: list[Result] | None, workload: str,
                     greenlets: int) -> float | None:
    pure, peer = _pure(results, workload, greenlets), find(results, "psycopg2", workload,
                                                           greenlets)
    return pure["qps"] / peer["qps"] if pure and peer and peer["qps"] else None


def timed_line(run: Run, key: str, workload: str, greenlets: int) -> Goal:
    text = (f"pure Python, {workload} ({greenlets:,} greenlets): >= {SHARE:.0%} of before "
            "(pgmux-before in this run, else the baseline run's ratio to psycopg2)")
    pure, before = (find(run.results, c, workload, greenlets)
                    for c in ("pgmux-python", "pgmux-before"))
    if pure and before and before["qps"] and pure["cpu_us_per_query"]:
        speed = pure["qps"] / before["qps"]
        cost = before["cpu_us_per_query"] / pure["cpu_us_per_query"]
        return line(key, text, min(speed, cost) >= SHARE, f"{speed:.2f}x ops/s, {cost:.2f}x CPU",
                    f"pgmux-python {pure['qps']:,.1f}/s, {pure['cpu_us_per_query']:,.1f} us "
                    f"CPU/op; pgmux-before {before['qps']:,.1f}/s, "
                    f"{before['cpu_us_per_query']:,.1f} us")
    now = _versus_psycopg2(run.results, workload, greenlets)
    was = _versus_psycopg2(run.baseline_results, workload, greenlets)
    if now is None:
        return not_measured(key, text, "needs pgmux-python and pgmux-before, or pgmux-python "
                            "(or a PGMUX_PURE_PYTHON=1 run) and psycopg2 here and in --baseline")
    if was is None:
        why = "pass --baseline RUN.json" if run.baseline is None else "not in the baseline"
        return line(key, text, None, f"{now:.2f}x psycopg2 now", f"{why} to judge")
    return line(key, text, now >= SHARE * was, f"{now:.2f}x psycopg2 (baseline {was:.2f}x)")


def judge(run: Run) -> list[Goal]:
    return [*instruction_lines(run), *(timed_line(run, *case) for case in CASES)]


def _extra(run: Run) -> bool:
    return any(r["client"] in ("pgmux-python", "pgmux-before") for r in run.results) or any(
        row["implementation"] == "python" for row in run.instructions)


def cases(plan: Any) -> list[Any]:
    return [case for _, workload, greenlets in CASES
            for case in plan.cases(workload, greenlets, 0.0, ("pgmux-python", "pgmux-before",
                                                             "psycopg2"))]


AREA = Area("pure_python", "pure Python", judge, cases, extra=_extra)
