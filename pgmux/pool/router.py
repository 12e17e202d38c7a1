"""The pipeline pool: route each query to the least-loaded driver, supervise and replace drivers.

Theory of operation
-------------------
``size`` slots each hold one ``PipelineDriver`` (or nothing while it is being
replaced). A caller takes the live driver with the smallest load (pending + in
flight, in pipeline slots), ties broken round-robin. When every driver is at
``max_in_flight``, or callers are already in line, the caller joins the line
(``pgmux.pool.slots``); each driver that frees slots hands them to the first
callers in line itself, with no re-pick.

When a driver dies its slot is refilled by a supervisor greenlet with capped
exponential backoff. A new driver replays the client's catalog of named
statements before it takes work. Another greenlet probes idle drivers with a
bare Sync so a dead or stalled connection is found before a caller needs it.

A maintenance greenlet *rotates* drivers that should go: past ``max_lifetime``, or
on a host that is no longer the best match for the target (a preferred host is
back, a standby was promoted; see ``io/hosts.py``), checked every
``rebalance_interval``. Rotation drains, it never fails work: a replacement is
opened first, takes the slot (so new work goes to it), and the old driver stops
taking work, finishes what it has in flight, then says Terminate.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any

import gevent
from gevent.hub import Waiter, get_hub

from pgmux._native import adopt
from pgmux.engine.costs import StatementCosts
from pgmux.engine.statements import Descriptions
from pgmux.errors import NotDispatchedError, OperationalError, QueryTimeout
from pgmux.io.connect import ServerConnection
from pgmux.io.hosts import Placement
from pgmux.io.pipeline import READY, PipelineDriver, wait_for
from pgmux.pool.counters import PoolCounters, now
from pgmux.pool.slots import SlotLine, Ticket, fits, lanes
from pgmux.types.registry import TypeRegistry

log = logging.getLogger("pgmux")

DRAIN_TIMEOUT = 30.0  # how long a rotated-out driver may take to finish its in-flight work
MIN_MAINTENANCE_INTERVAL = 0.05


def _load(driver: PipelineDriver) -> int:
    return driver.load


class CatalogEntry:
    """A statement registered with ``Client.prepare``: replayed on every pipeline driver."""

    __slots__ = ("name", "sql", "param_oids")

    def __init__(self, name: str, sql: str, param_oids: tuple[int, ...]):
        self.name = name
        self.sql = sql
        self.param_oids = param_oids


class PipelinePool:
    """A fixed number of pipeline drivers behind least-load routing."""

    def __init__(self, connect: Callable[[], ServerConnection], registry: TypeRegistry, *,
                 size: int, max_in_flight: int, acquire_timeout: float,
                 statement_cache_size: int,
                 descriptions: Descriptions | None = None,
                 costs: StatementCosts | None = None,
                 named_statements: bool = True,
                 on_notice: Callable[[dict[str, str]], None] | None = None,
                 backoff_initial: float = 0.05, backoff_max: float = 5.0,
                 probe_interval: float = 10.0, probe_timeout: float = 5.0,
                 max_lifetime: float | None = None,
                 placement: Placement | None = None,
                 rebalance_interval: float | None = None,
                 drain_timeout: float = DRAIN_TIMEOUT,
                 catalog: dict[str, CatalogEntry] | None = None):
        self.size = size
        self.max_in_flight = max_in_flight
        self.acquire_timeout = acquire_timeout
        # Client.prepare's statements, replayed on every new driver (shared with the client)
        self.catalog: dict[str, CatalogEntry] = catalog if catalog is not None else {}
        self.reconnects = 0
        self._connect = connect
        self._registry = registry
        self._descriptions = descriptions if descriptions is not None else Descriptions()
        self.costs = costs if costs is not None else StatementCosts()
        self._named = named_statements
        # what the guard must assume: off once any connection reported it off
        self.standard_conforming_strings = True
        self._cache_size = statement_cache_size
        self._on_notice = on_notice
        self._backoff = (backoff_initial, backoff_max)
        self._probe = (probe_interval, probe_timeout)
        self._slots: list[PipelineDriver | None] = [None] * size
        self._live: list[PipelineDriver] = []
        self._rr = 0
        self._loop = get_hub().loop
        self.reserved = 0  # slots handed to acquire() callers that have not run yet
        self._supervisors: dict[int, gevent.Greenlet] = {}
        self._prober: gevent.Greenlet | None = None
        self._closed = False
        self.rotations = 0
        self._max_lifetime = max_lifetime
        self._placement = placement
        self._rebalance_interval = rebalance_interval or None
        self._drain_timeout = drain_timeout
        self._expires: dict[PipelineDriver, float] = {}  # driver -> when max_lifetime ends
        self._draining: set[PipelineDriver] = set()  # rotated out, finishing their work
        self._maintainer: gevent.Greenlet | None = None
        self.counters = PoolCounters()  # for stats() and the connection-time metrics
        self._line = SlotLine(self._loop, self.counters)  # callers waiting for a slot
        self._units_done = 0  # units answered by drivers no longer in a slot

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        """Open every slot now; raises if not one connection could be made."""
        jobs = [gevent.spawn(self._try_open, index) for index in range(self.size)]
        gevent.joinall(jobs)
        errors = [job.value for job in jobs if job.value is not None]
        if not self._live:
            raise errors[0] if errors else OperationalError("no pipeline connection opened")
        for index, job in enumerate(jobs):
            if job.value is not None:
                self._supervise(index)
        if self._probe[0] > 0:
            self._prober = gevent.spawn(self._probe_loop)
        if self._maintenance_interval() is not None:
            self._maintainer = gevent.spawn(self._maintain_loop)

    def close(self, timeout: float = 5.0) -> None:
        """Finish in-flight work, fail queued callers, Terminate every connection."""
        self._closed = True
        for job in list(self._supervisors.values()) + [self._prober, self._maintainer]:
            if job is not None:
                job.kill(block=False)
        self._line.close(NotDispatchedError("the client is closed"))
        drivers = [d for d in self._slots if d is not None] + list(self._draining)
        gevent.joinall([gevent.spawn(d.close, timeout) for d in drivers])
        self._live = []
        self._slots = [None] * self.size
        self._draining.clear()

    def abandon_after_fork(self) -> None:
        """In a forked child: drop every inherited socket without sending anything."""
        self._closed = True
        for driver in [d for d in self._slots if d is not None] + list(self._draining):
            driver.abandon_after_fork()
        self._live = []
        self._slots = [None] * self.size
        self._draining.clear()

    @property
    def live(self) -> int:
        return len(self._live)

    @property
    def live_drivers(self) -> list[PipelineDriver]:
        return list(self._live)

    # -- routing --------------------------------------------------------------------
    def free_driver(self, slow: bool = False, statements: int = 1) -> PipelineDriver | None:
        """The live driver with the smallest load, ties broken round-robin, if it has room
        for an exchange of ``statements`` statements (``fits``) and nobody is in line (once
        some statement is known to be slow: among the ``lanes`` the statement may take);
        None otherwise. Raises NotDispatchedError when no driver is live."""
        if self._line.waiting:
            return None
        live = self._live
        count = len(live)
        if count > 1 and not self.costs.known:
            start = self._rr = (self._rr + 1) % count
            best = live[start]
            best_load = best.load
            if best_load:
                for offset in range(1, count):
                    driver = live[(start + offset) % count]
                    load = driver.load
                    if load < best_load:
                        best, best_load = driver, load
                        if not load:
                            break
        elif count > 1:
            best = min(lanes(live, slow), key=_load)
            best_load = best.load
        elif count:
            best = live[0]
            best_load = best.load
        else:
            raise NotDispatchedError(self._no_driver_reason())
        if statements > 1:
            return best if fits(best, statements, self.max_in_flight) else None
        return best if best_load < self.max_in_flight else None

    @property
    def queued(self) -> int:
        """Callers in line for a slot."""
        return self._line.waiting

    def line_up(self, ticket: Ticket) -> None:
        """Put ``ticket`` in line (after ``free_driver`` found no slot); it is served as
        soon as a slot it may use frees. Every freed slot is handed on at once, so a slot
        stands free while callers wait only when the lanes of known-slow statements keep
        them from it: then it is served now if it can be."""
        if self._closed:
            raise NotDispatchedError("the client is closed")
        self._line.join(ticket)
        if self.costs.known:
            self._serve_all()

    def leave_line(self, ticket: Ticket) -> bool:
        """Take ``ticket`` out of line; False if it was served (or refused) already."""
        return self._line.leave(ticket)

    def acquire(self, timeout: float | None = None, slow: bool = False,
                statements: int = 1) -> PipelineDriver:
        """A driver with room for an exchange of ``statements`` statements (admitted as
        ``free_driver`` and the line admit one: ``fits``), waiting in line up to
        ``timeout`` (acquire_timeout); ``slow``: for a statement known to be slow (see
        ``lanes``). Submit to it before the next switch: the slots handed over in line are
        reserved only until then."""
        driver = self.free_driver(slow, statements)
        if driver is not None:
            return driver
        ticket = _Reservation(self, slow, self.acquire_timeout if timeout is None else timeout,
                              statements)
        self.line_up(ticket)
        try:
            ticket.token.get()
        except BaseException:
            if not self.leave_line(ticket) and ticket.driver is not None:
                self.give_back(ticket)  # handed slots but never used them
            raise
        if ticket.error is not None:
            raise ticket.error
        driver = ticket.driver
        assert driver is not None
        self.give_back(ticket, serve=False)
        return driver

    def give_back(self, ticket: _Reservation, serve: bool = True) -> None:
        """Release the slots reserved for an acquire() (and hand them on)."""
        driver = ticket.driver
        assert driver is not None
        driver.load -= ticket.weight
        self.reserved -= ticket.weight
        if serve:
            self.slot_freed(driver)

    def _no_driver_reason(self) -> str:
        if self._closed:
            return "the client is closed"
        return "no live pipeline connection (reconnecting)"

    def slot_freed(self, driver: PipelineDriver) -> None:
        """Slots freed on ``driver`` (a batch completed, a reservation came back): serve
        the line from them; once slow statements are known, from every driver, as the
        lanes a ticket may take change when slow work ends."""
        if self._line.waiting:
            if self.costs.known:
                self._serve_all()
            else:
                self._line.serve(driver, self._live, self.max_in_flight)

    def wake(self, token: Any) -> None:
        """Switch ``token`` from the hub soon (a ticket's wait is over)."""
        self._loop.run_callback(token.switch, None)

    def _serve_all(self) -> None:
        line, live, limit = self._line, self._live, self.max_in_flight
        for driver in list(live):
            if not line.waiting:
                return
            if driver.load < limit:
                line.serve(driver, live, limit)

    # -- supervision ----------------------------------------------------------------
    def _try_open(self, index: int) -> Exception | None:
        """Open slot ``index``; the failure is returned, not left for gevent to print."""
        try:
            self._open_driver(index)
        except Exception as exc:
            return exc
        return None

    def _open_driver(self, index: int) -> PipelineDriver:
        driver = self._new_driver(index)
        self._install(driver)
        return driver

    def _install(self, driver: PipelineDriver, replacing: PipelineDriver | None = None) -> None:
        """Put ``driver`` in its slot (in ``replacing``'s place) and let waiters use it."""
        self._slots[driver.index] = driver
        if replacing is not None and replacing in self._live:
            self._live[self._live.index(replacing)] = driver
        else:
            self._live.append(driver)
        if self._max_lifetime is not None:  # spread out, so the slots do not expire at once
            self._expires[driver] = time.monotonic() + self._max_lifetime * random.uniform(
                0.85, 1.0)
        self._serve_all()

    def _new_driver(self, index: int) -> PipelineDriver:
        """Connect, start a driver for slot ``index`` and replay the catalog on it."""
        started = now()
        try:
            conn = self._connect()
        except Exception:
            self.counters.connections_failed += 1
            raise
        self.counters.connected(now() - started)
        driver = PipelineDriver(
            conn, self._registry, descriptions=self._descriptions, costs=self.costs,
            statement_cache_size=self._cache_size, named_statements=self._named,
            on_dead=self._driver_died, on_slot_freed=self.slot_freed,
            slot_waiters=self._line,
            on_notice=self._on_notice, index=index,
        )
        driver.start()
        if not driver.engine.settings.standard_conforming_strings:
            self.standard_conforming_strings = False
        try:
            self._replay_catalog(driver)
        except BaseException:
            driver.close(timeout=0)
            raise
        if self._closed:
            driver.close(timeout=0)
            raise NotDispatchedError("the client is closed")
        return driver

    def _replay_catalog(self, driver: PipelineDriver) -> None:
        waits = []
        for entry in list(self.catalog.values()):
            exchange = driver.engine.catalog_describe(entry.name, entry.sql, entry.param_oids)
            if exchange is not None:
                driver.submit(exchange)
                waits.append((entry, exchange))
        for entry, exchange in waits:
            wait_for(exchange, self._probe[1] * 2,
                     QueryTimeout("replaying the statement catalog timed out"))
            if exchange.failure is not None:
                raise exchange.failure
            if exchange.reply.error is not None:
                log.warning("pgmux: could not prepare %r on a new connection: %s",
                            entry.name, exchange.reply.error)

    def _driver_died(self, driver: PipelineDriver) -> None:
        if driver in self._live:
            self._live.remove(driver)
        self._expires.pop(driver, None)
        self._draining.discard(driver)
        self._units_done += driver.units
        if not self._live:  # nothing left to serve the line: fail fast, as a newcomer would
            self._line.refuse_all(NotDispatchedError(self._no_driver_reason()))
        if self._slots[driver.index] is not driver:
            return  # rotated out: its slot already has a replacement
        self._slots[driver.index] = None
        self.counters.connections_lost += not self._closed
        if not self._closed:
            self._supervise(driver.index)

    def _supervise(self, index: int) -> None:
        if index not in self._supervisors:
            self._supervisors[index] = gevent.spawn(self._refill, index)

    def _refill(self, index: int) -> None:
        delay, cap = self._backoff
        try:
            while not self._closed:
                try:
                    self._open_driver(index)
                    self.reconnects += 1
                    driver = self._slots[index]
                    if driver is not None:
                        driver.reconnects = self.reconnects
                    return
                except Exception as exc:
                    log.warning("pgmux: reconnecting pipeline connection %d failed: %s",
                                index, exc)
                gevent.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, cap)
        finally:
            self._supervisors.pop(index, None)

    def _probe_loop(self) -> None:
        interval, timeout = self._probe
        seen: dict[int, int] = {}  # driver id -> units completed at the last look
        while not self._closed:
            gevent.sleep(interval)
            idle = []
            for driver in list(self._live):
                if driver.load or seen.get(id(driver)) != driver.units:
                    seen[id(driver)] = driver.units
                else:
                    idle.append(driver)
            gevent.joinall([gevent.spawn(self._probe_driver, d, timeout) for d in idle])
            for driver in idle:
                seen[id(driver)] = driver.units

    def _probe_driver(self, driver: PipelineDriver, timeout: float) -> None:
        exchange = driver.engine.sync()
        try:
            driver.submit(exchange)
            wait_for(exchange, timeout, QueryTimeout("probe"))
        except NotDispatchedError:
            return
        except QueryTimeout:
            driver.fail(OperationalError(f"connection did not answer a probe within {timeout}s"))

    # -- rotation -------------------------------------------------------------------
    def _maintenance_interval(self) -> float | None:
        """How often to look for drivers to rotate (None: never)."""
        intervals = []
        if self._placement is not None and self._rebalance_interval is not None:
            intervals.append(self._rebalance_interval)
        if self._max_lifetime is not None:
            intervals.append(self._max_lifetime / 4)
        return max(min(intervals), MIN_MAINTENANCE_INTERVAL) if intervals else None

    def _maintain_loop(self) -> None:
        interval = self._maintenance_interval()
        assert interval is not None
        last_rebalance = time.monotonic()
        while not self._closed:
            gevent.sleep(interval)
            for driver in self._expired():
                self._rotate(driver, better_only=False)
            if (self._placement is not None and self._rebalance_interval is not None
                    and time.monotonic() - last_rebalance >= self._rebalance_interval):
                last_rebalance = time.monotonic()
                self._rebalance()

    def _expired(self) -> list[PipelineDriver]:
        now = time.monotonic()
        return [d for d in list(self._live) if self._expires.get(d, now + 1) <= now]

    def _rebalance(self) -> None:
        """Move drivers, worst placed first, while a new connection lands somewhere better."""
        placement = self._placement
        assert placement is not None
        self._refresh_roles()
        misplaced = [d for d in list(self._live) if placement.misplaced(d.conn)]
        misplaced.sort(key=lambda d: placement.rank(d.conn), reverse=True)
        for driver in misplaced:
            if not self._rotate(driver, better_only=True):
                return  # the better host did not answer (it is marked down now) or was no better

    def _refresh_roles(self) -> None:
        """A bare Sync to every idle driver, so a changed role (a promotion) is reported
        (ParameterStatus comes before the ReadyForQuery), then record every driver's role."""
        placement = self._placement
        assert placement is not None  # (rebalancing runs only with a placement)
        idle = [d for d in list(self._live) if not d.load]
        gevent.joinall([gevent.spawn(self._probe_driver, d, self._probe[1]) for d in idle])
        for driver in list(self._live):
            placement.observe(driver.conn)

    def _rotate(self, old: PipelineDriver, *, better_only: bool) -> bool:
        """Replace ``old`` with a new driver, then drain it; False when it was not replaced.

        ``better_only``: keep ``old`` unless the new connection ranks better."""
        try:
            new = self._new_driver(old.index)
        except Exception as exc:
            log.info("pgmux: could not open a replacement for pipeline connection %d: %s",
                     old.index, exc)
            return False
        placement = self._placement
        worse = better_only and placement is not None and not (
            placement.rank(new.conn) < placement.rank(old.conn))
        if worse or self._closed or self._slots[old.index] is not old or not old.alive:
            new.close(timeout=0)  # no better, or the slot changed hands meanwhile
            return False
        self._install(new, replacing=old)
        self._retire(old)
        self.rotations += 1
        new.reconnects = self.reconnects
        return True

    def _retire(self, driver: PipelineDriver) -> None:
        """Take ``driver`` out of routing; it finishes its in-flight work, then closes."""
        if driver in self._live:
            self._live.remove(driver)
        self._expires.pop(driver, None)
        self._draining.add(driver)
        gevent.spawn(self._drain, driver)

    def _drain(self, driver: PipelineDriver) -> None:
        try:
            driver.close(self._drain_timeout)
        finally:
            self._draining.discard(driver)

    # -- catalog --------------------------------------------------------------------
    def prepare_everywhere(self, entry: CatalogEntry, timeout: float | None) -> None:
        """Prepare ``entry`` on every live driver; raise the server's error if it fails."""
        waits = []
        for driver in list(self._live):
            exchange = driver.engine.catalog_describe(entry.name, entry.sql, entry.param_oids)
            if exchange is not None:
                driver.submit(exchange)
                waits.append(exchange)
        first_error: BaseException | None = None
        for exchange in waits:
            wait_for(exchange, timeout, QueryTimeout(f"prepare {entry.name!r} timed out"))
            error = exchange.failure or exchange.reply.error
            if error is not None and first_error is None:
                first_error = error
        if first_error is not None:
            raise first_error

    # -- observability --------------------------------------------------------------
    def index_of(self, engine: Any) -> int | None:
        """The index of the connection whose engine is ``engine`` (for telemetry), if any."""
        for driver in [*self._slots, *self._draining]:
            if driver is not None and driver.engine is engine:
                return driver.index
        return None

    def stats(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "live": len(self._live),
            "rotations": self.rotations,
            "draining": len(self._draining),
            "drivers": [_driver_stats(d) for d in self._slots
                        if d is not None and d.state is READY],
        }

    def counter_stats(self) -> dict[str, Any]:
        """The running counts (``PoolCounters``; ``requests``: every unit answered, by the
        drivers in the slots and those gone), callers queued for a slot, reconnects."""
        units = sum(d.units for d in self._slots if d is not None)
        return {"waiting": self._line.waiting, "reconnects": self.reconnects,
                **self.counters.stats(), "requests": self._units_done + units}


def _driver_stats(driver: PipelineDriver) -> dict[str, Any]:
    """A driver's counters plus where it is connected: ``host`` and ``standby``."""
    conn = driver.conn
    return {**driver.stats(), "index": driver.index, "host": conn.endpoint.describe(),
            "standby": conn.parameters.get("in_hot_standby") == "on"}


class _Reservation(Ticket):
    """``acquire()``'s place in line: served with a slot reserved on the driver."""

    __slots__ = ("pool", "driver", "weight")

    def __init__(self, pool: PipelinePool, slow: bool, timeout: float | None,
                 statements: int = 1):
        self.token = Waiter()
        self.slow = slow
        self.statements = statements
        self.patience = timeout
        self.error = None
        self.pool = pool
        self.driver: PipelineDriver | None = None
        self.weight = 0  # the slots reserved

    def serve(self, driver: PipelineDriver) -> None:
        # the slots its exchange will cost there, held until its caller runs (give_back)
        weight = driver.times.slots(self.statements)
        driver.load += weight
        self.pool.reserved += weight
        self.weight = weight
        self.driver = driver
        self.pool.wake(self.token)

adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
