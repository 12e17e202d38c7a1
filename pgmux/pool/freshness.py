"""Read-your-writes across a primary and its standbys: WAL positions of writes and replays.

Theory of operation
-------------------
A write through the client is followed by a *fence*: the primary's
``pg_current_wal_insert_lsn()`` read after the write returned, before the writer's call
returns. Any read started later needs a server that has replayed at least the highest
fenced LSN (``WalFence.lsn``). Writers that finish together share one fence (the next
sample taken after they all finished), so a burst of writes costs one extra unit on the
primary, and each writer one round trip at most.

A read through a ``read_your_writes`` view goes to one of the view's connections:

* on a primary (the view's target let it connect to one): it sees every committed write;
* on a standby whose replay LSN, last seen, is at or past the fence: sent as is;
* on another standby: the read is sent right behind a ``pg_last_wal_replay_lsn()``
  query (a simple Query) on the same connection, one round trip for both. The standby answers them in
  order, so if that LSN has reached the fence the read's snapshot includes the write and
  its rows are returned; otherwise the rows are dropped and the primary answers.

Replay LSNs are learned only from those piggybacked queries: no poll, no extra round
trip per read. A statement the view has not described yet goes to the primary, which
describes it for the view too (they share descriptions). What is counted (``stats()``): reads answered by a standby, directly or after a
check, and reads the primary answered because the standby was behind.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import gevent
from gevent.event import Event

from pgmux.cache import put_bounded
from pgmux.engine import Engine, Exchange, RetryBudget
from pgmux.engine.outcome import AWAITS, CLASH, DESCRIBED, STALE, UNSENT
from pgmux.engine.result import first_value
from pgmux.errors import InterfaceError, NotDispatchedError, QueryTimeout
from pgmux.io.deadline import Deadline
from pgmux.io.hosts import endpoint_key
from pgmux.io.pipeline import PipelineDriver, wait_for
from pgmux.pool import dispatch
from pgmux.pool.lazy import LazyPipelinePool
from pgmux.pool.router import PipelinePool
from pgmux.sql.scanner import mask_sql

log = logging.getLogger("pgmux")

FENCE_SQL = "SELECT pg_catalog.pg_current_wal_insert_lsn()::text"
REPLAY_SQL = "SELECT pg_catalog.pg_last_wal_replay_lsn()::text"
UNKNOWN = 1 << 64  # the fence failed: no standby can be shown to be caught up
FENCE_RETRY = 1.0  # seconds between attempts to take a fence after one failed

_READ = re.compile(r"\s*\(*\s*(SELECT|VALUES|TABLE|SHOW)\b", re.IGNORECASE)
_WRITING_WORDS = re.compile(r"\b(INSERT|UPDATE|DELETE|MERGE|NEXTVAL|SETVAL|INTO)\b",
                            re.IGNORECASE)
_VERDICTS_KEPT = 1024

Build = dispatch.Build


def wal_position(primary: LazyPipelinePool, timeout: float) -> int:
    """The primary's WAL insert position now, read on its pipelined connections."""
    reply = dispatch.run(primary.get(), Engine.query, (FENCE_SQL, (), (), []), timeout)
    lsn = parse_lsn(first_value(reply.result()))
    if lsn is None:
        raise InterfaceError("the server reported no WAL position")
    return lsn


def parse_lsn(text: str | None) -> int | None:
    """``'16/B374D848'`` -> its 64-bit position (None for NULL)."""
    if text is None:
        return None
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


class WriteClassifier:
    """Which statements count as writes for read-your-writes (cached verdicts)."""

    def __init__(self) -> None:
        self._verdicts: dict[str, bool] = {}

    def is_write(self, sql: str) -> bool:
        """Everything but a plain read (SELECT/VALUES/TABLE/SHOW with no data-modifying
        word outside literals). A SELECT that writes only through a function it calls is
        taken for a read."""
        verdict = self._verdicts.get(sql)
        if verdict is None:
            try:
                masked = mask_sql(sql)
            except ValueError:
                verdict = True
            else:
                verdict = not _READ.match(masked) or bool(_WRITING_WORDS.search(masked))
            put_bounded(self._verdicts, sql, verdict, _VERDICTS_KEPT)
        return verdict


class WalFence:
    """The primary's WAL position after the latest write that returned."""

    def __init__(self, sample: Callable[[], int], timeout: float):
        self.lsn = 0  # reads need a server that replayed this much (UNKNOWN: none will do)
        self.samples = 0
        self._sample = sample
        self._timeout = timeout
        self._next: Event | None = None  # the round that writers finishing now join
        self._sampler: gevent.Greenlet | None = None
        self._closed = False

    def after_write(self) -> None:
        """Return once a fence taken after now is known (shared with concurrent writers)."""
        ticket = self._next
        if ticket is None:
            ticket = self._next = Event()
        if self._sampler is None:
            self._sampler = gevent.spawn(self._take_rounds)
        if not ticket.wait(self._timeout * 2):
            self.lsn = UNKNOWN  # the write stands; later reads go to the primary

    def _take_rounds(self) -> None:
        try:
            while self._next is not None and not self._closed:
                ticket, self._next = self._next, None  # later writers wait for the next one
                self._take_one()
                ticket.set()
                while self.lsn == UNKNOWN and not self._closed:
                    gevent.sleep(FENCE_RETRY)
                    self._take_one()
        finally:
            self._sampler = None

    def _take_one(self) -> None:
        try:
            self.lsn = self._sample()  # taken after every earlier sample: never lower
            self.samples += 1
        except Exception as exc:
            log.warning("pgmux: read-your-writes could not read the primary's WAL position "
                        "(%s); reads go to the primary until it can", exc)
            self.lsn = UNKNOWN

    def after_fork(self) -> None:
        """In a forked child: forget the parent's sampler and waiting round."""
        self._next = self._sampler = None

    def close(self) -> None:
        self._closed = True
        sampler = self._sampler
        if sampler is not None:
            sampler.kill(block=False)


class ReadYourWrites:
    """Routes a view's reads so that each sees every write fenced before it started."""

    def __init__(self, fence: WalFence):
        self.fence = fence
        self._replayed: dict[Any, int] = {}  # host -> highest replay LSN seen there
        self.counts = {"standby": 0, "standby_checked": 0, "primary": 0, "behind": 0}

    def dispatch(self, pool: PipelinePool, build: Build, args: tuple[Any, ...],
                 timeout: float | None, primary: LazyPipelinePool,
                 statements: int = 1) -> Exchange:
        """Run a read (of ``statements`` statements) on ``pool`` (the view's) if it can see
        the fenced writes, else on the ``primary`` pool (the client's)."""
        need = self.fence.lsn
        if need == 0:  # no write fenced yet
            return dispatch.run(pool, build, args, timeout, statements=statements)
        deadline = Deadline(timeout)
        reply = None
        if need != UNKNOWN:
            try:
                driver = pool.acquire(timeout, statements=statements)
                reply = self._on_view(driver, build, args, need, deadline)
            except NotDispatchedError:
                reply = None
        if reply is None:
            self.counts["primary"] += 1
            return dispatch.run(primary.get(), build, args, deadline.remaining(),
                                statements=statements)
        return reply

    def fan_out_pool(self, pool: PipelinePool, primary: LazyPipelinePool,
                     statements: int) -> PipelinePool:
        """Where a fan-out of ``statements`` reads goes (its reads are not checked one by
        one): the view's connections while no write is fenced, or when each of them is
        known to have replayed the fence (a primary, or a standby last seen at or past
        it); else the primary's."""
        need = self.fence.lsn
        if need == 0 or (need != UNKNOWN and all(
                self._caught_up(driver, need) for driver in pool.live_drivers)):
            self.counts["standby"] += statements
            return pool
        self.counts["primary"] += statements
        return primary.get()

    def _caught_up(self, driver: PipelineDriver, need: int) -> bool:
        conn = driver.conn
        if conn.parameters.get("in_hot_standby") != "on":
            return True
        return self._replayed.get(endpoint_key(conn.endpoint), -1) >= need

    def _on_view(self, driver: PipelineDriver, build: Build, args: tuple[Any, ...],
                 need: int, deadline: Deadline) -> Exchange | None:
        """The read on ``driver``, checked when it is a standby not known to be caught up;
        None when the primary must answer."""
        read = self._request(driver, build, args, deadline)
        if read is None:
            return None
        standby = driver.conn.parameters.get("in_hot_standby") == "on"
        if standby and self._replayed.get(endpoint_key(driver.conn.endpoint), -1) < need:
            return self._checked(driver, read, need, deadline)
        if not self._run(driver, [read], deadline):
            return None
        self.counts["standby" if standby else "primary"] += 1
        return read

    def _request(self, driver: PipelineDriver, build: Build, args: tuple[Any, ...],
                 deadline: Deadline) -> Exchange | None:
        """The read's request on ``driver``, described there first if it has to be (as the
        pool layer does); None when that failed."""
        exchange = build(driver.engine, *args)
        if not exchange.DESCRIBES:
            return exchange
        try:
            follower = dispatch.submit_or_follow(driver, exchange)
        except NotDispatchedError:
            return None
        _wait(exchange, deadline, follower)
        if driver.engine.outcome(exchange) is not DESCRIBED:
            return None
        exchange = build(driver.engine, *args)
        return None if exchange.DESCRIBES else exchange

    def _checked(self, driver: PipelineDriver, read: Exchange, need: int,
                 deadline: Deadline) -> Exchange | None:
        """The read right behind a replay-LSN query; its reply if the standby caught up."""
        check = driver.engine.script(REPLAY_SQL)
        if not self._run(driver, [check, read], deadline) or check.error is not None:
            return None
        replayed = parse_lsn(first_value(check.result()))
        if replayed is None:
            return None  # not in recovery any more: promoted, let the primary answer
        host = endpoint_key(driver.conn.endpoint)
        self._replayed[host] = max(self._replayed.get(host, 0), replayed)
        if replayed < need:
            self.counts["behind"] += 1
            return None
        self.counts["standby_checked"] += 1
        return read

    def _run(self, driver: PipelineDriver, exchanges: list[Exchange],
             deadline: Deadline) -> bool:
        """Submit ``exchanges`` back to back on ``driver`` and wait for all; False when the
        read must go elsewhere (not sent, or its cached statement went stale)."""
        try:
            for exchange in exchanges:
                driver.submit(exchange)
        except NotDispatchedError:
            return False
        engine = driver.engine
        for exchange in exchanges:
            _wait(exchange, deadline)
            outcome = engine.outcome(exchange)
            if outcome is AWAITS:
                outcome = dispatch.look_up_types(driver, exchange, _waiter(deadline),
                                                 RetryBudget())
            if outcome is UNSENT or outcome is STALE or outcome is CLASH:
                return False
            if exchange.failure is not None:
                raise exchange.failure
        return True

    def stats(self) -> dict[str, int]:
        return {**self.counts, "fences": self.fence.samples}


def _waiter(deadline: Deadline) -> Callable[[Exchange, Any], None]:
    return lambda exchange, follower: _wait(exchange, deadline, follower)


def _wait(exchange: Exchange, deadline: Deadline, follower: Any = None) -> None:
    remaining = deadline.remaining()
    if remaining is None:
        wait_for(exchange, None, None, follower)
    else:
        wait_for(exchange, remaining, QueryTimeout("no result within the timeout"), follower)
