"""Soak: load on both paths mixed with random greenlet kills, timeouts and backend
terminations, for a bounded time. Every answer is checked against its request, and the
final stats must show no leaked slot and no stuck driver.

The default run lasts PGMUX_SOAK_SECONDS (6 s); ``-m slow`` runs a 60 s version."""

from __future__ import annotations

import collections
import os
import random
import time

import gevent
import gevent.event
import pytest
from support.mux import Clients, drivers, join_all, unique_name, wait_until

from pgmux.client import Client
from pgmux.errors import (
    DivisionByZero,
    IndeterminateResultError,
    NotDispatchedError,
    OperationalError,
    PoolTimeout,
    QueryTimeout,
)

SHORT_SECONDS = float(os.environ.get("PGMUX_SOAK_SECONDS", "6"))
LONG_SECONDS = 60.0
MUX_WORKERS = 80
PINNED_WORKERS = 3

# What a multiplexed caller may see besides its own answer while the soak runs.
MUX_EXPECTED = (DivisionByZero, QueryTimeout, IndeterminateResultError, NotDispatchedError,
                PoolTimeout)
PINNED_EXPECTED = (OperationalError, QueryTimeout, PoolTimeout)


class Soak:
    def __init__(self, db: Client, clients: Clients, table: str, seed: int):
        self.db, self.clients, self.table = db, clients, table
        self.random = random.Random(seed)
        self.stop = gevent.event.Event()
        self.counts: collections.Counter = collections.Counter()
        self.wrong: list[str] = []
        self.committed: list[int] = []
        self.in_doubt: list[int] = []  # COMMIT in doubt, or the caller was killed
        self.workers: list[gevent.Greenlet] = []
        self.stmt = db.prepare(unique_name("soak"), "SELECT $1::int * 2, $2::text")
        self._serial = 0

    def _next(self) -> int:
        self._serial += 1
        return self._serial

    # -- callers ----------------------------------------------------------------------
    def mux_worker(self) -> None:
        pick = self.random.random
        while not self.stop.is_set():
            n = self._next()
            choice = pick()
            try:
                if choice < 0.05:
                    self.db.fetchval("SELECT $1::int / 0", [n])
                    self.wrong.append(f"{n}: division by zero succeeded")
                elif choice < 0.15:
                    got = self.db.fetchval("SELECT $1::int FROM pg_sleep(0.01)", [n],
                                           timeout=self.random.choice([0.005, 0.02, 0.5]))
                    self._check(n, got, n)
                elif choice < 0.35:
                    got = tuple(self.stmt.fetchone([n, f"s{n}"]))
                    self._check(n, got, (2 * n, f"s{n}"))
                else:
                    got = self.db.fetchone("SELECT $1::int, $2::text", [n, f"t{n}"])
                    self._check(n, got, (n, f"t{n}"))
            except MUX_EXPECTED as exc:
                self.counts[type(exc).__name__] += 1
                if isinstance(exc, NotDispatchedError):
                    gevent.sleep(0.005)  # nothing live: the supervisor is reconnecting

    def _check(self, n: int, got: object, expected: object) -> None:
        if got != expected:
            self.wrong.append(f"{n}: got {got!r}, expected {expected!r}")
        self.counts["ok"] += 1

    def pinned_worker(self) -> None:
        me = gevent.getcurrent()
        while not self.stop.is_set():
            key = me.key = self._next()
            stage = "begin"
            try:
                with self.db.transaction(timeout=2.0) as tx:
                    stage = "insert"
                    tx.execute(f"INSERT INTO {self.table} VALUES ($1)", [key])
                    if tx.fetchval("SELECT count(*) FROM " + self.table + " WHERE k = $1",
                                   [key]) != 1:
                        self.wrong.append(f"{key}: not visible in its own transaction")
                    stage = "commit"
            except PINNED_EXPECTED as exc:
                self.counts["pinned " + type(exc).__name__] += 1
                if isinstance(exc, IndeterminateResultError) and stage == "commit":
                    self.in_doubt.append(key)
                gevent.sleep(0.005)
                continue
            self.committed.append(key)
            self.counts["pinned ok"] += 1

    # -- chaos ------------------------------------------------------------------------
    def killer(self) -> None:
        while not self.stop.is_set():
            gevent.sleep(self.random.uniform(0.005, 0.05))
            victims = [w for w in self.workers if not w.dead]
            if victims:
                victim = self.random.choice(victims)
                victim.kill(block=False)
                self.counts["greenlets killed"] += 1
                if getattr(victim, "pinned", False) and hasattr(victim, "key"):
                    self.in_doubt.append(victim.key)  # killed: its caller never learns
                self._spawn(pinned=getattr(victim, "pinned", False))

    def _spawn(self, pinned: bool) -> None:
        worker = gevent.spawn(self.pinned_worker if pinned else self.mux_worker)
        worker.pinned = pinned
        self.workers.append(worker)

    def terminator(self) -> None:
        while not self.stop.is_set():
            gevent.sleep(self.random.uniform(0.3, 0.8))
            pids = sorted(self.clients.backend_pids(self.db))
            if pids:
                pid = self.random.choice(pids)
                self.clients.admin.fetchval("SELECT pg_terminate_backend($1)", [pid])
                self.counts["backends terminated"] += 1

    def run(self, seconds: float) -> None:
        for index in range(MUX_WORKERS + PINNED_WORKERS):
            self._spawn(pinned=index >= MUX_WORKERS)
        chaos = [gevent.spawn(self.killer), gevent.spawn(self.terminator)]
        gevent.sleep(seconds)
        self.stop.set()
        join_all(chaos, timeout=10)
        join_all(self.workers, timeout=30)
        failed = [w.exception for w in self.workers if w.exception is not None]
        assert not failed, f"unexpected errors: {failed[:3]}"


def _soak(clients, pg, seconds: float) -> None:
    seed = int(os.environ.get("PGMUX_SOAK_SEED", random.randrange(1 << 30)))
    table = unique_name("mux_soak")
    pg.admin(f"CREATE TABLE {table} (k int PRIMARY KEY)")
    db = clients(pipeline_size=4, pinned_size=2, max_in_flight=32, acquire_timeout=5)
    soak = Soak(db, clients, table, seed)
    started = time.monotonic()
    soak.run(seconds)
    elapsed = time.monotonic() - started
    print(f"\nsoak seed={seed} {elapsed:.1f}s: {dict(sorted(soak.counts.items()))}")

    assert not soak.wrong, soak.wrong[:5]
    assert soak.counts["ok"] > 1000 * seconds / 6
    assert soak.counts["greenlets killed"] > 10 and soak.counts["backends terminated"] >= 3

    # Recovery: every slot refilled, nothing left in flight or queued, no lent connection.
    wait_until(lambda: db.stats()["pipeline"]["live"] == 4, what="every driver back")
    wait_until(lambda: all(d["load"] == 0 for d in db.stats()["pipeline"]["drivers"]),
               what="every abandoned unit drained")
    stats = db.stats()
    print(f"final stats: reconnects={stats['reconnects']}, pinned={stats['pinned']}, "
          f"loads={[d['load'] for d in stats['pipeline']['drivers']]}")
    assert stats["pinned"]["active"] == 0 and stats["pinned"]["waiting"] == 0, stats["pinned"]
    pool = db._pipeline
    assert pool.queued == 0 and pool.reserved == 0, "a pipeline turn was lost"
    assert all(d.alive for d in drivers(db))

    # The client still answers everyone correctly, on both paths.
    jobs = [gevent.spawn(db.fetchone, "SELECT $1::int, $2::text", [i, f"f{i}"])
            for i in range(500)]
    join_all(jobs)
    assert [job.value for job in jobs] == [(i, f"f{i}") for i in range(500)]
    with db.transaction() as tx:
        assert tx.fetchval("SELECT 1") == 1
    stored = {row[0] for row in db.query(f"SELECT k FROM {table}")}
    assert set(soak.committed) <= stored, "a committed transaction is missing"
    assert stored - set(soak.committed) <= set(soak.in_doubt), "a failed transaction stuck"


# The run's default per-test timeout, plus the soak's own length (PGMUX_SOAK_SECONDS may
# make it long).
@pytest.mark.timeout(300 + SHORT_SECONDS)
def test_soak_short(clients, pg):
    _soak(clients, pg, SHORT_SECONDS)


@pytest.mark.slow
def test_soak_long(clients, pg):
    _soak(clients, pg, LONG_SECONDS)
