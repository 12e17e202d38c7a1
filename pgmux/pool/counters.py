"""Running counts a pool keeps for ``db.stats()`` (the ones psycopg_pool's ``get_stats()``
users look for, under pgmux's names) and the connection times it reports to telemetry.

Counted off the hot path only: a multiplexed query that finds a free slot at once touches
none of them (its wait is zero; ``requests`` of the pipelined pool is the drivers' units).
"""

from __future__ import annotations

import time
from typing import Any

from pgmux._native import adopt

now = time.monotonic


class PoolCounters:
    """One pool's counts; ``observer`` (set by the client while metrics are on) gets the
    connection create, wait and use times as histograms."""

    __slots__ = ("requests", "requests_queued", "wait_time", "timeouts", "requests_errors",
                 "usage_time", "connections_made", "connect_time", "connections_failed",
                 "connections_lost", "observer")

    def __init__(self) -> None:
        self.requests = 0  # connections lent (pinned), slots waited for (pipelined)
        self.requests_queued = 0  # requests that had to wait for a connection or a slot
        self.wait_time = 0.0  # seconds, all of them
        self.timeouts = 0  # waits that ended in PoolTimeout
        self.requests_errors = 0  # requests that got no connection (timeouts included)
        self.usage_time = 0.0  # seconds connections were lent (pinned)
        self.connections_made = 0
        self.connect_time = 0.0  # seconds spent opening connections
        self.connections_failed = 0  # attempts to open one that failed
        self.connections_lost = 0  # closed because they broke (not for their age or at close)
        self.observer: Any = None

    def acquired(self, seconds: float, queued: bool) -> None:
        """A request got its connection after ``seconds`` (``queued``: it waited its turn)."""
        self.requests += 1
        if queued:
            self.requests_queued += 1
            self.wait_time += seconds
        if self.observer is not None:
            self.observer.waited(seconds)

    def queued_for(self, seconds: float) -> None:
        """(Pipelined) a request waited ``seconds`` for a slot; the wait_time histogram is
        the operation's to record, with the zero waits."""
        self.requests_queued += 1
        self.wait_time += seconds

    def refused(self, error: BaseException) -> None:
        """A request got no connection: ``error`` (a PoolTimeout counts as a timeout)."""
        self.requests_errors += 1
        if type(error).__name__ == "PoolTimeout":
            self.timeouts += 1

    def connected(self, seconds: float) -> None:
        self.connections_made += 1
        self.connect_time += seconds
        if self.observer is not None:
            self.observer.created(seconds)

    def used(self, seconds: float) -> None:
        self.usage_time += seconds
        if self.observer is not None:
            self.observer.used(seconds)

    def stats(self) -> dict[str, Any]:
        return {
            "requests": self.requests, "requests_queued": self.requests_queued,
            "wait_time": round(self.wait_time, 6), "timeouts": self.timeouts,
            "requests_errors": self.requests_errors, "usage_time": round(self.usage_time, 6),
            "connections_made": self.connections_made,
            "connect_time": round(self.connect_time, 6),
            "connections_failed": self.connections_failed,
            "connections_lost": self.connections_lost,
        }

adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
