"""Which statements are slow: learned from the server time each took on a pipelined connection.

A pipelined connection answers in order, so one slow statement delays every one
written behind it. The driver measures each statement's server time (from when it was
written, or when the one ahead of it finished, to its own completion) and notes the
ones that took long here; the router keeps fast statements off connections where a
known-slow one is in flight (see ``PipelinePool.pick``). Only slow statements are kept,
so a fast one costs one comparison.
"""

from __future__ import annotations

from pgmux._native import adopt
from pgmux.cache import put_bounded
from pgmux.engine.exchanges import Exchange
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


class ServerTimes:
    """One pipelined connection's round trip and the server time of each statement on it.

    Answers come in FIFO order, so a statement's server time runs from when it was written
    (plus the round trip), or from when the one ahead of it was answered if that came
    later, to its own answer. The round trip is learned from exchanges that had nothing
    ahead of them (the least seen, drifting up slowly); ``typical`` is the usual server
    time. Statements far slower than typical are noted in the shared ``costs``.

    Both say what an exchange costs the pipeline (``slots``): a single statement's life in
    it is one round trip and its server time; an atomic unit pays the round trip once and
    each of its statements' server time.
    """

    __slots__ = ("costs", "_last_done", "_rtt", "_typical")

    def __init__(self, costs: StatementCosts):
        self.costs = costs
        self._last_done = 0.0  # when the last exchange was answered
        self._rtt = float("inf")
        self._typical = 0.0  # seconds, average

    def answered_all(self, exchanges: list[Exchange], now: float) -> None:
        """``exchanges`` (in FIFO order) were answered at ``now``, each written at its
        ``sent_at``, of its ``statement`` (None: not one statement's)."""
        costs = self.costs
        last, rtt, typical = self._last_done, self._rtt, self._typical
        factor, slow_after = SLOW_FACTOR, costs.slow_after
        for exchange in exchanges:
            sent = exchange.sent_at
            if sent >= last:  # nothing was ahead of it: this was one round trip
                trip = now - sent
                rtt = trip if trip < rtt else rtt + (trip - rtt) * 0.001
            started = sent + rtt
            if started < last:
                started = last
            last = now
            statement = exchange.statement
            if statement is None:
                continue
            key = statement.key
            seconds = now - started if now > started else 0.0
            if seconds > factor * typical and seconds > slow_after:
                costs.note(key, seconds)
            else:
                typical += (seconds - typical) * 0.01
                if costs.known and costs.tracks(key):
                    costs.note(key, seconds)
        self._last_done, self._rtt, self._typical = last, rtt, typical

    def slots(self, statements: int) -> int:
        """The pipeline slots an exchange of ``statements`` statements takes: one per
        single statement's life (a round trip and its server time), so a unit costs about
        one slot where the round trip dominates and up to one per statement where the
        server time does; one per statement until a round trip was measured."""
        rtt = self._rtt
        if statements <= 1 or rtt == float("inf"):
            return max(statements, 1)
        typical = self._typical
        cost = round((rtt + statements * typical) / (rtt + typical))
        return min(max(cost, 1), statements)

adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
