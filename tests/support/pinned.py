"""Helpers for the pinned-path tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent


def raised_elsewhere(fn: Callable[..., Any], *args: Any) -> Exception | None:
    """Call ``fn`` in another greenlet and return the exception it raised (or None)."""

    def call():
        try:
            fn(*args)
        except Exception as exc:
            return exc
        return None

    return gevent.spawn(call).get()
