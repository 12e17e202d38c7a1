"""Control path cost: what pgmux's own Python costs a query, against gevent itself and
against psycopg2's C.

* gevent's floor (``pgmux.tooling.bench.floor``): one park-and-wake round of a caller,
  measured in the same run; ``SELECT $1::int`` at 64 greenlets costs a multiple of it;
* instructions per operation, compiled, counted by callgrind (``instructions``):
  ``SELECT $1``, TPC-B as an atomic unit, a 3-statement ``transaction()`` (against a
  baseline run's count: ``--baseline``);
* one greenlet running ``SELECT $1::int`` one after another on one connection, where there
  is nothing to multiplex: throughput and client CPU per query against psycopg2's;
* SQLAlchemy's own ``examples/performance`` suites ``short_selects`` and
  ``single_inserts``, single-threaded, pgmux and psycopg2 alternating
  (``sqlalchemy_examples``): every test at least as fast on pgmux.
"""

from __future__ import annotations

from typing import Any

from pgmux.tooling.bench.goals.common import (
    GREENLETS,
    Area,
    Goal,
    Plan,
    Run,
    cpu,
    figures,
    find,
    joined,
    line,
    not_measured,
    per_cpu,
    qps,
    ratio,
)
from pgmux.tooling.bench.instructions import per_operation

FLOOR = ("floor", GREENLETS, 0, "gevent")  # (workload, greenlets, connections, client)
FLOOR_MULTIPLE = 4.0
INSTRUCTIONS = (  # (id, workload, what, at most; None: a share of the baseline's count)
    ("select_instructions", "select_int", "SELECT $1 multiplexed (64 greenlets)", 25_000),
    ("unit_instructions", "tpcb_unit", "TPC-B as one atomic() unit", 250_000),
    ("transaction_instructions", "transaction", "a 3-statement transaction()", None),
)
TRANSACTION_SHARE = 0.6  # of the baseline's count
SEQUENTIAL = ("select_int", 1, 1)  # workload, greenlets, connections
SQLALCHEMY_SUITES = ("short_selects", "single_inserts")
SQLALCHEMY_RATIO = 1.0


def cases(plan: Plan) -> list[Any]:
    workload, greenlets, connections = SEQUENTIAL
    floor, callers, none, client = FLOOR
    return [*plan.cases(floor, callers, 0.0, (client,), none),
            *plan.cases(workload, greenlets, 0.0, ("pgmux", "psycopg2"), connections)]


def floor_result(run: Run) -> dict[str, Any] | None:
    workload, greenlets, connections, client = FLOOR
    return find(run.results, client, workload, greenlets, connections=connections)


def floor_line(run: Run) -> Goal:
    text = (f"select_int, 64 greenlets, 4 connections: pgmux client CPU per query <= "
            f"{FLOOR_MULTIPLE:g}x gevent's floor (one park-and-wake round)")
    floor, mux = floor_result(run), find(run.results, "pgmux", "select_int")
    if floor is None or mux is None or not cpu(floor):
        return not_measured("select_floor_multiple", text,
                            "needs the floor case and pgmux's select_int case")
    multiple = mux["cpu_us_per_query"] / floor["cpu_us_per_query"]
    return line("select_floor_multiple", text, multiple <= FLOOR_MULTIPLE, f"{multiple:.1f}x",
                f"pgmux {mux['cpu_us_per_query']:.2f} us CPU/query; the floor "
                f"{floor['cpu_us_per_query']:.2f} us CPU/round")


def instruction_lines(run: Run) -> list[Goal]:
    out = []
    before_rows = (run.baseline or {}).get("instructions") or []
    floor = per_operation(run.instructions, "compiled", "floor")
    for key, workload, what, most in INSTRUCTIONS:
        now = per_operation(run.instructions, "compiled", workload)
        before = per_operation(before_rows, "compiled", workload)
        floors = "" if not (now and floor) else (
            f"{now / floor:.1f}x gevent's floor ({floor:,.0f} per park-and-wake round)")
        if most is None:
            text = (f"{what}, compiled: instructions <= {TRANSACTION_SHARE:.0%} of the "
                    "baseline run's")
        else:
            text = f"{what}, compiled: instructions <= {most:,}"
        if now is None:
            out.append(not_measured(key, text, "needs callgrind's counts (valgrind)"))
            continue
        was = "" if before is None else f"baseline {before:,.0f}"
        if most is not None:
            out.append(line(key, text, now <= most, f"{now:,.0f}", joined(floors, was)))
        elif before is None:
            why = "pass --baseline RUN.json" if run.baseline is None else "not in the baseline"
            out.append(line(key, text, None, f"{now:,.0f}", joined(floors, f"{why} to judge")))
        else:
            out.append(line(key, text, now <= TRANSACTION_SHARE * before,
                            f"{now:,.0f} ({now / before:.0%})", joined(floors, was)))
    return out


def sequential_lines(run: Run) -> list[Goal]:
    workload, greenlets, connections = SEQUENTIAL
    mux, peer = (find(run.results, c, workload, greenlets, connections=connections)
                 for c in ("pgmux", "psycopg2"))
    where = "select_int, one greenlet, one connection, one query after another"
    detail = joined(figures(mux), figures(peer))
    return [ratio("sequential_qps", f"{where}: pgmux >= 1.0x psycopg2 q/s", mux, peer, qps, 1.0,
                  detail),
            ratio("sequential_cpu", f"{where}: pgmux client CPU per query <= psycopg2's "
                  "(ratio: psycopg2's / pgmux's)", mux, peer, per_cpu, 1.0)]


def sqlalchemy_lines(run: Run) -> list[Goal]:
    out = []
    for suite in SQLALCHEMY_SUITES:
        tests = [t for t in run.sqlalchemy_examples if t["suite"] == suite]
        text = (f"SQLAlchemy's examples/performance {suite}, single-threaded: pgmux >= "
                f"{SQLALCHEMY_RATIO:g}x psycopg2 on every test (psycopg2's time / pgmux's, "
                "median of the pairs)")
        judged = [t for t in tests if t.get("ratio")]
        if not judged:
            why = next((t["error"] for t in tests if t.get("error")), "not run")
            out.append(not_measured(f"sqlalchemy_{suite}", text, why))
            continue
        worst = min(judged, key=lambda t: t["ratio"])
        out.append(line(f"sqlalchemy_{suite}", text, len(judged) == len(tests) and all(
            t["ratio"] >= SQLALCHEMY_RATIO for t in judged),
            f"{worst['ratio']:.2f}x at worst ({worst['test']})",
            ", ".join(f"{t['test']} {t['ratio']:.2f}x" for t in judged)))
    return out


def judge(run: Run) -> list[Goal]:
    return [floor_line(run), *instruction_lines(run), *sequential_lines(run),
            *sqlalchemy_lines(run)]


def _extra(run: Run) -> bool:
    return bool(run.instructions or run.sqlalchemy_examples)


AREA = Area("control_path", "control path cost", judge, cases, workloads=("floor",),
            extra=_extra)
