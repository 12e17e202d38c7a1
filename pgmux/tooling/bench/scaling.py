"""The scaling table: ``select_int`` (4 connections) at 64, 256, 1,024 and 4,096 greenlets,
each client's throughput and CPU per query and both against its own at 64; and its plot."""

from __future__ import annotations

from typing import Any

from pgmux.tooling.bench.goals.common import find
from pgmux.tooling.bench.goals.hot_path import SCALING_CLIENTS, SCALING_GREENLETS
from pgmux.tooling.bench.plots import save_figure
from pgmux.tooling.bench.report import table

Result = dict[str, Any]


def scaling_rows(results: list[Result]) -> list[dict[str, Any]]:
    """select_int at each of ``SCALING_GREENLETS``: q/s and CPU per query for each client,
    and each figure against the client's own at 64 greenlets."""
    rows = []
    for greenlets in SCALING_GREENLETS:
        row: dict[str, Any] = {"greenlets": f"{greenlets:,}"}
        for client in SCALING_CLIENTS:
            r, few = (find(results, client, "select_int", g) for g in (greenlets, 64))
            if r is None or few is None or not few["qps"] or not few["cpu_us_per_query"]:
                row[client] = "-"
                continue
            row[client] = (f"{r['qps']:,.0f} q/s ({r['qps'] / few['qps']:.2f}x), "
                           f"{r['cpu_us_per_query']:.1f} us "
                           f"({r['cpu_us_per_query'] / few['cpu_us_per_query']:.2f}x)")
        rows.append(row)
    return rows if any(row[c] != "-" for row in rows for c in SCALING_CLIENTS) else []


def scaling_table(results: list[Result], markdown: bool = False) -> str:
    """The scaling rows as a table ('' when none was measured)."""
    rows = scaling_rows(results)
    columns = (("greenlets", _cell("greenlets")),
               *((f"{client}: q/s, CPU/query (vs 64)", _cell(client))
                 for client in SCALING_CLIENTS))
    return table(rows, columns, markdown) if rows else ""


def _cell(key: str) -> Any:
    return lambda row: row[key]


def plot_scaling(path: str, results: list[Result]) -> str | None:
    """One PNG: select_int q/s and CPU per query against the greenlets, a line per client;
    None when no scaling case ran. Raises ImportError without matplotlib."""
    found = {client: [r for g in SCALING_GREENLETS
                      if (r := find(results, client, "select_int", g)) is not None]
             for client in SCALING_CLIENTS}
    if sum(len(rows) for rows in found.values()) < 2:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for client, rows in found.items():
        if not rows:
            continue
        greenlets = [r["greenlets"] for r in rows]
        axes[0].plot(greenlets, [r["qps"] for r in rows], marker="o", label=client)
        axes[1].plot(greenlets, [r["cpu_us_per_query"] for r in rows], marker="o", label=client)
    for ax, label in ((axes[0], "queries/s"), (axes[1], "client CPU per query (us)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(SCALING_GREENLETS, [f"{g:,}" for g in SCALING_GREENLETS])
        ax.set_xlabel("greenlets (4 server connections)")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_title("SELECT $1::int: throughput")
    axes[1].set_title("SELECT $1::int: CPU per query")
    return save_figure(plt, figure, path)
