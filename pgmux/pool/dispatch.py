"""Multiplexed requests, from choosing a driver to their replies: one (``run``) or many
at once from one caller (``run_all``).

A request goes to the least-loaded live driver with room for it, or waits in line for
a slot (``pgmux.pool.slots``: the driver that frees one builds and submits the request
itself). The driver's engine builds it: the request itself, or first a prerequisite (the
description of a statement it has never seen: what the statement returns decides the
result formats, so that the first and every later execution decode alike; or a type
lookup), sent by this request or already by another, which it follows. Either way the
request keeps its slot: when the prerequisite completes, the driver's reader resumes it
there (``_Request.resume``), building the request itself in that slot with no trip
through the line, from what the description said even if the caches dropped it since
(the request keeps it: ``Engine.recall``). When an exchange completes, the engine's
``outcome()`` says what follows: hand the reply over, build it again (after a
prerequisite, or a statement fault where nothing ran), send it elsewhere (it never
reached the wire), or fail; the engine's ``RetryBudget`` bounds the attempts. This module
decides nothing of the protocol: it routes, does what the engine said, and waits for the
exchange within the caller's deadline.

``run`` has a flat first attempt for the common case (a free slot, no deadline, DONE at
the first reply): pick, build, submit, wait, ask the engine. Everything else goes through
a ``_Request``, which ``run_all`` also uses for each of its requests, waiting for all of
a round's exchanges with one wake-up (a ``Countdown``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gevent
from gevent.hub import Waiter

from pgmux._native import adopt
from pgmux.engine.core import Engine
from pgmux.engine.exchanges import Exchange
from pgmux.engine.outcome import AWAITS, DESCRIBED, DONE, LOST, UNSENT, Outcome, RetryBudget
from pgmux.engine.statements import Description, StatementKey
from pgmux.errors import NotDispatchedError, QueryTimeout
from pgmux.io.deadline import NEVER, Deadline
from pgmux.io.pipeline import READY, PipelineDriver, Resumable, wait_for
from pgmux.pool.slots import Ticket, fits

if TYPE_CHECKING:
    from pgmux.pool.router import PipelinePool

Build = Callable[..., Exchange]  # (engine, *args) -> the exchange to send
Request = tuple[Build, tuple[Any, ...], bool]  # build, its arguments, known to be slow
# The usual build, as the client passes it (read as the Python attribute: in the compiled twin,
# ``Engine.query`` would name the C method itself)
_QUERY = getattr(Engine, "query")  # noqa: B009


def run(pool: PipelinePool, build: Build, args: tuple[Any, ...],
        timeout: float | None, slow: bool = False, statements: int = 1) -> Exchange:
    """Send ``build(engine, *args)`` to the least-loaded driver; the exchange, answered;
    ``slow``: the statement is known to be slow (the router keeps it off a fast lane);
    ``statements``: how many it carries (an atomic unit's: admitted by its slots)."""
    if timeout is None:  # the hot path: a free slot, the first attempt
        driver = pool.free_driver(slow, statements)
        if driver is not None:
            engine = driver.engine
            if build is _QUERY:  # (a method call: direct in the compiled twin)
                sql, oids, formats, values = args
                exchange = engine.query(sql, oids, formats, values)
            else:
                exchange = build(engine, *args)
            if not exchange.describes:
                exchange.slow = slow
                waiter = driver.submit(exchange)
                try:
                    waiter.get()
                except BaseException:
                    exchange.wanted = False  # abandoned: its rows are dropped as they arrive
                    raise
                outcome = engine.outcome(exchange)
                if outcome is DONE:
                    return exchange
                request = _Request(pool, build, args, slow, NEVER, statements)
                request.driver, request.exchange = driver, exchange
                return request.answer(outcome)
            request = _Request(pool, build, args, slow, NEVER, statements)  # a prerequisite
            request.token = Waiter()
            request.prerequisite(driver, exchange)
            return request.answer()
        request = _Request(pool, build, args, slow, NEVER, statements)  # no room: in line
        request.token = Waiter()
        pool.line_up(request)  # (the driver that frees a slot builds and submits it)
        return request.answer()
    request = _Request(pool, build, args, slow, Deadline(timeout), statements)
    request.send(Waiter())
    return request.answer()


def run_all(pool: PipelinePool, requests: Sequence[Request],
            timeout: float | None) -> list[Exchange | BaseException]:
    """Send every request at once, each to the least-loaded driver as it goes (so one
    writer wake-up per connection carries them), and wait for all: for each, in order, its
    answered exchange or the error that ended it (NotDispatchedError, a timeout in line,
    IndeterminateResultError, a refusal by the engine). A kill or the caller's deadline
    abandons every one still outstanding (those in line leave it, the rest are drained and
    dropped)."""
    deadline = Deadline(timeout)
    items = [_Request(pool, build, args, slow, deadline) for build, args, slow in requests]
    todo = items
    while todo:
        countdown = Countdown(len(todo))
        for item in todo:
            item.send(countdown)
        try:
            _wait(countdown, deadline)
        except BaseException:
            for item in todo:
                item.abandon()
            raise
        todo = [item for item in todo if not item.settle()]
    return [item.error if item.error is not None else item.exchange  # type: ignore[misc]
            for item in items]


class Countdown:
    """One token for many exchanges: switched (from the hub) once for each, it wakes its
    waiting caller at the last."""

    __slots__ = ("left", "waiter")

    def __init__(self, count: int):
        self.left = count
        self.waiter = Waiter()

    def switch(self, _: Any) -> None:
        self.left -= 1
        if not self.left:
            self.waiter.switch(None)

    def get(self) -> None:
        if self.left:
            self.waiter.get()


class _Request(Ticket):
    """One request through all the attempts the engine allows: where it was sent, what
    came back, what its descriptions said, and, while it waits in line, its ticket. While
    a prerequisite of it is answered, the driver resumes it through a ``_Resumed`` token
    (a request is one class, a ticket: compiled, one base)."""

    __slots__ = ("pool", "build", "args", "until", "budget", "driver", "exchange", "prefer",
                 "learned")

    def __init__(self, pool: PipelinePool, build: Build, args: tuple[Any, ...], slow: bool,
                 until: Deadline, statements: int = 1):
        self.token: Any = None
        self.slow = slow
        self.statements = statements
        self.patience = pool.acquire_timeout  # for a slot
        self.error = None
        self.pool = pool
        self.until = until  # the caller's deadline, for the whole request
        self.build = build
        self.args = args
        self.budget: RetryBudget | None = None  # made at the first retry
        self.driver: PipelineDriver | None = None
        self.exchange: Exchange | None = None  # the attempt in flight, or answered
        self.prefer: PipelineDriver | None = None  # where to send the next attempt
        # what its descriptions said (statement key -> description), for its next builds
        self.learned: dict[StatementKey, Description] | None = None

    def send(self, token: Any) -> None:
        """Hand the next attempt to a driver with room for it (the one it was described on
        first), or put it in line; ``token`` is switched when it is answered or failed."""
        self.token = token
        pool = self.pool
        prefer, self.prefer = self.prefer, None
        try:
            if (prefer is not None and prefer.state is READY
                    and fits(prefer, self.statements, pool.max_in_flight)):
                driver: PipelineDriver | None = prefer
            else:
                driver = pool.free_driver(self.slow, self.statements)
        except NotDispatchedError as exc:  # no live connection: nothing was sent
            self.fail(exc)
            return
        if driver is None:
            self.line_up()
        else:
            self.serve(driver)

    def line_up(self) -> None:
        """Wait in line for a slot (every one is taken, or others wait already)."""
        try:
            self.pool.line_up(self)
        except NotDispatchedError as exc:  # the pool closed
            self.fail(exc)

    def serve(self, driver: PipelineDriver) -> None:
        """(In line, from ``send``, or resumed) build the attempt on ``driver`` and submit
        it there, in the slot this request was handed; an error building it ends the
        request."""
        engine = driver.engine
        try:
            if self.learned is not None:
                engine.recall(self.learned)
            build = self.build
            if build is _QUERY:  # (the usual build: no argument tuple made to call it)
                sql, oids, formats, values = self.args
                exchange = engine.query(sql, oids, formats, values)
            else:
                exchange = build(engine, *self.args)
        except Exception as exc:
            self.fail(exc)
            return
        if exchange.describes:
            self.prerequisite(driver, exchange)
            return
        exchange.slow = self.slow
        driver.submit(exchange, self.token)
        self.driver, self.exchange = driver, exchange

    def prerequisite(self, driver: PipelineDriver, exchange: Exchange) -> None:
        """Send ``exchange`` (a description, a type lookup) on ``driver`` before the request
        itself, or follow it if another caller sent it already; the request keeps its slot
        there meanwhile, and is resumed in it when ``exchange`` completes (``resume``)."""
        self.driver, self.exchange = driver, exchange
        if exchange.token is None:
            exchange.slow = self.slow
            driver.submit(exchange, _Resumed(self))
        else:
            driver.follow(exchange, _Resumed(self))

    def resume(self, driver: PipelineDriver, exchange: Exchange) -> None:
        """(In ``driver``'s reader, the batch's slots freed, before the line is served)
        ``exchange``, this request's prerequisite, completed: when the engine says DESCRIBED
        and the request fits there, it is built and submitted there now, in the slot it
        kept; else its caller is woken, to settle it."""
        if exchange is not self.exchange:
            return  # its caller gave up meanwhile
        pool = self.pool
        if (driver.state is READY and driver.engine.outcome(exchange) is DESCRIBED
                and fits(driver, self.statements, pool.max_in_flight)):
            try:
                self.learn(driver, exchange)
            except Exception as exc:  # the budget's limit
                self.fail(exc)
                return
            self.serve(driver)
            return
        pool.wake(self.token)

    def learn(self, driver: PipelineDriver, exchange: Exchange) -> None:
        """(After DESCRIBED) keep what ``exchange`` said, for the next builds, and count it
        in the budget (which raises past its limit): a statement's first description is
        free (a request has only so many statements); one made again counts, as a change
        only if it says something else than the previous one."""
        budget = self.budget
        if budget is None:
            budget = self.budget = RetryBudget(self.pool.size)
        said = driver.engine.learned(exchange)
        if said is None:  # a type lookup (or a description of unknown content)
            budget.allows(DESCRIBED)
            return
        key, description = said
        learned = self.learned
        if learned is None:
            learned = self.learned = {}
        previous = learned.get(key)
        learned[key] = description
        if previous is not None:
            budget.allows(DESCRIBED, changed=previous != description)

    def forget(self, exchange: Exchange) -> None:
        """(After STALE or CLASH) what this request's description of ``exchange``'s
        statement said no longer holds (the engine dropped it): never recall it."""
        learned, statement = self.learned, exchange.statement
        if learned is not None and statement is not None:
            learned.pop(statement.key, None)

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.exchange = None
        self.pool.wake(self.token)

    def answer(self, outcome: Outcome | None = None) -> Exchange:
        """Wait for the attempt in flight (unless ``outcome`` is its answer already) and
        make the next ones until the request is over; the exchange, or raise."""
        if outcome is None:
            if self.until is NEVER:  # (the common case, inline: woken once, at the answer)
                try:
                    self.token.get()
                except BaseException:
                    self.abandon()
                    raise
                exchange = self.exchange
                if self.error is None and exchange is not None:
                    outcome = self.driver.engine.outcome(exchange)  # type: ignore[union-attr]
                    if outcome is DONE:
                        return exchange
            else:
                _wait(self, self.until)
        while not self.settle(outcome):
            outcome = None
            self.send(Waiter())
            _wait(self, self.until)
        return self.result()

    def result(self) -> Exchange:
        if self.error is not None:
            raise self.error
        assert self.exchange is not None
        return self.exchange

    def get(self) -> None:
        """Wait for the attempt in flight; a kill or timeout abandons it."""
        try:
            self.token.get()
        except BaseException:
            self.abandon()
            raise

    def abandon(self) -> None:
        """The caller stopped waiting: leave the line, or drop the exchange's rows (a
        prerequisite it waits for is not resumed, its slot frees when it completes)."""
        if self.pool.leave_line(self):
            return
        exchange, self.exchange = self.exchange, None
        if exchange is not None and exchange.token is self.token:
            exchange.wanted = False  # its own request (not a prerequisite)

    def wait_within(self, exchange: Exchange, follower: Waiter | None) -> None:
        """Wait for ``exchange`` (a type lookup), or as ``follower``, within the caller's
        deadline."""
        remaining = self.until.remaining()
        wait_for(exchange, remaining, None if remaining is None else QueryTimeout(
            f"no result within {self.until.timeout}s"), follower)

    def settle(self, outcome: Outcome | None = None) -> bool:
        """(The attempt was answered) True when the request is over (``exchange`` is its
        answer, or ``error`` says why not); else the next attempt is to be sent."""
        if self.error is not None:
            return True
        driver, exchange = self.driver, self.exchange
        assert driver is not None and exchange is not None
        try:
            if outcome is None:
                outcome = driver.engine.outcome(exchange)
                if outcome is DONE:
                    return True
            budget = self.budget
            if budget is None:
                budget = self.budget = RetryBudget(self.pool.size)
            if outcome is AWAITS:
                outcome = look_up_types(driver, exchange, self.wait_within, budget)
            if outcome is DONE:
                return True
            if outcome is LOST or (outcome is UNSENT and not budget.allows(UNSENT)):
                self.error = exchange.failure
                return True
            if outcome is DESCRIBED:
                self.learn(driver, exchange)
                self.prefer = driver  # described (and parsed) there: now the request itself
            elif outcome is not UNSENT:
                self.forget(exchange)  # STALE or CLASH
                if not budget.allows(outcome, driver):
                    return True  # out of attempts: the statement's error is the answer
        except Exception as exc:  # a type lookup that failed, the budget's limit
            self.error = exc
            return True
        self.exchange = None
        return False


class _Resumed(Resumable):
    """The token of a request's prerequisite: the driver resumes the request through it
    when the prerequisite completes (``_Request.resume``), or switches it (from the hub)
    when it cannot (the connection failed, or the batch broke it): then the caller wakes,
    to settle the request."""

    __slots__ = ("request",)

    def __init__(self, request: _Request):
        self.request = request

    def resume(self, driver: PipelineDriver, exchange: Exchange) -> None:
        self.request.resume(driver, exchange)

    def switch(self, _: Any) -> None:
        self.request.token.switch(None)


def _wait(waitable: Any, deadline: Deadline) -> None:
    """``waitable.get()``, within ``deadline`` (QueryTimeout)."""
    remaining = deadline.remaining()
    if remaining is None:
        waitable.get()
        return
    timer = gevent.Timeout._start_new_or_dummy(
        remaining, QueryTimeout(f"no result within {deadline.timeout}s"))
    try:
        waitable.get()
    finally:
        timer.close()


def submit_or_follow(driver: PipelineDriver, exchange: Exchange,
                     slow: bool = False) -> Waiter | None:
    """Hand ``exchange`` to ``driver``; if another caller already submitted it (a
    description in flight that this request needs too), a waiter for it instead."""
    if exchange.token is None:
        exchange.slow = slow
        driver.submit(exchange)
        return None
    return driver.follow(exchange)


def look_up_types(driver: PipelineDriver, exchange: Exchange,
                  wait: Callable[[Exchange, Waiter | None], None],
                  budget: RetryBudget) -> Outcome:
    """(After AWAITS) look the types ``exchange``'s result waits for up on ``driver``, the
    connection that met them (other callers' work goes on meanwhile); the outcome then."""
    engine = driver.engine
    outcome = AWAITS
    while outcome is AWAITS:
        budget.allows(AWAITS)
        lookup = engine.follow_up(exchange)
        wait(lookup, submit_or_follow(driver, lookup))
        if engine.outcome(lookup) is not DESCRIBED:  # lost, or refused: say why
            raise lookup.failure or lookup.reply.error  # type: ignore[misc]
        outcome = engine.outcome(exchange)
    return outcome

adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
