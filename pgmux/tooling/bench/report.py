"""Figures for people and machines: terminal and Markdown tables, the machine, JSON."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Iterable
from typing import Any

from pgmux._native import describe as describe_implementation

Result = dict[str, Any]

CASE_COLUMNS = (  # what a case is
    ("rtt", lambda r: f"{r['rtt_ms']:g}ms"),
    ("workload", lambda r: r["workload"]),
    ("client", lambda r: r["client"] + _role(r)),
    ("grn", lambda r: str(r["greenlets"])),
    ("conns", lambda r: str(r["connections"])),
)
RESULT_COLUMNS = (
    *CASE_COLUMNS,
    ("q/s", lambda r: f"{r['qps']:,.0f}"),
    ("p50 ms", lambda r: _ms(r, "p50")),
    ("p95 ms", lambda r: _ms(r, "p95")),
    ("p99 ms", lambda r: _ms(r, "p99")),
    ("max ms", lambda r: _ms(r, "max")),
    ("cpu us/q", lambda r: _num(r.get("cpu_us_per_query"), "{:.1f}")),
    ("x floor", lambda r: _num(r.get("cpu_floor_multiple"), "{:,.1f}")),
    ("(sys)", lambda r: _num(r.get("cpu_system_us_per_query"), "{:.1f}")),
    ("srv conns", lambda r: str(r.get("peak_server_connections", "-"))),
    ("units/read", lambda r: _num((r.get("fill") or {}).get("units_per_readable"), "{:.2f}")),
    ("flush/unit", lambda r: _num((r.get("fill") or {}).get("flush_calls_per_unit"), "{:.3f}")),
    ("errors", lambda r: str(r.get("errors", 0))),
)
OPERATION_COLUMNS = (  # the workloads whose operation is not one small query
    *CASE_COLUMNS,
    ("op", lambda r: r.get("unit", "query")),
    ("ops/s", lambda r: f"{r['qps']:,.1f}"),
    ("rows/s", lambda r: _num(r.get("rows_per_s"), "{:,.0f}")),
    ("p99 ms", lambda r: _ms(r, "p99")),
    ("cpu us/op", lambda r: _num(r.get("cpu_us_per_query"), "{:,.1f}")),
    ("x floor", lambda r: _num(r.get("cpu_floor_multiple"), "{:,.1f}")),
    ("cpu us/row", lambda r: _num(r.get("cpu_us_per_row"), "{:.2f}")),
    ("srv cpu us/op", lambda r: _num(r.get("server_cpu_us_per_query"), "{:,.1f}")),
    ("turns/op", lambda r: _num(r.get("turns_per_query"), "{:.2f}")),
    ("B out/op", lambda r: _num(r.get("bytes_out_per_query"), "{:,.0f}")),
    ("B in/op", lambda r: _num(r.get("bytes_in_per_query"), "{:,.0f}")),
    ("rss MiB", lambda r: _num(r.get("rss_peak_mib"), "{:.0f}")),
    ("(growth)", lambda r: _num(r.get("rss_growth_mib"), "+{:.1f}")),
    ("fast p99 ms", lambda r: _kind_p99(r, "fast")),
    ("slow p99 ms", lambda r: _kind_p99(r, "slow")),
)
HTTP_COLUMNS = (
    ("rtt", lambda r: f"{r['rtt_ms']:g}ms"),
    ("endpoint", lambda r: r["endpoint"]),
    ("app", lambda r: r["app"]),
    ("conns", lambda r: str(r["connections"])),
    ("req/s", lambda r: f"{r['rps']:,.0f}"),
    ("p50 ms", lambda r: _ms(r, "p50")),
    ("p90 ms", lambda r: _ms(r, "p90")),
    ("p99 ms", lambda r: _ms(r, "p99")),
    ("max ms", lambda r: _ms(r, "max")),
    ("app cpu us/req", lambda r: _num(r.get("app_cpu_us_per_request"), "{:,.0f}")),
    ("srv cpu us/req", lambda r: _num(r.get("server_cpu_us_per_request"), "{:,.0f}")),
    ("srv conns", lambda r: str(r.get("peak_server_connections", "-"))),
    ("errors", lambda r: str(r.get("errors", 0))),
)
MICRO_COLUMNS = (
    ("stream", lambda r: r["stream"]),
    ("delivery", lambda r: r["mode"]),
    ("read by", lambda r: r.get("reader", "-")),
    ("us/op", lambda r: f"{r['time_us']:,.1f}"),
    ("MiB/s", lambda r: f"{r['mib_per_s']:,.1f}"),
    ("peak alloc", lambda r: _size(r["peak_alloc_bytes"])),
    ("retained", lambda r: _size(r["retained_buffer_bytes"])),
    ("peak/payload", lambda r: _num(r.get("peak_over_payload"), "{:.2f}")),
    ("copies", lambda r: _num(r.get("payload_copies"), "{}")),
)


def _role(result: Result) -> str:
    """A mark for the extra cases: the profiled run, the turn-counted run, the naive pool
    sized to match pgmux."""
    if result.get("profiled"):
        return " (profiled)"
    if result.get("turns_counted"):
        return " (turns counted)"
    return " (sized to match)" if result.get("verify") else ""


UNITS = {"query": "queries", "tx": "transactions", "result": "results", "stream": "streams"}


def plural(unit: str) -> str:
    """``query`` -> ``queries``: the unit of a workload's operations, counted."""
    return UNITS.get(unit, unit + "s")


def has_operation_figures(result: Result) -> bool:
    """Whether ``result`` belongs in the OPERATION_COLUMNS table."""
    return result.get("unit", "query") != "query" or "kinds" in result or bool(
        result.get("turns_counted"))


def _kind_p99(result: Result, kind: str) -> str:
    figures = result.get("kinds", {}).get(kind)
    return "-" if figures is None else _ms(figures, "p99")


def _ms(result: Result, key: str) -> str:
    value = result.get("latency_ms", {}).get(key)
    return "-" if value is None else (f"{value:.2f}" if value < 100 else f"{value:,.0f}")


def _num(value: Any, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _size(count: int) -> str:
    if count >= 1024 * 1024:
        return f"{count / 1048576:.2f} MiB"
    if count >= 1024:
        return f"{count / 1024:.1f} KiB"
    return f"{count} B"


def table(rows: Iterable[Any], columns: tuple, markdown: bool = False) -> str:
    """A fixed-width (or markdown) table of ``rows`` with ``(title, formatter)`` columns."""
    cells = [[fmt(row) for _, fmt in columns] for row in rows]
    titles = [title for title, _ in columns]
    if markdown:
        lines = ["| " + " | ".join(titles) + " |", "|" + "---|" * len(titles)]
        lines += ["| " + " | ".join(row) + " |" for row in cells]
        return "\n".join(lines)
    widths = [max(len(t), *(len(row[i]) for row in cells)) if cells else len(t)
              for i, t in enumerate(titles)]
    right = [all(_numeric(row[i]) for row in cells) for i in range(len(titles))]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if r else v.ljust(w)
                         for v, w, r in zip(values, widths, right, strict=True)).rstrip()

    return "\n".join([line(titles), *(line(row) for row in cells)])


def _numeric(cell: str) -> bool:
    return cell == "-" or cell[:1].isdigit()


def sort_results(results: list[Result]) -> list[Result]:
    return sorted(results, key=lambda r: (r["rtt_ms"], r["workload"], r["greenlets"],
                                          r["connections"], r["client"]))


GOAL_COLUMNS = (
    ("status", lambda t: t["status"].upper() if t["status"] != "met" else "met"),
    ("id", lambda t: t["id"]),
    ("goal", lambda t: t["target"]),
    ("measured", lambda t: t["measured"]),
)


def format_goals(goals: list[dict[str, Any]]) -> str:
    """Judged goal lines as a table, then each line's figures (``detail``) by id."""
    text = table(goals, GOAL_COLUMNS)
    details = [f"  {t['id']}: {t['detail']}" for t in goals if t.get("detail")]
    return text + ("\n" + "\n".join(details) if details else "")


# -- machine, JSON --------------------------------------------------------------------------------


def machine_info(server_version: str | None) -> dict[str, Any]:
    """What the figures were measured on."""
    import gevent

    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpus": os.cpu_count(), "cpu_model": model, "platform": platform.platform(),
            "os": _os_name(), "memory_gib": _memory_gib(),
            "load_average_1_5_15min": [round(x, 2) for x in load] if load else None,
            "python": platform.python_version(), "implementation": platform.python_implementation(),
            "gevent": gevent.__version__, "postgresql": server_version,
            "pgmux_implementation": describe_implementation()}


def write_json(path: str, document: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(document, f, indent=1, sort_keys=False)
        f.write("\n")


def _os_name() -> str:
    """The distribution's name (/etc/os-release), else the system's."""
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return f"{platform.system()} {platform.release()}"


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None
