"""One observed database operation: its CLIENT span, its metrics, its slow-query log line.

An operation starts in the caller's greenlet, so its span is a child of the caller's current
span (gevent gives every greenlet its own context), and ends when the caller has its answer:
it covers the wait for a slot or a connection, descriptions and retries. A synchronous call
marks itself *active* while it runs: an operation started under it (the multiplexed query a
DB-API ``execute`` makes) emits nothing of its own and tells the outer one which kind of
connection carried it. Where the caller's current span is another instrumentation's
database span (SQLAlchemy's), pgmux adds its ``pgmux.*`` attributes to that span instead of
opening a second one for the same statement.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

from pgmux.telemetry import names
from pgmux.telemetry.api import otel_trace
from pgmux.telemetry.failures import error_attributes, error_type
from pgmux.telemetry.metrics import ClientMetrics

slow_log = logging.getLogger("pgmux.slow_queries")
_now = time.perf_counter
_wall_ns = time.time_ns  # (a span's start and end: epoch nanoseconds)

_ACTIVE: ContextVar[Operation | None] = ContextVar("pgmux_operation", default=None)
_SUMMARY: ContextVar[str | None] = ContextVar("pgmux_query_summary", default=None)
_FOREIGN_DB_KEYS = ("db.system.name", "db.system")  # another instrumentation's database span


class Destination(Protocol):
    """What an operation records into: its client's observer (``observer.Observer``)."""

    tracer: Any  # None: no spans
    span_attributes: dict[str, Any]
    trace_parameters: bool
    instruments: ClientMetrics | None  # None: no metrics
    slow: float | None  # the slow-query log's threshold; None: no log

    def span_name(self, operation: str | None, summary: str | None = None) -> str: ...

    def query_text(self, sql: str, parameterized: bool = False) -> str: ...


class Claimed(Protocol):
    """A borrowed pinned connection, as telemetry sees it (``io.pinned.PinnedConnection``)."""

    waited: float  # seconds its borrower waited for it, not yet told to an operation


def claim_wait(conn: Claimed) -> float:
    """The seconds ``conn``'s borrower waited for it, told once: to the first operation on
    it."""
    wait, conn.waited = conn.waited, 0.0
    return wait


def active() -> Operation | None:
    """The synchronous operation running in this greenlet, if any."""
    return _ACTIVE.get()


@contextmanager
def query_summary(summary: str) -> Iterator[None]:
    """``db.query.summary`` for the operations this greenlet starts inside the block (a
    low-cardinality description the caller knows, e.g. ``"SELECT users"``); also their
    span name when no command tag tells their operation. pgmux never parses SQL for one."""
    token = _SUMMARY.set(summary)
    try:
        yield
    finally:
        _SUMMARY.reset(token)


def operation_name(command: str | None) -> str | None:
    """The operation a command tag names: ``INSERT 0 3`` -> ``INSERT``, ``CREATE TABLE``."""
    if not command:
        return None
    words = command.split()
    while len(words) > 1 and words[-1].isdigit():
        words.pop()
    return " ".join(words)


def result_facts(result: Any) -> tuple[str | None, int | None]:
    """(command tag, rows returned: None for a command that returns none) of a ``Result``
    or a multiplexed reply; (None, None) for anything else."""
    command = getattr(result, "command", None)
    if command is None:
        return None, None
    fields = getattr(result, "fields", None)  # a Result's; a reply's are its shape's
    if fields is None:
        shape = getattr(result, "shape", None)
        fields = shape.columns if shape is not None else ()
    return command, (len(result.rows) if fields else None)


def _foreign_database_span() -> Any:
    """The caller's current span if another instrumentation opened it for a database call."""
    span = otel_trace.get_current_span()
    if not span.is_recording() or getattr(span, "kind", None) is not otel_trace.SpanKind.CLIENT:
        return None
    attributes = getattr(span, "attributes", None) or {}
    return span if any(key in attributes for key in _FOREIGN_DB_KEYS) else None


class Operation:
    """A logical operation being observed (see the module's docstring)."""

    __slots__ = ("observer", "sql", "kind", "batch", "operation", "summary", "commands",
                 "started", "span", "span_start", "owned", "slot_wait", "connection_wait",
                 "pipelined", "token", "ended")

    def __init__(self, observer: Destination, sql: str, kind: str, *, params: Any = (),
                 batch: int | None = None, operation: str | None = None,
                 exclusive: bool = True, waited: float = 0.0):
        """``waited``: seconds it waited for a pinned connection before it began (a
        session's first statement): counted in its duration, and its span starts that
        much earlier, so that the span's duration is the duration recorded."""
        self.observer = observer
        self.sql = sql
        self.kind = kind
        self.batch = batch if batch != 1 else None  # a batch of one is a single operation
        self.operation = operation
        self.summary = _SUMMARY.get()
        self.commands: list[str | None] | None = None  # a batch's tags, told from below
        self.slot_wait = 0.0
        self.connection_wait = waited  # for a pinned connection (see waited)
        self.pipelined: dict[str, Any] = {}  # what the multiplexer knows (see multiplexed)
        self.ended = False
        self.span: Any = None
        self.span_start = 0
        self.owned = True
        self.started = _now() - waited
        if observer.tracer is not None:
            self._start_span(params, waited)
        self.token = _ACTIVE.set(self) if exclusive else None

    def _start_span(self, params: Any, waited: float) -> None:
        observer = self.observer
        foreign = _foreign_database_span()
        if foreign is not None:  # SQLAlchemy's own span for this statement: enrich it
            self.span, self.owned = foreign, False
            foreign.set_attribute(names.CONNECTION_KIND, self.kind)
            return
        attributes = dict(observer.span_attributes)
        attributes[names.DB_QUERY_TEXT] = self.sql
        attributes[names.CONNECTION_KIND] = self.kind
        if self.batch is not None:
            attributes[names.DB_OPERATION_BATCH_SIZE] = self.batch
        elif params and observer.trace_parameters:  # keyed by name, else by index
            keyed = params.items() if isinstance(params, Mapping) else enumerate(params)
            for key, value in keyed:
                attributes[f"{names.DB_QUERY_PARAMETER}{key}"] = str(value)
        if self.operation is not None:
            attributes[names.DB_OPERATION_NAME] = self.operation
        if self.summary is not None:
            attributes[names.DB_QUERY_SUMMARY] = self.summary
        tracer = observer.tracer
        assert tracer is not None  # (only called with a tracer)
        self.span_start = _wall_ns() - round(waited * 1e9)
        self.span = tracer.start_span(
            observer.span_name(self.operation, self.summary), kind=otel_trace.SpanKind.CLIENT,
            attributes=attributes, start_time=self.span_start)

    # -- facts learned on the way ------------------------------------------------------------------
    def carried_by(self, kind: str) -> None:
        """(An inner operation) the kind of connection that carried this one."""
        self.kind = kind
        if self.span is not None:
            self.span.set_attribute(names.CONNECTION_KIND, kind)

    def ran(self, commands: list[str | None]) -> None:
        """(From below: an atomic unit, a pipeline) the command tags of the batch it ran."""
        self.commands = commands

    def waited(self, seconds: float) -> None:
        """It waited ``seconds`` for a pinned connection while it ran (already in its
        duration; one waited before it began is the constructor's ``waited``)."""
        self.connection_wait += seconds

    def set(self, key: str, value: Any) -> None:
        if self.span is not None:
            self.span.set_attribute(key, value)

    def batch_of(self, texts: list[str]) -> None:
        """(An explicit pipeline, known at its end) the statements it ran: one text if they
        were all the same, else each distinct one in order, joined by ``; ``."""
        distinct = list(dict.fromkeys(texts))
        self.sql = "; ".join(distinct)
        self.batch = len(texts) if len(texts) != 1 else None
        self.set(names.DB_QUERY_TEXT, self.sql)
        if self.batch is not None:
            self.set(names.DB_OPERATION_BATCH_SIZE, self.batch)

    # -- the end -------------------------------------------------------------------------------
    def succeeded(self, command: str | None = None, rows: int | None = None,
                  operations: list[str | None] | None = None) -> None:
        """The answer came: its command tag (or the tags of a batch's statements) and the
        rows it returned (None: a command that returns none)."""
        if operations is None:
            operations = self.commands
        if self.operation is None:
            self.operation = (_batch_name(operations) if operations is not None
                              else operation_name(command))
        self._end(rows, None)

    def failed(self, error: BaseException) -> None:
        self._end(None, error)

    def _end(self, rows: int | None, error: BaseException | None) -> None:
        if self.ended:
            return
        self.ended = True
        elapsed = _now() - self.started
        if self.token is not None:
            try:
                _ACTIVE.reset(self.token)
            except ValueError:  # ended from another context: leave it to that one
                pass
        observer = self.observer
        if self.span is not None:
            self._end_span(rows, error, elapsed)
        if observer.instruments is not None:
            observer.instruments.operation(self, elapsed, rows, error)
        if observer.slow is not None and elapsed >= observer.slow:
            self._log_slow(elapsed, error)

    def _end_span(self, rows: int | None, error: BaseException | None,
                  elapsed: float) -> None:
        span = self.span
        if self.kind == names.PIPELINED:  # (not an attempt made before it went pinned)
            for key, value in self.pipelined.items():
                span.set_attribute(key, value)
            if self.slot_wait:
                span.set_attribute(names.SLOT_WAIT, self.slot_wait)
        elif self.connection_wait:
            span.set_attribute(names.CONNECTION_WAIT, self.connection_wait)
        if error is not None:
            for key, value in error_attributes(error).items():
                span.set_attribute(key, value)
            span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, error_type(error)))
        if not self.owned:
            return
        if self.operation is not None:
            span.set_attribute(names.DB_OPERATION_NAME, self.operation)
            span.update_name(self.observer.span_name(self.operation, self.summary))
        if rows is not None:
            span.set_attribute(names.DB_RESPONSE_RETURNED_ROWS, rows)
        span.end(end_time=self.span_start + round(elapsed * 1e9))  # lasts what was recorded

    def _log_slow(self, elapsed: float, error: BaseException | None) -> None:
        wait = self.slot_wait if self.kind == names.PIPELINED else self.connection_wait
        slow_log.warning(
            "pgmux: slow query: %.3fs (%.3fs waiting for a connection, %.3fs executing) on "
            "a %s connection%s: %s", elapsed, wait, elapsed - wait, self.kind,
            f", failed ({error_type(error)})" if error is not None else "", self.sql)


def _batch_name(operations: list[str | None]) -> str | None:
    """``BATCH INSERT`` when every statement of a batch (two or more) is the same operation,
    else ``BATCH``; a batch of one is that one operation."""
    if len(operations) == 1:
        return operation_name(operations[0])
    kinds = {operation_name(tag) for tag in operations}
    if len(kinds) == 1 and None not in kinds:
        return f"BATCH {kinds.pop()}"
    return "BATCH"
