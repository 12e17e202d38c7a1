"""The line of callers waiting for a pipeline slot, and each freed slot handed to one of them.

Theory of operation
-------------------
A caller that finds every live pipelined connection at ``max_in_flight`` (or callers
already in line) joins the line with a ``Ticket`` and never picks a connection again.
Slots free when exchanges complete (a driver's reader tells the pool once per batch),
when a connection is installed, and when a reserved slot is given back. The pool then
*serves* the line on that driver: while the driver has room for it (``fits``), the first
ticket in arrival order that may use it leaves the line and is ``serve``-d with the
driver:

* a request's ticket (``pgmux.pool.dispatch``) has its exchange built by that driver's
  engine and submitted there on the caller's behalf, so its caller wakes once, when the
  exchange is answered, as if it had found the slot free;
* a plain wait (``PipelinePool.acquire``) reserves the slot and wakes its caller with
  the driver, which it uses without picking again.

No caller is woken to find its slot taken, and no caller passes one that came before
it: an atomic unit that costs more slots than a driver has free waits there, first in
line, until enough free. Known-slow statements keep the router's rule (``lanes``): a
ticket is served only by a connection the rule would have sent it to, so a fast
statement still avoids the lanes that carry slow work while one is free of it. Fast and slow tickets wait in two
queues, so the first ticket that fits a driver is found without a scan.

A ticket may wait for a slot only so long (``acquire_timeout``): one loop timer expires
them all.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from pgmux._native import adopt
from pgmux.errors import PoolTimeout
from pgmux.io.pipeline import READY, PipelineDriver
from pgmux.pool.counters import PoolCounters

_now = time.monotonic
_NEVER = float("inf")


def fits(driver: PipelineDriver, statements: int, limit: int) -> bool:
    """Whether an exchange of ``statements`` statements may be admitted on ``driver``: the
    slots it costs there (``ServerTimes.slots``) fit under ``limit`` with what is in flight,
    or nothing is (one that costs more than ``limit`` runs, alone)."""
    load = driver.load
    if statements == 1 or not load:
        return load < limit
    return load + driver.times.slots(statements) <= limit


def lanes(live: list[PipelineDriver], slow: bool) -> list[PipelineDriver]:
    """The drivers a statement may go to once some statement is known to be slow.

    A fast statement goes to a connection with no known-slow statement in flight, if
    there is one. A slow statement does too, unless that would leave none free of slow
    work: then to one already carrying slow work, so that one connection is always left
    to the fast.
    """
    clean = [driver for driver in live if not driver.slow_in_flight]
    if slow and len(clean) <= 1 and len(clean) < len(live):
        return [driver for driver in live if driver.slow_in_flight]
    return clean or live


class Ticket:
    """A place in line: ``serve(driver)`` when it is handed ``driver``'s free slot; or
    ``error`` set and ``token`` switched when it leaves the line without one.

    Its fields are set by each kind of ticket (a queued request is on the hot path: no
    ``__init__`` chain): ``token`` (switched from the hub when the wait is over),
    ``slow`` (for a statement known to be slow), ``statements`` (how many its exchange
    carries: admitted by ``fits``), ``patience`` (seconds it may wait for a slot, None:
    for ever), ``error``; the line sets ``order`` (its place), ``joined`` and ``expires``
    (monotonic times)."""

    __slots__ = ("token", "slow", "statements", "patience", "order", "joined", "expires",
                 "error")

    token: Any
    slow: bool
    statements: int
    patience: float | None
    order: int
    joined: float
    expires: float
    error: BaseException | None

    def serve(self, driver: PipelineDriver) -> None:
        raise NotImplementedError

    def expired(self) -> BaseException:
        """The error for a ticket whose patience ran out in line."""
        return PoolTimeout(f"no pipeline slot free within {self.patience}s")


class SlotLine:
    """Tickets in arrival order (fast and slow apart); ``serve`` hands a driver's free
    slots to the first ones that may use it."""

    def __init__(self, loop: Any, counters: PoolCounters):
        self._counters = counters  # requests_queued, wait_time, refusals
        self._fast: deque[Ticket] = deque()
        self._slow: deque[Ticket] = deque()
        self._order = 0
        self.waiting = 0  # tickets in line
        self._loop = loop
        self._timer: Any = None  # one loop timer for every ticket's deadline
        self._timer_at = _NEVER

    def __len__(self) -> int:
        return self.waiting

    def join(self, ticket: Ticket) -> None:
        self._order += 1
        ticket.order = self._order
        (self._slow if ticket.slow else self._fast).append(ticket)
        self.waiting += 1
        ticket.joined = joined = _now()
        patience = ticket.patience
        if patience is None:
            ticket.expires = _NEVER
            return
        ticket.expires = at = joined + patience
        if at < self._timer_at:  # (later tickets with the same patience find it armed)
            self._arm(at)

    def leave(self, ticket: Ticket) -> bool:
        """Take ``ticket`` out of line; False if it was not in line (served already)."""
        queue = self._slow if ticket.slow else self._fast
        try:
            queue.remove(ticket)
        except ValueError:
            return False
        self.waiting -= 1
        return True

    def serve(self, driver: PipelineDriver, live: list[PipelineDriver], limit: int) -> None:
        """Hand ``driver``'s free slots (below ``limit``) to the first tickets that may use
        it, while the first fits."""
        fast, slow = self._fast, self._slow
        served, waited, now = 0, 0.0, _now()
        while self.waiting and driver.load < limit and driver.state is READY:
            queue = fast
            if slow or driver.slow_in_flight:  # (else the common case: nothing known slow)
                chosen = self._queue_for(driver, live)
                if chosen is None:
                    break
                queue = chosen
            ticket = queue[0]
            statements = ticket.statements
            if statements > 1 and not fits(driver, statements, limit):
                break  # a unit that needs more slots than are free: nobody passes it
            self.waiting -= 1
            queue.popleft()
            served += 1
            waited += now - ticket.joined
            ticket.serve(driver)
        if served:  # (PoolCounters.queued_for, once for the lot)
            counters = self._counters
            counters.requests_queued += served
            counters.wait_time += waited

    def _queue_for(self, driver: PipelineDriver,
                   live: list[PipelineDriver]) -> deque[Ticket] | None:
        """The queue whose first ticket ``driver`` serves next (None: neither may use it)."""
        fast, slow = self._fast, self._slow
        take_fast = bool(fast) and driver in lanes(live, False)
        take_slow = bool(slow) and driver in lanes(live, True)
        if take_fast and take_slow:
            return fast if fast[0].order < slow[0].order else slow
        if take_fast or take_slow:
            return fast if take_fast else slow
        return None

    def refuse_all(self, error: BaseException) -> None:
        """Every ticket leaves the line with ``error`` (the pool closed, no connection left)."""
        for queue in (self._fast, self._slow):
            while queue:
                self._refuse(queue.popleft(), error)
        self.waiting = 0

    def _refuse(self, ticket: Ticket, error: BaseException) -> None:
        self._counters.refused(error)
        ticket.error = error
        self._loop.run_callback(ticket.token.switch, None)

    # -- deadlines ------------------------------------------------------------------
    def _arm(self, at: float) -> None:
        """Have the timer fire at ``at`` (monotonic; one loop timer for every ticket: a
        gevent.Timeout each would cost more than the rest of a queued query)."""
        self._disarm()
        self._timer_at = at
        self._timer = self._loop.timer(max(at - _now(), 0.0), ref=False)
        self._timer.start(self._expire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.close()
            self._timer = None
        self._timer_at = _NEVER

    def _expire(self) -> None:
        """(In the hub) every ticket whose patience ran out leaves the line with its error."""
        self._disarm()
        now = _now()
        earliest = _NEVER
        for queue in (self._fast, self._slow):
            for ticket in list(queue):
                if ticket.expires <= now:
                    queue.remove(ticket)
                    self.waiting -= 1
                    self._refuse(ticket, ticket.expired())
                elif ticket.expires < earliest:
                    earliest = ticket.expires
        if earliest < _NEVER:
            self._arm(earliest)

    def close(self, error: BaseException) -> None:
        self.refuse_all(error)
        self._disarm()

adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
