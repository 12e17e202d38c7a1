"""Profiles: pgmux under cProfile, its top functions and their cost per operation."""

from __future__ import annotations

import os

from pgmux.tooling.bench.report import plural
from pgmux.tooling.bench.workloads import WORKLOADS

PROFILE_TOP = 25
PROFILE_FILES = 15


def profiled_client(workload: str) -> str:
    """The pgmux client ``--profile`` runs ``workload`` with: pgmux, unless the workload is
    for other clients only (the orm family: the first of them named after pgmux)."""
    allowed = WORKLOADS[workload].clients
    if allowed is None or "pgmux" in allowed:
        return "pgmux"
    return next((name for name in allowed if "pgmux" in name), "pgmux")


def profile_top(path: str, count: int) -> str:
    """The top ``count`` functions of a cProfile dump by own time, as text."""
    import io
    import pstats

    out = io.StringIO()
    stats = pstats.Stats(path, stream=out)
    stats.strip_dirs().sort_stats("tottime").print_stats(count)
    lines = out.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    return "\n".join(line for line in lines[start:] if line.strip())


def profile_breakdown(path: str, operations: int, rows: int, unit: str, count: int,
                      measured_cpu_us: float | None = None) -> str:
    """The top ``count`` functions by own time: each one's share of the profiled time, its
    cost per operation under the profiler (and per row when an operation has several), and,
    given the unprofiled CPU per operation (CPU clock only: the wall clock also counts the
    waits), that share of it: an estimate of the function's real cost."""
    import pstats

    entries = pstats.Stats(path).stats  # type: ignore[attr-defined]  # {func: (cc, nc, tt, ...)}
    total = sum(tt for _, _, tt, _, _ in entries.values()) or 1.0
    ops = max(1, operations)
    ranked = sorted(entries.items(), key=lambda item: item[1][2], reverse=True)[:count]
    per_row = rows > 1
    columns = [("share", 6), (f"us/{unit}", 10)] + ([("us/row", 8)] if per_row else []) + (
        [(f"est us/{unit}", 11)] + ([("est us/row", 10)] if per_row else [])
        if measured_cpu_us else []) + [(f"calls/{unit}", 11)]
    lines = [" ".join(title.rjust(width) for title, width in columns) + "  function"]
    for (filename, line, name), (_, calls, tt, _, _) in ranked:
        cost = tt / ops * 1e6
        values = [f"{tt / total:.1%}", f"{cost:.2f}"] + ([f"{cost / rows:.3f}"] if per_row
                                                         else [])
        if measured_cpu_us:
            estimate = tt / total * measured_cpu_us
            values += [f"{estimate:.2f}"] + ([f"{estimate / rows:.3f}"] if per_row else [])
        values.append(f"{calls / ops:.2f}")
        lines.append(" ".join(v.rjust(width) for v, (_, width) in zip(values, columns,
                                                                        strict=True))
                     + f"  {os.path.basename(filename)}:{line}({name})")
    lines += ["by file (own time of its functions; builtins by name):",
              *_by_file(entries, total, measured_cpu_us or total / ops * 1e6, unit)]
    lines.append(f"total own time {total:.3f} s over {operations:,} {plural(unit)}: "
                 f"{total / ops * 1e6:,.1f} us/{unit} under the profiler"
                 + (f", {total / ops / rows * 1e6:.3f} us/row" if per_row else "")
                 + (f"; {measured_cpu_us:,.1f} us/{unit} measured without it" if measured_cpu_us
                    else ""))
    return "\n".join(lines)


def _by_file(entries: dict, total: float, per_op_us: float, unit: str,
             count: int = PROFILE_FILES) -> list[str]:
    """Own time summed per source file (per builtin for C functions): share and us/op."""
    files: dict[str, float] = {}
    for (filename, _, name), (_, _, tt, _, _) in entries.items():
        key = (f"builtin {name.split(' of ')[0].strip('<>{}')}" if filename == "~"
               else os.path.join(*filename.split(os.sep)[-2:]))  # package/module.py
        files[key] = files.get(key, 0.0) + tt
    ranked = sorted(files.items(), key=lambda item: item[1], reverse=True)[:count]
    return [f"{tt / total:6.1%} {tt / total * per_op_us:10.2f} us/{unit}  {key}"
            for key, tt in ranked]


