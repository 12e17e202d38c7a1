"""One multiplexed request, from choosing a driver to its reply, with the retry policy.

A request goes to the least-loaded live driver. The driver's engine builds it: the
request itself, or first a description of a statement it has never seen (what
the statement returns decides the result formats, so that the first and every
later execution decode alike); the description is sent and waited for, then the
request is built again. Retried, because they provably changed nothing:

* a request that never reached the wire (``NotDispatchedError``): on another
  driver, up to once per driver;
* a request on a cached statement the server no longer has, or whose plan no
  longer fits (26000, 0A000 from RevalidateCachedQuery): once per driver, since
  the retry may land on another driver whose copy is stale too;
* a Parse refused because the server connection already holds that
  content-addressed statement (42P05, behind a pooler), a description that found
  its statement gone, and a statement gone again on a driver already retried: a
  few times, since a pooler may hand out yet another server connection each time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gevent.hub import Waiter

from pgmux.engine import DescribeExchange, Exchange, Reply, is_stale_statement_error
from pgmux.engine.statements import is_duplicate_statement_error
from pgmux.errors import NotDispatchedError, PoolTimeout, QueryTimeout
from pgmux.io.pipeline import READY, PipelineDriver, wait_for

if TYPE_CHECKING:
    from pgmux.pool.router import PipelinePool

Build = Callable[..., Exchange]  # (engine, *args) -> the exchange to send
POOLER_RETRIES = 4  # 42P05 / 26000 answers from a pooler's other server connections


class _Attempts:
    """What has been tried for one request, to decide whether another try is safe."""

    __slots__ = ("pool", "deadline", "timeout", "slow", "undispatched", "stale_on", "pooler")

    def __init__(self, pool: PipelinePool, timeout: float | None, slow: bool):
        self.pool = pool
        self.timeout = timeout
        self.slow = slow
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.undispatched = 0
        self.stale_on: list[PipelineDriver] = []
        self.pooler = 0

    def may_redispatch(self) -> bool:
        self.undispatched += 1
        return self.undispatched < self.pool.size

    def may_retry(self, driver: PipelineDriver, exchange: Exchange) -> bool:
        """Whether ``exchange``'s error says the statement, not the request, was at fault."""
        error = exchange.reply.error
        if error is None or exchange.statement is None:
            return False
        if not is_stale_statement_error(error) and not is_duplicate_statement_error(error):
            return False
        if driver in self.stale_on or is_duplicate_statement_error(error) or (
                type(exchange) is DescribeExchange):
            # a pooler's server connection without the statement, or with it already
            self.pooler += 1
            return self.pooler <= POOLER_RETRIES
        self.stale_on.append(driver)
        return True

    def acquire(self, prefer: PipelineDriver | None = None) -> PipelineDriver:
        """A driver with a free slot (``prefer`` if it has one), waiting no longer than the
        caller's own deadline."""
        pool = self.pool
        if prefer is not None and prefer.alive and prefer.load < pool.max_in_flight:
            return prefer
        if self.deadline is None:
            return pool.acquire(slow=self.slow)
        remaining = self.deadline - time.monotonic()
        if remaining >= pool.acquire_timeout:
            return pool.acquire(slow=self.slow)
        try:
            return pool.acquire(max(remaining, 0.0), self.slow)
        except PoolTimeout:
            raise QueryTimeout(f"no result within {self.timeout}s (waiting for a slot)") from None

    def wait(self, exchange: Exchange, follower: Waiter | None) -> None:
        if self.deadline is None:
            wait_for(exchange, None, None, follower)
        else:
            wait_for(exchange, max(self.deadline - time.monotonic(), 0.0),
                     QueryTimeout(f"no result within {self.timeout}s"), follower)


def run(pool: PipelinePool, build: Build, args: tuple[Any, ...],
        timeout: float | None, slow: bool = False) -> Reply:
    """Send ``build(engine, *args)`` to the least-loaded driver and return its reply;
    ``slow``: the statement is known to be slow (the router keeps it off a fast lane)."""
    if timeout is None:  # the hot path: the first attempt, without the bookkeeping
        driver = pool.acquire(slow=slow) if slow else pool.acquire()
        if driver.state is READY:
            exchange = build(driver.engine, *args)
            if exchange.token is None:
                exchange.slow = slow
                driver.submit(exchange)
                try:
                    exchange.token.get()
                except BaseException:
                    exchange.wanted = False  # abandoned: its rows are dropped as they arrive
                    raise
            else:  # already submitted: a description another caller sent; wait for it
                wait_for(exchange, None, None, driver.follow(exchange))
            if (exchange.failure is None and exchange.reply.error is None
                    and type(exchange) is not DescribeExchange):
                return exchange.reply
            return _run(pool, build, args, timeout, slow, driver, exchange)
    return _run(pool, build, args, timeout, slow)


def _run(pool: PipelinePool, build: Build, args: tuple[Any, ...], timeout: float | None,
         slow: bool, driver: PipelineDriver | None = None,
         exchange: Exchange | None = None) -> Reply:
    """The request with every retry the module docstring lists; ``exchange``: a first
    attempt already answered (on ``driver``)."""
    attempts = _Attempts(pool, timeout, slow)
    described_on: PipelineDriver | None = None
    while True:
        if exchange is None:
            driver = attempts.acquire(described_on)
            described_on = None
            exchange = build(driver.engine, *args)
            try:
                follower = None
                if exchange.token is None:
                    exchange.slow = slow
                    driver.submit(exchange)
                else:  # already submitted: a description another caller sent; wait for it
                    follower = driver.follow(exchange)
            except NotDispatchedError:
                if not attempts.may_redispatch():
                    raise
                exchange = None
                continue
            attempts.wait(exchange, follower)
        assert driver is not None
        failure = exchange.failure
        if failure is not None:
            if isinstance(failure, NotDispatchedError) and attempts.may_redispatch():
                exchange = None
                continue
            raise failure
        if attempts.may_retry(driver, exchange):
            exchange = None
            continue
        if type(exchange) is DescribeExchange and exchange.reply.error is None:
            described_on = driver  # described (and parsed) there: now the request itself
            exchange = None
            continue
        return exchange.reply
