"""CPU time of other processes, from /proc (Linux; elsewhere every figure is None)."""

from __future__ import annotations

import os


def _stat(pid: int) -> tuple[int, int] | None:
    """(user + system clock ticks, parent pid) of a process, or None if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12]), int(fields[1])


def cpu_seconds(pids: list[int]) -> float | None:
    """User + system CPU seconds of ``pids`` so far (those that exist); None if none does."""
    stats = [stat for stat in map(_stat, pids) if stat is not None]
    if not stats:
        return None
    return sum(ticks for ticks, _ in stats) / os.sysconf("SC_CLK_TCK")


def children(parent: int) -> list[int]:
    """The processes whose parent is ``parent``."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    return [int(name) for name in names
            if name.isdigit() and (_stat(int(name)) or (0, -1))[1] == parent]


class CpuWindow:
    """The CPU seconds ``pids`` use between ``start()`` and ``stop()`` (None: unknown)."""

    def __init__(self, pids: list[int]):
        self.pids = pids
        self.before: float | None = None

    def start(self) -> CpuWindow:
        self.before = cpu_seconds(self.pids)
        return self

    def stop(self) -> float | None:
        after = cpu_seconds(self.pids)
        return None if after is None or self.before is None else after - self.before


def per_operation(seconds: float | None, count: int) -> float | None:
    """Microseconds per operation, or None."""
    return round(seconds / count * 1e6, 2) if seconds is not None and count else None
