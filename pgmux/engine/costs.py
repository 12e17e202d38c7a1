"""Which statements are slow: learned from the server time each took on a pipelined connection.

A pipelined connection answers in order, so one slow statement delays every one
written behind it. The driver measures each statement's server time (from when it was
written, or when the one ahead of it finished, to its own completion) and notes the
ones that took long here; the router keeps fast statements off connections where a
known-slow one is in flight (see ``PipelinePool.pick``). Only slow statements are kept,
so a fast one costs one comparison.
"""

from __future__ import annotations

from pgmux.cache import put_bounded
from pgmux.engine.statements import StatementKey

SLOW_FACTOR = 20.0  # a statement is slow past this many times the connection's typical
_WEIGHT = 0.3  # of a new measurement in a statement's average
_LIMIT = 4096  # statements remembered


class StatementCosts:
    """Average server time of the statements that were slow, by (SQL, parameter types)."""

    def __init__(self, slow_after: float = 0.01):
        self.slow_after = slow_after  # seconds: never slow below this
        self.known = False  # some statement is remembered (the router's fast check)
        self._seconds: dict[StatementKey, float] = {}

    def tracks(self, key: StatementKey) -> bool:
        return key in self._seconds

    def note(self, key: StatementKey, seconds: float) -> None:
        """Record one execution of ``key`` that took ``seconds`` (a slow one, or one of a
        statement already remembered, which may be fast again)."""
        entries = self._seconds
        old = entries.get(key)
        value = seconds if old is None else old + (seconds - old) * _WEIGHT
        if value < self.slow_after / 2:
            entries.pop(key, None)  # fast again: forgotten
        else:
            put_bounded(entries, key, value, _LIMIT)
        self.known = bool(entries)

    def is_slow(self, key: StatementKey) -> bool:
        return self._seconds.get(key, 0.0) > self.slow_after

    def __repr__(self) -> str:
        return f"<StatementCosts {len(self._seconds)} slow, over {self.slow_after}s>"
