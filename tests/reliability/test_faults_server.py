"""Faults the server makes: backends terminated and server restarts (fast and immediate)
with load in flight on both paths, FATAL while idle, FATALs back to back, and the idle
session and idle-in-transaction timeouts firing."""

from __future__ import annotations

import collections
import time

import gevent
import gevent.event
import gevent.monkey
import pytest
from support.mux import PATIENCE, drivers, join_all, unique_name, wait_until

from pgmux.client import Client
from pgmux.errors import (
    DatabaseError,
    IndeterminateResultError,
    InterfaceError,
    NotDispatchedError,
    OperationalError,
)
from pgmux.tooling.embedded import EmbeddedPostgres, find_postgres_bin


@pytest.fixture(scope="module")
def private_pg():
    """A server of our own to restart (the shared `pg` fixture is left alone)."""
    try:
        bin_dir, _ = find_postgres_bin()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    # synchronous_commit on: a COMMIT that returned survives an immediate shutdown
    server = EmbeddedPostgres(bin_dir=bin_dir, settings={"synchronous_commit": "on"})
    server.start()
    yield server
    server.stop()


def live(db: Client) -> int:
    return db.stats()["pipeline"]["live"]


def in_background(function, *args):
    """Run a blocking call (pg_ctl) without stopping the hub: in a greenlet when subprocess
    is monkey-patched (locust patches everything when the whole suite is collected), else
    in a real thread."""
    if gevent.monkey.is_module_patched("subprocess"):
        return gevent.spawn(function, *args)
    return gevent.get_hub().threadpool.spawn(function, *args)


class Load:
    """Greenlets hammering both paths until stopped; every outcome recorded and checked."""

    # What a caller may see while the server goes away: its result, or the failure model.
    MUX_FAILURES = (IndeterminateResultError, NotDispatchedError)
    # A pinned caller also sees connect errors while nothing listens, or the server's own
    # refusal while it shuts down or starts (SQLSTATE class 57: operator intervention).
    PINNED_FAILURES = (OperationalError,)

    def __init__(self, db: Client, table: str, mux_workers: int = 16, pinned_workers: int = 2):
        self.db = db
        self.table = table
        self.stop = gevent.event.Event()
        self.mux: collections.Counter = collections.Counter()
        self.pinned: collections.Counter = collections.Counter()
        self.committed: list[int] = []
        # keys whose COMMIT had an indeterminate outcome; a connection lost before COMMIT
        # rolls the transaction back, whatever error class the caller saw
        self.in_doubt: list[int] = []
        self.samples: dict[tuple[str, str], str] = {}  # (stage, error kind) -> a message
        self.unexpected: list[BaseException] = []
        self.jobs = [gevent.spawn(self._mux_worker, n) for n in range(mux_workers)]
        self.jobs += [gevent.spawn(self._pinned_worker, n) for n in range(pinned_workers)]

    def _mux_worker(self, n: int) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            value = n * 1_000_000 + i
            sql = "SELECT $1::int FROM pg_sleep(0.02)" if i % 4 == 0 else "SELECT $1::int"
            try:
                got = self.db.fetchval(sql, [value])
            except self.MUX_FAILURES as exc:
                self.mux[type(exc).__name__] += 1
                gevent.sleep(0.01)
                continue
            except BaseException as exc:
                self.unexpected.append(exc)
                return
            if got != value:
                self.unexpected.append(AssertionError(f"{got} != {value}"))
                return
            self.mux["ok"] += 1

    def _pinned_worker(self, n: int) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            key = n * 1_000_000 + i
            stage = "begin"
            try:
                with self.db.transaction() as tx:
                    stage = "insert"
                    tx.execute(f"INSERT INTO {self.table} VALUES ($1)", [key])
                    stage = "sleep"
                    tx.fetchval("SELECT pg_sleep(0.02)")
                    stage = "commit"
            except self.PINNED_FAILURES as exc:
                kind = _pinned_kind(exc)
                self.pinned[kind] += 1
                self.samples.setdefault((stage, kind), str(exc))
                if isinstance(exc, IndeterminateResultError) and stage == "commit":
                    self.in_doubt.append(key)
                gevent.sleep(0.02)
                continue
            except BaseException as exc:
                self.unexpected.append(exc)
                return
            self.committed.append(key)
            self.pinned["ok"] += 1

    def finish(self) -> None:
        self.stop.set()
        join_all(self.jobs, timeout=PATIENCE)
        assert not self.unexpected, self.unexpected[:3]


def _outcome(call, *args):
    """What ``call`` returned, or the exception it raised (kept off gevent's error print)."""
    try:
        return call(*args)
    except Exception as exc:
        return exc


def _pinned_kind(exc: BaseException) -> str:
    if isinstance(exc, DatabaseError) and exc.fields:  # a server ErrorResponse
        assert exc.sqlstate.startswith("57"), exc  # admin shutdown, cannot connect now ...
        return f"DatabaseError {exc.sqlstate}"
    return type(exc).__name__


def _recovered(db: Client) -> bool:
    stats = db.stats()
    return stats["pipeline"]["live"] == stats["pipeline"]["size"]


def _check_clean(db: Client) -> None:
    stats = db.stats()
    assert all(d["load"] == 0 for d in stats["pipeline"]["drivers"]), stats
    assert stats["pinned"]["active"] == 0 and stats["pinned"]["waiting"] == 0, stats
    assert db._pipeline.queued == 0 and db._pipeline.reserved == 0


def _check_durable(db: Client, table: str, load: Load) -> None:
    """Every COMMIT that returned is stored; anything else stored had its COMMIT in doubt."""
    stored = {row[0] for row in db.query(f"SELECT k FROM {table}")}
    assert set(load.committed) <= stored, "a transaction that returned was lost"
    assert stored - set(load.committed) <= set(load.in_doubt), "a failed transaction stuck"
    print("pinned errors seen:", load.samples)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_server_restart_with_load_in_flight_on_both_paths(private_pg, mode):
    table = unique_name("mux_restart")
    private_pg.psql(f"CREATE TABLE {table} (k int PRIMARY KEY)")
    db = Client(private_pg.dsn(), pipeline_size=2, pinned_size=2, connect_timeout=5,
                acquire_timeout=PATIENCE)
    try:
        db.start()
        old_pids = {d.conn.pid for d in drivers(db)}
        load = Load(db, table)
        wait_until(lambda: load.mux["ok"] > 200 and load.pinned["ok"] > 5, what="warm load")
        # One query that is certainly running when the server goes away.
        sleeper = gevent.spawn(_outcome, db.fetchval, "SELECT 1 FROM pg_sleep(30)")
        wait_until(lambda: private_pg.psql(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
            "AND query = 'SELECT 1 FROM pg_sleep(30)'").strip() == "1",
            what="the long query running on the server")
        before = dict(load.mux)
        restart = in_background(private_pg.restart, mode)
        restart.get(timeout=60)
        restarted = time.monotonic()
        wait_until(lambda: _recovered(db), what="both pipeline connections back")
        wait_until(lambda: load.mux["ok"] > before["ok"] + 200 and load.pinned["ok"] > 0,
                   what="load flowing again")
        recovery = time.monotonic() - restarted
        load.finish()
        print(f"\nrestart -m {mode}: multiplexed {dict(load.mux)}, pinned {dict(load.pinned)}, "
              f"recovered {recovery:.2f}s after pg_ctl returned")

        sleeper.join(timeout=PATIENCE)
        assert isinstance(sleeper.value, IndeterminateResultError), sleeper.value
        assert not {d.conn.pid for d in drivers(db)} & old_pids
        assert db.stats()["reconnects"] >= 2
        _check_clean(db)
        _check_durable(db, table, load)
    finally:
        db.close(timeout=1)


def test_terminating_backends_with_load_in_flight_on_both_paths(pg, clients):
    table = unique_name("mux_term")
    pg.admin(f"CREATE TABLE {table} (k int PRIMARY KEY)")
    db = clients(pipeline_size=2, pinned_size=2, acquire_timeout=PATIENCE)
    load = Load(db, table)
    wait_until(lambda: load.mux["ok"] > 200 and load.pinned["ok"] > 5, what="warm load")
    total_terminated = 0
    for _ in range(3):
        reconnects = db.stats()["reconnects"]
        total_terminated += clients.terminate_backends(db)
        wait_until(lambda r=reconnects: db.stats()["reconnects"] >= r + 2 and _recovered(db),
                   what="the pipeline connections replaced")
        gevent.sleep(0.1)
    ok = load.mux["ok"]
    wait_until(lambda: load.mux["ok"] > ok + 100, what="load flowing again")
    load.finish()
    print(f"\nterminated {total_terminated}: multiplexed {dict(load.mux)}, "
          f"pinned {dict(load.pinned)}")
    assert total_terminated >= 6
    assert load.mux["IndeterminateResultError"] >= 1
    _check_clean(db)
    _check_durable(db, table, load)


def test_fatal_while_idle_is_noticed_before_the_next_caller(pg, clients):
    db = clients(pipeline_size=2, pinned_size=1, probe_interval=0)
    with db.session() as session:
        assert session.fetchval("SELECT 1") == 1
    old = set(drivers(db))
    assert clients.terminate_backends(db) == 3
    # Nobody called: the readers saw the FATAL themselves and the supervisor reconnected.
    wait_until(lambda: _recovered(db) and not set(drivers(db)) & old, timeout=5,
               what="idle pipeline connections replaced")
    failures = [str(d.failure) for d in old]
    assert all("57P01" in text or "closed" in text for text in failures), failures
    assert db.fetchval("SELECT 2") == 2
    # The idle pinned connection is found dead when lent, and silently replaced.
    with db.session() as session:
        assert session.fetchval("SELECT 3") == 3
    assert db.stats()["pinned"]["active"] == 0


def test_two_fatals_back_to_back(pg, clients):
    db = clients(pipeline_size=2)
    assert db.fetchval("SELECT 1") == 1
    first = set(drivers(db))
    assert clients.terminate_backends(db) == 2
    wait_until(lambda: _recovered(db) and not set(drivers(db)) & first, timeout=5)
    second = set(drivers(db))
    # Again at once, before the replacements ever served a query.
    assert clients.terminate_backends(db) == 2
    wait_until(lambda: _recovered(db) and not set(drivers(db)) & (first | second), timeout=5)
    jobs = [gevent.spawn(db.fetchval, "SELECT $1::int", [i]) for i in range(100)]
    join_all(jobs)
    assert [job.value for job in jobs] == list(range(100))
    assert db.stats()["reconnects"] == 4


def test_idle_session_timeout_firing_on_pipeline_connections(clients):
    db = clients(pipeline_size=2, probe_interval=0, options="-c idle_session_timeout=300")
    assert db.fetchval("SELECT 1") == 1
    first = set(drivers(db))
    wait_until(lambda: all(not d.alive for d in first), timeout=5,
               what="the server to end the idle sessions")
    assert all("57P05" in str(d.failure) for d in first), [d.failure for d in first]
    wait_until(lambda: _recovered(db), timeout=5)
    jobs = [gevent.spawn(db.fetchval, "SELECT $1::int", [i]) for i in range(50)]
    join_all(jobs)
    assert [job.value for job in jobs] == list(range(50))


def test_idle_in_transaction_timeout_firing_on_a_pinned_connection(pg, clients):
    table = unique_name("mux_iit")
    pg.admin(f"CREATE TABLE {table} (k int)")
    db = clients(pipeline_size=1, pinned_size=1,
                 options="-c idle_in_transaction_session_timeout=200")
    with pytest.raises(OperationalError) as caught, db.transaction() as tx:
        tx.execute(f"INSERT INTO {table} VALUES (1)")
        gevent.sleep(0.6)  # idle in the transaction: the server ends the session
        tx.execute(f"INSERT INTO {table} VALUES (2)")
    assert "25P03" in str(caught.value) or "idle" in str(caught.value), caught.value
    assert db.fetchval(f"SELECT count(*) FROM {table}") == 0, "nothing may be committed"
    stats = db.stats()["pinned"]
    assert (stats["active"], stats["waiting"]) == (0, 0)
    with db.transaction() as tx:  # the pool handed out a fresh connection
        tx.execute(f"INSERT INTO {table} VALUES (3)")
    assert db.fetchval(f"SELECT count(*) FROM {table}") == 1
    assert not isinstance(caught.value, InterfaceError)
