"""The cyclic garbage collector's thresholds while pipelined connections are open: the
youngest generation's raised tenfold and the middle one's tenfold, unless the application
chose its own.

Why: a caller waiting in line for a pipeline slot holds a few tracked objects (its request,
its ``Waiter``, its arguments) for as long as the line is long. With thousands waiting, the
count of young objects drifts past the interpreter's default threshold (700) every few
hundred queries, and each collection walks what the waiting callers hold, then promotes it
and walks it again in the older generations. With a threshold of 7,000 those collections
become rare; with few callers waiting (no line) nothing changes, as collections are then
rare either way. A result of many rows is the other case: its tuples (and a JSON value's
dicts and lists) are alive at the young collection that follows it, so they are promoted,
and the middle generation, collected after every tenth young collection by default, walks
every result still held; after every hundredth, it rarely finds one.

The policy is process-wide (the collector is): the first pipeline pool to open applies it,
the last to close restores the thresholds it found, unless the application changed them
meanwhile. It is applied only over the interpreter's default thresholds: an application
that set its own (``gc.set_threshold``), or disabled the collector, keeps them. Opt out
with ``Client(tune_gc=False)`` or ``PGMUX_TUNE_GC=0`` in the environment.
"""

from __future__ import annotations

import gc
import os
import threading

DEFAULT_THRESHOLDS = (700, 10, 10)  # the interpreter's own (CPython 3.11, 3.12)
TUNED_THRESHOLDS = (7000, 100, 10)  # the youngest and the middle generations' tenfold
ENV = "PGMUX_TUNE_GC"  # "0" (or "off", "false", "no"): never apply the policy


def enabled(requested: bool) -> bool:
    """Whether a client asking ``requested`` applies the policy (the environment can
    turn it off for every client)."""
    return requested and os.environ.get(ENV, "1").strip().lower() not in (
        "0", "off", "false", "no")


class CollectorPolicy:
    """Holders of the policy (open pipeline pools that asked for it): the first applies
    it, the last releases it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # (clients may live in several threads)
        self._holders = 0
        self._found: tuple[int, ...] | None = None  # the thresholds replaced, while applied

    @property
    def applied(self) -> bool:
        """Whether the thresholds are pgmux's now (some holder applied them)."""
        return self._found is not None

    @property
    def holders(self) -> int:
        return self._holders

    def hold(self) -> None:
        """A pool opened: apply the policy if it is the first holder and the collector is
        enabled with the interpreter's default thresholds."""
        with self._lock:
            self._holders += 1
            if self._found is None and gc.isenabled() and gc.get_threshold() == DEFAULT_THRESHOLDS:
                self._found = gc.get_threshold()
                gc.set_threshold(*TUNED_THRESHOLDS)

    def release(self) -> None:
        """A pool closed (or was dropped after a fork): the last holder restores the
        thresholds found, unless the application set others meanwhile."""
        with self._lock:
            if self._holders == 0:
                return
            self._holders -= 1
            if self._holders or self._found is None:
                return
            found, self._found = self._found, None
            if gc.get_threshold() == TUNED_THRESHOLDS:
                gc.set_threshold(*found)


POLICY = CollectorPolicy()  # the process's
