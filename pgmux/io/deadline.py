"""Deadlines: when a caller stops waiting, kept as a point in time from its timeout."""

from __future__ import annotations

import time

_now = time.monotonic


class Deadline:
    """``timeout`` seconds from now (None: never); ``remaining()`` is what is left."""

    __slots__ = ("timeout", "at")

    def __init__(self, timeout: float | None):
        self.timeout = timeout
        self.at = None if timeout is None else _now() + timeout

    @classmethod
    def at_time(cls, at: float, timeout: float | None = None) -> Deadline:
        """The deadline at monotonic time ``at``."""
        deadline = cls(None)
        deadline.at = at
        deadline.timeout = timeout
        return deadline

    def remaining(self) -> float | None:
        """Seconds left (never negative); None when there is no deadline."""
        at = self.at
        if at is None:
            return None
        left = at - _now()
        return left if left > 0.0 else 0.0

    @property
    def expired(self) -> bool:
        return self.at is not None and _now() >= self.at

    def __repr__(self) -> str:
        return "<Deadline never>" if self.at is None else f"<Deadline in {self.remaining():.3f}s>"


NEVER = Deadline(None)
