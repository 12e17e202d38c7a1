"""Helpers for the multiplexed-path tests: client factories, bounded waits, backend lookups."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import gevent

from pgmux.client import Client
from pgmux.io.pipeline import PipelineDriver

PATIENCE = 15.0  # seconds: a generous bound for what must happen (a loaded 2-core machine)


def wait_until(predicate: Callable[[], Any], *, timeout: float = PATIENCE,
               interval: float = 0.002, what: str = "") -> Any:
    """Poll ``predicate`` (yielding to the hub) until it is truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout}s waiting for {what or predicate}")
        gevent.sleep(interval)


# A read the server takes seconds over, which never pins (generate_series is immutable).
SLOW_READ = "SELECT count(*) FROM generate_series(1, 30000000)"


def wait_for_slow_read(pg: Any) -> None:
    """Until SLOW_READ runs on the server (``pg``: the suite's server, its ``admin``)."""
    wait_until(lambda: str(pg.admin(
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%generate_series(1, 3000%' "
        "AND pid <> pg_backend_pid()")) == "1", what="the read running on the server")


def join_all(jobs: Iterable[gevent.Greenlet], timeout: float = PATIENCE) -> None:
    """Wait for every greenlet; fail (and kill the stragglers) after ``timeout``."""
    jobs = list(jobs)
    gevent.joinall(jobs, timeout=timeout)
    stuck = [job for job in jobs if not job.ready()]
    if stuck:
        gevent.killall(stuck, block=False)
        raise AssertionError(f"{len(stuck)} of {len(jobs)} greenlets still running after {timeout}s")


@contextmanager
def sampled(measure: Callable[[], Any], interval: float = 0.0) -> Iterator[list[Any]]:
    """``measure()`` taken every ``interval`` seconds (yielding to the hub in between) in a
    greenlet of its own while the block runs: the list of what it returned."""
    values: list[Any] = []
    done = gevent.event.Event()

    def sample() -> None:
        while not done.is_set():
            values.append(measure())
            gevent.sleep(interval)

    job = gevent.spawn(sample)
    try:
        yield values
    finally:
        done.set()
        join_all([job])


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """("ok", value) or ("error", exception): lets a greenlet report instead of raising."""
    try:
        return "ok", call()
    except Exception as exc:  # the tests assert on the exception's type
        return "error", exc


def drivers(db: Client) -> list[PipelineDriver]:
    """The client's current pipeline drivers, in slot order (white box)."""
    pool = db._pipeline
    return [] if pool is None else [d for d in pool._slots if d is not None]


def warm(db: Client, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> None:
    """Run ``sql`` once on every pipelined connection of ``db``, so that it is described and
    prepared everywhere: a later call of it is one unit, the statement itself."""
    jobs = [gevent.spawn(db.fetchval, sql, params) for _ in drivers(db)]
    join_all(jobs)
    for job in jobs:
        job.get()
    key = (sql, db.types.encode_params(params)[0])
    assert all(d.engine.statements.get(key) is not None for d in drivers(db)), "not everywhere"


def spawn_described(db: Client, sql: str, seconds: float) -> gevent.Greenlet:
    """Run ``sql`` (one float parameter, as pg_sleep's) in a greenlet of its own, described
    beforehand: what it puts in flight is then the statement itself, not a Describe whose
    quick reply would free its slot."""
    warm(db, sql, [0.0])
    return gevent.spawn(db.fetchval, sql, [float(seconds)])


def driver_stats(db: Client) -> list[dict[str, Any]]:
    return db.stats()["pipeline"]["drivers"]


def total(db: Client, key: str) -> int:
    """A counter summed over the live drivers (from ``stats()``)."""
    return sum(driver[key] for driver in driver_stats(db))


class Clients:
    """Makes clients against one test server, each with its own application_name, and closes
    them all at teardown."""

    def __init__(self, server: Any):
        self.server = server
        self.made: list[Client] = []
        self._admin: Client | None = None

    def __call__(self, *, start: bool = True, **options: Any) -> Client:
        options.setdefault("application_name", f"mux-test-{uuid.uuid4().hex[:10]}")
        options.setdefault("connect_timeout", PATIENCE)
        self.server.need_tls(options.get("sslmode"))
        db = Client(self.server.dsn, **options)
        self.made.append(db)
        if start:
            db.start()
        return db

    @property
    def admin(self) -> Client:
        """A separate superuser client (guard off, one connection) for looking at the server."""
        if self._admin is None:
            self._admin = self(pipeline_size=1, guard="off", application_name="mux-test-admin")
        return self._admin

    def backend_pids(self, db: Client) -> set[int]:
        """The server pids of ``db``'s connections, by its application_name."""
        rows = self.admin.query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
            [db.conninfo.application_name])
        return {row[0] for row in rows}

    def terminate_backends(self, db: Client) -> int:
        """pg_terminate_backend on every connection of ``db``; the number terminated."""
        return self.admin.fetchval(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = $1", [db.conninfo.application_name])

    def close_all(self) -> None:
        for db in reversed(self.made):
            try:
                db.close(timeout=1.0)
            except Exception:
                pass

    def __enter__(self) -> Clients:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close_all()


def unique_name(prefix: str = "mux") -> str:
    """A table or function name no other test uses."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"
