"""Helpers for the pinned-path tests."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import gevent

from pgmux.io.pinned import PinnedConnection
from pgmux.io.transport import Transport


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
    """Every request a pinned connection writes from now on, in order: what its transport
    is asked to send. (A compiled ``PinnedConnection`` is an extension type, whose methods
    cannot be replaced; the transport's can, and a transport is known as a pinned
    connection's by the connection that holds it.)"""
    writes: list[bytes] = []
    original = Transport.send
    pinned: dict[int, bool] = {}  # id(transport) -> whether a pinned connection holds it

    def held_by_a_pinned_connection(transport: Transport) -> bool:
        known = pinned.get(id(transport))
        if known is None:
            known = pinned[id(transport)] = any(
                isinstance(o, PinnedConnection) and o._sock is transport
                for o in gc.get_objects())
        return known

    def recording_send(self, data):
        if held_by_a_pinned_connection(self):
            writes.append(bytes(data))
        return original(self, data)

    monkeypatch.setattr(Transport, "send", recording_send)
    return writes
