"""Figures for people and machines: terminal tables, the targets of issue 5, JSON, PNG plots."""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Callable, Iterable
from typing import Any

from pgmux._native import describe as describe_implementation
from pgmux.tooling.bench.clients import NAIVE

Result = dict[str, Any]

# Issue 5's targets, as data.
TARGET_GREENLETS, TARGET_CONNECTIONS, TARGET_WORKLOAD = 64, 4, "select_int"
TARGET_LOCAL_QPS = 60_000
TARGET_PEER_RATIO = 2.0
TARGET_CPU_US = 15.0
TARGET_RTT_MS = 10.0
TARGET_RTT_RATIO = 12.0
TARGET_P99_RTTS = 2.0
TARGET_CONNECTION_RATIO = 8.0
TARGET_COPIES = 2.0
TARGET_RETAINED = 256 * 1024

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


# -- targets ------------------------------------------------------------------------------------


def find_result(results: list[Result], client: str, rtt: float,
                connections: int = TARGET_CONNECTIONS, greenlets: int = TARGET_GREENLETS,
                workload: str = TARGET_WORKLOAD) -> Result | None:
    """The measured case of that shape (by default issue 5's, select_int), if any; the
    extra cases (profiled, turn-counted) do not count."""
    for r in results:
        if (r["client"] == client and r["rtt_ms"] == rtt and r["greenlets"] == greenlets
                and r["connections"] == connections and r["workload"] == workload
                and not r.get("profiled") and not r.get("turns_counted") and r["queries"] > 0):
            return r
    return None


def target(key: str, text: str, met: bool | None, measured: str, detail: str = "") -> dict:
    """One judged target or goal: its status (met / not met / not measured) and figures."""
    status = "not measured" if met is None else ("met" if met else "not met")
    return {"id": key, "target": text, "status": status, "measured": measured, "detail": detail}


def evaluate_targets(results: list[Result], micro: list[Result]) -> list[dict[str, Any]]:
    """Issue 5's targets, each met / not met / not measured, with the figures behind it.

    Only the parts that ran are judged: no end-to-end targets without select_int results,
    no transport targets without micro-benchmarks.
    """
    ran = any(r["workload"] == TARGET_WORKLOAD for r in results)
    end_to_end = [*_local_targets(results), *_rtt_targets(results)] if ran else []
    return end_to_end + (_micro_targets(micro) if micro else [])


def _local_targets(results: list[Result]) -> list[dict[str, Any]]:
    where = f"{TARGET_GREENLETS} greenlets, {TARGET_CONNECTIONS} connections, SELECT $1::int"
    mux = find_result(results, "pgmux", 0)
    peer = find_result(results, "psycopg2", 0)
    out = []
    if mux and peer and peer["qps"]:
        ratio = mux["qps"] / peer["qps"]
        out.append(target("local_vs_psycopg2", f"local, {where}: pgmux >= 2x psycopg2",
                           ratio >= TARGET_PEER_RATIO, f"{ratio:.2f}x",
                           f"{mux['qps']:,.0f} vs {peer['qps']:,.0f} q/s"))
    else:
        out.append(target("local_vs_psycopg2", f"local, {where}: pgmux >= 2x psycopg2",
                           None, "-", "needs pgmux and psycopg2 at RTT 0"))
    qps = mux["qps"] if mux else None
    out.append(target("local_qps", f"local, {where}: pgmux >= {TARGET_LOCAL_QPS:,} q/s",
                       None if qps is None else qps >= TARGET_LOCAL_QPS,
                       "-" if qps is None else f"{qps:,.0f} q/s"))
    cpu = mux.get("cpu_us_per_query") if mux else None
    out.append(target("local_cpu", f"local, {where}: client CPU <= {TARGET_CPU_US:g} us/query",
                       None if cpu is None else cpu <= TARGET_CPU_US,
                       "-" if cpu is None else f"{cpu:.1f} us/query"))
    return out


def naive_needed(mux: Result, naive: Result) -> float:
    """Connections a naive pool like ``naive`` needs to match ``mux``'s throughput."""
    per_connection = naive["qps"] / naive["connections"]
    return mux["qps"] / per_connection if per_connection else math.inf


def _rtt_targets(results: list[Result]) -> list[dict[str, Any]]:
    rtt = TARGET_RTT_MS
    mux = find_result(results, "pgmux", rtt)
    naive = [r for r in (find_result(results, name, rtt) for name in NAIVE) if r and r["qps"]]
    if mux is None or not naive:
        reason = "needs pgmux and a naive client at RTT 10 ms"
        return [target(k, t, None, "-", reason) for k, t in (
            ("rtt_throughput", "10 ms RTT: pgmux >= 12x the naive pool of equal size"),
            ("rtt_p99", "10 ms RTT: pgmux p99 < 2 RTT"),
            ("rtt_connections", "10 ms RTT: 8x fewer server connections than a naive pool "
                                "needs to match it"))]
    strongest = max(naive, key=lambda r: r["qps"])
    ratios = ", ".join(f"{r['client']} {mux['qps'] / r['qps']:.1f}x ({r['qps']:,.0f} q/s)"
                       for r in naive)
    ratio = mux["qps"] / strongest["qps"]
    p99 = mux["latency_ms"]["p99"]
    mux_connections = mux.get("peak_server_connections") or mux["connections"]
    needs = {r["client"]: naive_needed(mux, r) for r in naive}
    fewest = min(needs.values())
    connection_ratio = fewest / mux_connections
    needs_text = ", ".join(f"{name} {value:.0f}" for name, value in needs.items())
    return [
        target("rtt_throughput", "10 ms RTT: pgmux >= 12x the naive pool of equal size",
                ratio >= TARGET_RTT_RATIO, f"{ratio:.1f}x vs {strongest['client']}",
                f"pgmux {mux['qps']:,.0f} q/s; vs each: {ratios}"),
        target("rtt_p99", "10 ms RTT: pgmux p99 < 2 RTT",
                p99 < TARGET_P99_RTTS * rtt, f"{p99:.1f} ms"),
        target("rtt_connections",
                "10 ms RTT: 8x fewer server connections than a naive pool needs to match it",
                connection_ratio >= TARGET_CONNECTION_RATIO,
                f"{connection_ratio:.1f}x ({fewest:.0f} vs {mux_connections})",
                f"naive connections needed = pgmux q/s / naive q/s per connection: {needs_text}"),
    ]


def _micro_targets(micro: list[Result]) -> list[dict[str, Any]]:
    fields = [m for m in micro if m.get("payload_copies") is not None]
    if not micro:
        return [target(k, t, None, "-", "run the micro-benchmarks (--micro)") for k, t in (
            ("field_copies", "1 MiB field decoded with <= 2 copies of the payload"),
            ("retained_buffers", "read buffers retained after the result <= 256 KiB"))]
    worst = max(fields, key=lambda m: m["peak_over_payload"]) if fields else None
    retained = max(micro, key=lambda m: m["retained_buffer_bytes"])
    out = []
    if worst is None:
        out.append(target("field_copies", "1 MiB field decoded with <= 2 copies of the payload",
                           None, "-"))
    else:
        copies = ", ".join(f"{m['stream']}/{m['mode']} {m['payload_copies']} "
                           f"(peak {m['peak_over_payload']:.2f}x)" for m in fields)
        out.append(target(
            "field_copies", "1 MiB field decoded with <= 2 copies of the payload",
            worst["payload_copies"] <= TARGET_COPIES,
            f"{worst['payload_copies']} (peak {worst['peak_over_payload']:.2f}x the payload, "
            f"{worst['stream']} {worst['mode']})",
            f"whole payloads alive at the tracemalloc peak: {copies}"))
    out.append(target("retained_buffers", "read buffers retained after the result <= 256 KiB",
                       retained["retained_buffer_bytes"] <= TARGET_RETAINED,
                       _size(retained["retained_buffer_bytes"]) + " (largest)"))
    return out


TARGET_COLUMNS = (
    ("status", lambda t: t["status"].upper() if t["status"] != "met" else "met"),
    ("target", lambda t: t["target"]),
    ("measured", lambda t: t["measured"]),
)


def format_targets(targets: list[dict[str, Any]], markdown: bool = False) -> str:
    text = table(targets, TARGET_COLUMNS, markdown)
    details = [f"  {t['id']}: {t['detail']}" for t in targets if t.get("detail")]
    return text + ("\n" + "\n".join(details) if details and not markdown else "")


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
            "load_average_1_5_15min": [round(x, 2) for x in load] if load else None,
            "python": platform.python_version(), "implementation": platform.python_implementation(),
            "gevent": gevent.__version__, "postgresql": server_version,
            "pgmux_implementation": describe_implementation()}


def write_json(path: str, document: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(document, f, indent=1, sort_keys=False)
        f.write("\n")


# -- plots ------------------------------------------------------------------------------------------


def plot(path: str, results: list[Result]) -> list[str]:
    """PNG plots, one file per workload: throughput vs greenlets and a latency CDF per RTT.

    Returns the files written; raises ImportError without matplotlib.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    measured = [r for r in results if not r.get("profiled") and not r.get("turns_counted")]
    workloads = list(dict.fromkeys(r["workload"] for r in measured))
    stem, ext = os.path.splitext(path)
    for index, workload in enumerate(workloads):
        rows = [r for r in measured if r["workload"] == workload]
        name = path if index == 0 else f"{stem}-{workload}{ext or '.png'}"
        figure = _plot_workload(plt, workload, rows)
        figure.savefig(name, dpi=110)
        plt.close(figure)
        written.append(name)
    return written


def _plot_workload(plt: Any, workload: str, rows: list[Result]) -> Any:
    rtts = sorted({r["rtt_ms"] for r in rows})
    figure, axes = plt.subplots(2, len(rtts), figsize=(5.5 * len(rtts), 8), squeeze=False)
    for col, rtt in enumerate(rtts):
        at_rtt = [r for r in rows if r["rtt_ms"] == rtt]
        _throughput_panel(axes[0][col], at_rtt, f"{workload}, RTT {rtt:g} ms")
        _cdf_panel(axes[1][col], at_rtt, rtt)
    figure.tight_layout()
    return figure


def _throughput_panel(ax: Any, rows: list[Result], title: str) -> None:
    for client in dict.fromkeys(r["client"] for r in rows):
        mine = sorted((r for r in rows if r["client"] == client), key=lambda r: r["greenlets"])
        base = [r for r in mine if r["connections"] == mine[0]["connections"]]
        ax.plot([r["greenlets"] for r in base], [r["qps"] for r in base], marker="o", label=client)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("greenlets")
    ax.set_ylabel(f"{plural(rows[0].get('unit', 'query'))}/s" if rows else "queries/s")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


def _cdf_panel(ax: Any, rows: list[Result], rtt: float) -> None:
    greenlets = TARGET_GREENLETS if any(r["greenlets"] == TARGET_GREENLETS for r in rows) else (
        max(r["greenlets"] for r in rows))
    for r in rows:
        if r["greenlets"] != greenlets or not r.get("cdf_ms"):
            continue
        plot_cdf(ax, r["cdf_ms"], f"{r['client']} ({r['connections']} conns)")
    style_cdf(ax, "queries", f"latency CDF, {greenlets} greenlets, RTT {rtt:g} ms")


def plot_cdf(ax: Any, cdf: list[float], label: str) -> None:
    """One latency CDF line (``cdf``: a result's sorted latency samples, in ms)."""
    ax.plot(cdf, [i / (len(cdf) - 1) for i in range(len(cdf))], label=label)


def style_cdf(ax: Any, what: str, title: str, fontsize: int = 8) -> None:
    """Axes, grid and legend of a latency CDF panel of ``what`` (queries, transactions)."""
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel(f"fraction of {what}")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=fontsize)




def save_figure(plt: Any, figure: Any, path: str) -> str:
    """Lay ``figure`` out, write it to ``path`` as PNG and close it; the path."""
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_next_to(plot_path: str, suffix: str, plot: Callable[[str, list[Result]], str | None],
                 results: list[Result]) -> list[str]:
    """``plot`` written as ``<stem>-<suffix>.png`` next to the suite's plots (``plot_path``):
    the file written, if any."""
    stem, ext = os.path.splitext(plot_path)
    written = plot(f"{stem}-{suffix}{ext or '.png'}", results)
    return [] if written is None else [written]


def plot_http(path: str, http: list[Result]) -> str:
    """One PNG of the http suite: requests/s and p99 per endpoint, app and RTT."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rtts = sorted({r["rtt_ms"] for r in http})
    figure, axes = plt.subplots(2, len(rtts), figsize=(5.5 * len(rtts), 8), squeeze=False)
    for col, rtt in enumerate(rtts):
        rows = [r for r in http if r["rtt_ms"] == rtt]
        endpoints = list(dict.fromkeys(r["endpoint"] for r in rows))
        apps = list(dict.fromkeys(r["app"] for r in rows))
        for row, (key, label) in enumerate((("rps", "requests/s"), ("p99", "p99 latency (ms)"))):
            ax = axes[row][col]
            width = 0.8 / max(1, len(apps))
            for i, app in enumerate(apps):
                mine = {r["endpoint"]: r for r in rows if r["app"] == app}
                values = [_http_value(mine.get(e), key) for e in endpoints]
                ax.bar([x + i * width for x in range(len(endpoints))], values, width, label=app)
            ax.set_xticks([x + width * (len(apps) - 1) / 2 for x in range(len(endpoints))],
                          endpoints, fontsize=8)
            ax.set_ylabel(label)
            ax.set_title(f"http, RTT {rtt:g} ms")
            ax.grid(True, axis="y", alpha=0.3)
            ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _http_value(result: Result | None, key: str) -> float:
    if result is None:
        return 0.0
    return result["rps"] if key == "rps" else result["latency_ms"].get("p99", 0.0)
