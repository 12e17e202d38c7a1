"""Large results: 1,000 rows of 8 typed columns (int, text, timestamptz, numeric, float8,
bool, uuid, jsonb) per query from 16 greenlets, multiplexed; and 100,000 such rows
streamed by one greenlet (``session.stream()`` against a named cursor), with the growth
of resident memory while streaming."""

from __future__ import annotations

from typing import Any

from pgmux.tooling.bench.goals.common import (
    PEERS,
    Area,
    Goal,
    Plan,
    Result,
    Run,
    find,
    joined,
    line,
    not_measured,
    ratio,
)
from pgmux.tooling.bench.workloads import WIDE_RESULT_ROWS

WIDE, STREAM = "wide", "wide_stream"
SHAPES = {WIDE: 16, STREAM: 1}  # greenlets
GOALS = {  # workload: (>= x psycopg2's results or rows per second, its CPU per row / ours)
    WIDE: (2.0, 1.5), STREAM: (1.5, 1.5)}
STREAM_GROWTH_MIB = 16.0


def cases(plan: Plan) -> list[Any]:
    return [case for workload, greenlets in SHAPES.items()
            for case in plan.cases(workload, greenlets, 0.0, PEERS)]


def _rows(r: Result) -> float | None:
    return r.get("rows_per_s")


def _rows_per_cpu(r: Result) -> float | None:
    """Rows per CPU second: higher is better, so it divides like a throughput."""
    value = r.get("cpu_us_per_row")
    return 1e6 / value if value else None


def _figures(r: Result | None) -> str | None:
    if r is None:
        return None
    text = (f"{r['client']} {r['qps']:,.1f} {r['unit']}s/s, {_rows(r) or 0:,.0f} rows/s, "
            f"{r.get('cpu_us_per_row') or 0:.2f} us CPU/row")
    if r.get("rss_peak_mib") is not None:
        text += f", peak RSS {r['rss_peak_mib']:.0f} MiB (+{r['rss_growth_mib']:.1f})"
    return text


def judge(run: Run) -> list[Goal]:
    out = []
    for workload, (speed, cost) in GOALS.items():
        found = {c: find(run.results, c, workload, SHAPES[workload]) for c in PEERS}
        mux, peer = found["pgmux"], found["psycopg2"]
        if workload == WIDE:
            head = (f"{WIDE} ({WIDE_RESULT_ROWS:,} rows x 8 columns, 16 greenlets, multiplexed)")
            what = "results/s"
        else:
            head, what = f"{STREAM} (session.stream() vs a named cursor, 1 greenlet)", "rows/s"
        out += [ratio(f"{workload}_speed", f"{head}: pgmux >= {speed:g}x psycopg2 {what}", mux,
                      peer, _rows, speed, joined(*map(_figures, found.values()))),
                ratio(f"{workload}_cpu_per_row", f"{head}: pgmux client CPU per row <= "
                      f"1/{cost:g} of psycopg2's (ratio: psycopg2's / pgmux's)", mux, peer,
                      _rows_per_cpu, cost)]
    mux = find(run.results, "pgmux", STREAM, 1)
    growth = mux.get("rss_growth_mib") if mux else None
    text = (f"{STREAM}: pgmux's resident memory grows <= {STREAM_GROWTH_MIB:g} MiB while "
            "streaming")
    out.append(not_measured("wide_stream_memory", text, "needs pgmux's wide_stream case")
               if growth is None else line("wide_stream_memory", text,
                                           growth <= STREAM_GROWTH_MIB, f"+{growth:.1f} MiB"))
    return out


AREA = Area("results", "large results and streams", judge, cases, workloads=(WIDE, STREAM))
