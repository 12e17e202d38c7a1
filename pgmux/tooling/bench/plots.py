"""PNG plots (matplotlib, the bench extra's): throughput and latency CDFs per workload, the
http suites, the atomic units' comparison; each function raises ImportError without it."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from pgmux.tooling.bench.goals.atomic import TX, UNIT
from pgmux.tooling.bench.goals.atomic import label as unit_label
from pgmux.tooling.bench.report import plural

Result = dict[str, Any]
CDF_GREENLETS = 64  # the latency CDF's greenlets when measured, else the most


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
    greenlets = CDF_GREENLETS if any(r["greenlets"] == CDF_GREENLETS for r in rows) else (
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


def plot_units(path: str, results: list[Result]) -> str | None:
    """One PNG: transactions/s per client and form (log scale) and the latency CDFs, a
    column per RTT; None when no tpcb_unit case ran. Raises ImportError without matplotlib."""
    rows = [r for r in results if r["workload"] in (UNIT, TX) and not r.get("profiled")
            and not r.get("turns_counted") and r["queries"]]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rtts = sorted({r["rtt_ms"] for r in rows})
    figure, axes = plt.subplots(2, len(rtts), figsize=(6.5 * len(rtts), 8), squeeze=False)
    for col, rtt in enumerate(rtts):
        mine = [r for r in rows if r["rtt_ms"] == rtt]
        labels = [unit_label(r) for r in mine]
        ax = axes[0][col]
        bars = ax.bar(range(len(mine)), [r["qps"] for r in mine],
                      color=["tab:blue" if r["client"] == "pgmux" else "tab:gray" for r in mine])
        ax.bar_label(bars, [f"{r['qps']:,.0f}" for r in mine], fontsize=7)
        ax.set_xticks(range(len(mine)), labels, fontsize=7, rotation=20, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("transactions/s")
        ax.set_title(f"TPC-B scale 1, 64 greenlets, 4 connections, RTT {rtt:g} ms")
        ax.grid(True, axis="y", alpha=0.3)
        ax = axes[1][col]
        for r, name in zip(mine, labels, strict=True):
            cdf = r.get("cdf_ms") or []
            if cdf:
                plot_cdf(ax, cdf, name)
        style_cdf(ax, "transactions", f"latency CDF, RTT {rtt:g} ms", fontsize=7)
    return save_figure(plt, figure, path)
