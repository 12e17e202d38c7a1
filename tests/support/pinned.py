"""Helpers for the pinned-path tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent

from pgmux.io.pinned import PinnedConnection


def raised_elsewhere(fn: Callable[..., Any], *args: Any) -> Exception | None:
    """Call ``fn`` in another greenlet and return the exception it raised (or None)."""

    def call():
        try:
            fn(*args)
        except Exception as exc:
            return exc
        return None

    return gevent.spawn(call).get()


def record_writes(monkeypatch) -> list[bytes]:
    """Every request a pinned connection writes from now on, in order."""
    writes: list[bytes] = []
    original = PinnedConnection.send

    def recording_send(self, data):
        writes.append(bytes(data))
        return original(self, data)

    monkeypatch.setattr(PinnedConnection, "send", recording_send)
    return writes
