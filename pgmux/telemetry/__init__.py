"""Telemetry: OpenTelemetry spans and metrics (``opentelemetry-api`` only, the ``otel`` extra)
and the slow-query log, costing nothing while nothing is switched on.

What is emitted: the documentation's Observability page (docs/guide/observability.md).
The pieces: ``names`` (every name emitted), ``api`` (the optional API and noticing a
provider), ``observer`` (one client's), ``operation`` (one span, its metrics and its
slow-query line), ``metrics`` (the instruments), ``failures`` (what an error says),
``multiplexed`` (what the multiplexer learns of a request).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pgmux.telemetry.api import AVAILABLE, watch_for
from pgmux.telemetry.names import PINNED, PIPELINED
from pgmux.telemetry.observer import Observer, Settings, for_client
from pgmux.telemetry.operation import (
    Operation,
    active,
    claim_wait,
    query_summary,
    result_facts,
)

__all__ = ["AVAILABLE", "PINNED", "PIPELINED", "Observer", "Operation", "Settings", "active",
           "claim_wait", "for_client", "observed", "query_summary", "result_facts",
           "watch_for"]

T = TypeVar("T")


def observed(observer: Observer | None, kind: str, sql: str, call: Callable[[], T],
             params: Any = (), operation: str | None = None, batch: int | None = None,
             wait: float = 0.0) -> T:
    """``call()`` as one observed operation (or part of the one running)."""
    op = (observer.begin(sql, kind, params, operation=operation, batch=batch, wait=wait)
          if observer is not None else None)
    if op is None:
        return call()
    try:
        result = call()
    except BaseException as exc:
        op.failed(exc)
        raise
    op.succeeded(*result_facts(result))
    return result
