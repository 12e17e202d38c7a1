"""What only the multiplexer knows about a request, learned without touching its path.

A multiplexed request is built by the connection that takes it (``build(engine, *args)``,
called once per attempt, by the caller or by the driver that hands it a slot). When
telemetry is on, the request's build is wrapped in ``Attempts``, which notes when the
first attempt was built (the wait for a slot ends there), on which connection, and, at
each attempt after the first, why it is built again: what the engine's ``outcome()`` said
of the previous one. At the end it tells the operation: ``pgmux.slot_wait``,
``pgmux.connection.index`` (the connection that answered), ``pgmux.described`` (DESCRIBED:
a description, or a type lookup, came first), ``pgmux.retried`` (UNSENT: attempts sent to
another connection after one failed before sending) and ``pgmux.reprepared`` (STALE or
CLASH: its cached statement went stale, or a pooler's server connection did not know it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from pgmux.telemetry import names
from pgmux.telemetry.observer import Observer
from pgmux.telemetry.operation import Operation, active, result_facts

_now = time.perf_counter
T = TypeVar("T")
Build = Callable[..., Any]  # (engine, *args) -> the exchange to send
Requests = list[tuple[str, tuple[Any, ...]]]  # a fan-out's (sql, (build, args, slow))


class Attempts:
    """A request's build, noting each attempt for ``op`` (see the module's docstring)."""

    __slots__ = ("op", "build", "first_at", "last", "engine", "described", "retried",
                 "reprepared")

    def __init__(self, op: Operation, build: Callable[..., Any]):
        self.op = op
        self.build = build
        self.first_at: float | None = None
        self.last: Any = None  # the exchange the previous attempt built
        self.engine: Any = None  # the connection's engine that built it
        self.described = False
        self.retried = self.reprepared = 0

    def __call__(self, engine: Any, *args: Any) -> Any:
        last = self.last
        if last is None:
            self.first_at = _now()
        else:  # built again: what the engine said of the previous attempt tells why
            why = self.engine.outcome(last).value
            if why == "described":
                self.described = True
            elif why == "unsent":
                self.retried += 1
            elif why in ("stale", "clash"):
                self.reprepared += 1
        self.engine = engine
        self.last = exchange = self.build(engine, *args)
        return exchange

    def report(self, index_of: Callable[[Any], int | None]) -> None:
        """Tell the operation what the attempts showed (``index_of``: a connection's index
        from its engine)."""
        op = self.op
        if self.first_at is not None:
            op.slot_wait = max(self.first_at - op.started, 0.0)
        if self.engine is None:
            return
        facts = op.pipelined
        index = index_of(self.engine)
        if index is not None:
            facts[names.CONNECTION_INDEX] = index
        facts[names.DESCRIBED] = self.described
        if self.retried:
            facts[names.RETRIED] = self.retried
        if self.reprepared:
            facts[names.REPREPARED] = True


def _plain(build: Callable[..., Any]) -> Callable[..., Any]:
    """``build`` under another name: the request runs untraced (nothing to note it for)."""
    return lambda engine, *args: build(engine, *args)


def observe(observer: Observer, sql: str, params: Any, build: Build, run: Callable[[Build], T],
            index_of: Callable[[Any], int | None], *, batch: int | None = None) -> T:
    """``run(traced_build)`` as one multiplexed operation, or as part of the one running
    (a DB-API ``execute``, an atomic block): the reply or results ``run`` returns."""
    op = observer.begin(sql, names.PIPELINED, params, batch=batch)
    target = op if op is not None else active()
    if target is None:
        return run(_plain(build))
    attempts = Attempts(target, build)
    try:
        answer = run(attempts)
    except BaseException as exc:
        attempts.report(index_of)
        if op is not None:
            op.failed(exc)
        raise
    attempts.report(index_of)
    if isinstance(answer, list):  # an atomic unit's results: its tags name the operation
        target.ran([result.command for result in answer])
        if op is not None:
            op.succeeded()
    elif op is not None:
        op.succeeded(*result_facts(answer))
    return answer


def observe_each(observer: Observer, requests: Requests, run: Callable[[Requests], list[T]],
                 index_of: Callable[[Any], int | None]) -> list[T]:
    """A fan-out (``(sql, (build, args, slow))`` requests) with an operation per request,
    all started in the calling greenlet; ``run`` sends them with their builds traced and
    returns each one's reply or error."""
    traced: Requests = []
    each: list[Attempts | None] = []
    for sql, (build, args, slow) in requests:  # (args[-1]: its parameters)
        op = observer.begin(observer.query_text(sql, bool(args[-1])), names.PIPELINED,
                            exclusive=False, verbatim=True)
        attempts = Attempts(op, build) if op is not None else None
        each.append(attempts)
        traced.append((sql, (attempts or _plain(build), args, slow)))
    try:
        answers = run(traced)
    except BaseException as exc:
        for attempts in each:
            if attempts is not None:
                attempts.op.failed(exc)
        raise
    for attempts, answer in zip(each, answers, strict=True):
        if attempts is None:
            continue
        attempts.report(index_of)
        if isinstance(answer, BaseException):
            attempts.op.failed(answer)
        else:
            attempts.op.succeeded(*result_facts(answer))
    return answers
