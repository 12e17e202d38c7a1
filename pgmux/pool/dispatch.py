"""One multiplexed request, from choosing a driver to its reply.

A request goes to the least-loaded live driver. The driver's engine builds it: the
request itself, or first a description of a statement it has never seen (what the
statement returns decides the result formats, so that the first and every later
execution decode alike). When the exchange completes, the engine's ``outcome()`` says
what follows: hand the reply over, build it again (after a description, or a statement
fault where nothing ran), send it elsewhere (it never reached the wire), or fail; the
engine's ``RetryBudget`` bounds the attempts. This module only waits: for a slot, for
the exchange, within the caller's deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gevent.hub import Waiter

from pgmux.engine import Exchange, RetryBudget
from pgmux.engine.outcome import AWAITS, DESCRIBED, DONE, LOST, UNSENT, Outcome
from pgmux.errors import NotDispatchedError, PoolTimeout, QueryTimeout
from pgmux.io.deadline import Deadline
from pgmux.io.pipeline import READY, PipelineDriver, wait_for

if TYPE_CHECKING:
    from pgmux.pool.router import PipelinePool

Build = Callable[..., Exchange]  # (engine, *args) -> the exchange to send


class _Attempts:
    """One request's deadline and retry budget, and how it waits within them."""

    __slots__ = ("pool", "deadline", "slow", "budget")

    def __init__(self, pool: PipelinePool, timeout: float | None, slow: bool):
        self.pool = pool
        self.slow = slow
        self.deadline = Deadline(timeout)
        self.budget = RetryBudget(pool.size)

    def acquire(self, prefer: PipelineDriver | None = None) -> PipelineDriver:
        """A driver with a free slot (``prefer`` if it has one), waiting no longer than the
        caller's own deadline."""
        pool = self.pool
        if prefer is not None and prefer.alive and prefer.load < pool.max_in_flight:
            return prefer
        remaining = self.deadline.remaining()
        if remaining is None or remaining >= pool.acquire_timeout:
            return pool.acquire(slow=self.slow)
        try:
            return pool.acquire(remaining, self.slow)
        except PoolTimeout:
            raise QueryTimeout(f"no result within {self.deadline.timeout}s "
                               "(waiting for a slot)") from None

    def wait(self, exchange: Exchange, follower: Waiter | None) -> None:
        remaining = self.deadline.remaining()
        if remaining is None:
            wait_for(exchange, None, None, follower)
        else:
            wait_for(exchange, remaining,
                     QueryTimeout(f"no result within {self.deadline.timeout}s"), follower)


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


def run(pool: PipelinePool, build: Build, args: tuple[Any, ...],
        timeout: float | None, slow: bool = False) -> Exchange:
    """Send ``build(engine, *args)`` to the least-loaded driver; the exchange, answered;
    ``slow``: the statement is known to be slow (the router keeps it off a fast lane)."""
    if timeout is None:  # the hot path: the first attempt, without the bookkeeping
        driver = pool.acquire(slow=slow) if slow else pool.acquire()
        if driver.state is READY:
            engine = driver.engine
            exchange = build(engine, *args)
            if exchange.token is None:
                exchange.slow = slow
                waiter = driver.submit(exchange)
                try:
                    waiter.get()
                except BaseException:
                    exchange.wanted = False  # abandoned: its rows are dropped as they arrive
                    raise
            else:  # already submitted: a description another caller sent; wait for it
                wait_for(exchange, None, None, driver.follow(exchange))
            outcome = engine.outcome(exchange)
            if outcome is DONE:
                return exchange
            return _run(pool, build, args, timeout, slow, driver, exchange, outcome)
    return _run(pool, build, args, timeout, slow)


def _run(pool: PipelinePool, build: Build, args: tuple[Any, ...], timeout: float | None,
         slow: bool, driver: PipelineDriver | None = None, exchange: Exchange | None = None,
         outcome: Outcome | None = None) -> Exchange:
    """The request with every attempt the engine allows; ``exchange``: a first attempt
    already answered on ``driver`` with ``outcome``."""
    attempts = _Attempts(pool, timeout, slow)
    prefer: PipelineDriver | None = None
    while True:
        if exchange is None:
            driver = attempts.acquire(prefer)
            prefer = None
            exchange = build(driver.engine, *args)
            try:
                follower = submit_or_follow(driver, exchange, slow)
            except NotDispatchedError:
                if not attempts.budget.allows(UNSENT):
                    raise
                exchange = None
                continue
            attempts.wait(exchange, follower)
            outcome = driver.engine.outcome(exchange)
        assert driver is not None and outcome is not None
        if outcome is AWAITS:
            outcome = look_up_types(driver, exchange, attempts.wait, attempts.budget)
        if outcome is DONE:
            return exchange
        if outcome is LOST or (outcome is UNSENT and not attempts.budget.allows(UNSENT)):
            assert exchange.failure is not None
            raise exchange.failure
        if outcome is not UNSENT and not attempts.budget.allows(outcome, driver):
            return exchange  # out of attempts: the statement's error is the answer
        if outcome is DESCRIBED:
            prefer = driver  # described (and parsed) there: now the request itself
        exchange = None
