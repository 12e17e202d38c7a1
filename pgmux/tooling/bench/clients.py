"""The clients under test, behind one small adapter interface.

Every adapter opens ``connections`` server connections and offers ``fetchval``,
``fetchone`` and ``fetchall`` taking SQL already translated by ``native``, plus
``transaction`` (statements between BEGIN and COMMIT) and ``stream`` (a large
result read in batches, rows dropped as they come). The peers (psycopg2 +
psycogreen, psycopg 3 under gevent) use a naive gevent pool: a greenlet takes a
connection, runs one query (or one transaction), puts it back. The pool is FIFO: a
returned connection goes to the longest waiter. (A bare ``gevent.queue.Queue``
lets the returning greenlet take its connection straight back, so a few
greenlets run while the rest starve, and the latencies of the starving never
complete and are never recorded.)

``pgmux-pinned`` follows the pinned-path API literally, one ``db.session()``
per query, so each query also pays the session reset (DISCARD ALL) on release.
``pgmux-inflight1`` is pgmux's multiplexed path with ``max_in_flight=1``: the
same code as ``pgmux`` with one query per round trip per connection. For the
workloads that need exclusive connections (``pinned``: transactions, streams)
``pgmux`` opens ``connections`` pinned connections and no pipeline.
"""

from __future__ import annotations

import importlib.util
import operator
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import gevent

Params = Sequence[Any]
Steps = Sequence[tuple[str, Params]]
_DOLLAR = re.compile(r"\$\d+")
STREAM_CURSOR = "pgmux_bench_stream"


class Adapter:
    """One client under test; subclasses fill in ``open`` and the three fetch methods."""

    name = ""
    environment: dict[str, str] = {}  # set in its worker process (an implementation choice)
    runs_as: str | None = None  # the name its worker knows it by (another checkout's)
    in_all = True  # part of --clients all
    description = ""
    modules: tuple[str, ...] = ()  # import names needed (for the "extra" peers)
    monkey_patch = False  # run the worker under gevent.monkey.patch_all()
    multiplexed = False  # reports pgmux fill statistics
    workloads: tuple[str, ...] | None = None  # the only workloads it runs (None: any)
    case_runner: Any = None  # a runner.Case subclass measuring it (an external program)
    install = "pip install 'pgmux[bench]'"  # what provides what ``missing`` lists

    def __init__(self, dsn: str | None, connections: int, params: dict[str, Any],
                 pinned: bool = False):
        self.dsn = dsn
        self.connections = connections
        self.params = params  # host, port, application_name overrides
        self.pinned = pinned  # the workload needs exclusive connections

    @classmethod
    def missing(cls) -> list[str]:
        """Import names of the modules this client needs that are not installed."""
        return [m for m in cls.modules if importlib.util.find_spec(m) is None]

    @classmethod
    def worker_environment(cls) -> dict[str, str]:
        """The environment its worker process runs with, over this one's."""
        return dict(cls.environment)

    @classmethod
    def worker_directory(cls) -> str | None:
        """The working directory of its worker process (None: this one's)."""
        return None

    def native(self, sql: str) -> str:
        return sql

    def start(self) -> None:
        """Open the connections (those that open lazily open during warm-up)."""

    def fill(self) -> dict[str, float] | None:
        """Cumulative pgmux pipeline counters (units, readables, flush_calls), if any."""
        return None

    def close(self) -> None:
        raise NotImplementedError

    def fetchval(self, sql: str, params: Params) -> Any:
        raise NotImplementedError

    def fetchone(self, sql: str, params: Params) -> Any:
        raise NotImplementedError

    def fetchall(self, sql: str, params: Params) -> Any:
        raise NotImplementedError

    def transaction(self, steps: Steps) -> list[Any]:
        """Run ``(sql, params)`` steps in one transaction; each step's rows or row count."""
        raise NotImplementedError

    def stream(self, sql: str, params: Params, batch: int) -> None:
        """Read every row of ``sql``, ``batch`` rows per round trip, keeping none."""
        raise NotImplementedError


def pipeline_fill(db: Any) -> dict[str, float]:
    """A pgmux client's cumulative pipeline counters (units, readables, flush_calls)."""
    drivers = db.stats()["pipeline"]["drivers"]
    return {
        "units": sum(d["units"] for d in drivers),
        "readables": sum(d["readables"] for d in drivers),
        "flush_calls": sum(d["flush_calls_per_unit"] * d["units"] for d in drivers),
    }


def consume(rows: Iterable[Any]) -> None:
    """Exhaust ``rows`` at C speed, keeping nothing (the same for every client)."""
    deque(rows, maxlen=0)


class PgmuxMultiplexed(Adapter):
    name = "pgmux"
    description = "pgmux multiplexed (pipelined) connections"
    multiplexed = True
    max_in_flight = 64

    def __init__(self, dsn: str | None, connections: int, params: dict[str, Any],
                 pinned: bool = False):
        super().__init__(dsn, connections, params, pinned)
        import pgmux.client

        self.db = pgmux.client.Client(
            dsn, pipeline_size=0 if pinned else connections,
            pinned_size=connections if pinned else 0, max_in_flight=self.max_in_flight,
            acquire_timeout=120.0, **params)
        self.fetchval = self.db.fetchval  # type: ignore[method-assign]
        self.fetchone = self.db.fetchone  # type: ignore[method-assign]
        self.fetchall = self.db.query  # type: ignore[method-assign]

    def start(self) -> None:
        if not self.pinned:
            self.db.start()
            return
        # pinned connections open lazily: borrow them all at once to open them now
        holders = [gevent.spawn(self._hold, i) for i in range(self.connections)]
        gevent.joinall(holders, raise_error=True)

    def _hold(self, index: int) -> None:
        with self.db.session():
            gevent.sleep(0)  # let the other holders take the other connections

    def transaction(self, steps: Steps) -> list[Any]:
        with self.db.transaction() as tx:
            return [tx.query(sql, params) for sql, params in steps]

    def stream(self, sql: str, params: Params, batch: int) -> None:
        with self.db.session() as session:
            consume(session.stream(sql, params, batch=batch))

    def fill(self) -> dict[str, float] | None:
        return None if self.pinned else pipeline_fill(self.db)

    def close(self) -> None:
        self.db.close(timeout=2.0)


class PgmuxPurePython(PgmuxMultiplexed):
    name = "pgmux-python"
    description = "pgmux multiplexed, pure-Python implementation (PGMUX_PURE_PYTHON=1)"
    environment = {"PGMUX_PURE_PYTHON": "1"}
    in_all = False


class PgmuxBefore(PgmuxMultiplexed):
    name = "pgmux-before"
    description = ("pgmux multiplexed, the checkout in $PGMUX_BENCH_BEFORE (e.g. the commit "
                   "before a change: before and after side by side in one run)")
    runs_as = "pgmux"
    in_all = False

    @classmethod
    def missing(cls) -> list[str]:
        before = os.environ.get(BEFORE_ENV, "")
        return [] if before and os.path.isdir(os.path.join(before, "pgmux")) else [
            f"${BEFORE_ENV} (a checkout to compare with)"]

    @classmethod
    def worker_environment(cls) -> dict[str, str]:
        return {"PYTHONPATH": os.environ[BEFORE_ENV]}

    @classmethod
    def worker_directory(cls) -> str | None:
        return os.environ[BEFORE_ENV]  # python -c puts it first on sys.path, before PYTHONPATH


class PgmuxInflightOne(PgmuxMultiplexed):
    name = "pgmux-inflight1"
    description = "pgmux multiplexed path with max_in_flight=1 (one query per round trip)"
    max_in_flight = 1


class PgmuxPinned(Adapter):
    name = "pgmux-pinned"
    description = "pgmux pinned connections, one db.session() per query (naive pool)"

    def __init__(self, dsn: str | None, connections: int, params: dict[str, Any],
                 pinned: bool = False):
        super().__init__(dsn, connections, params, pinned)
        import pgmux.client

        self.db = pgmux.client.Client(
            dsn, pipeline_size=0, pinned_size=connections, acquire_timeout=120.0, **params)

    def fetchval(self, sql: str, params: Params) -> Any:
        with self.db.session() as session:
            return session.fetchval(sql, params)

    def fetchone(self, sql: str, params: Params) -> Any:
        with self.db.session() as session:
            return session.fetchone(sql, params)

    def fetchall(self, sql: str, params: Params) -> Any:
        with self.db.session() as session:
            return session.query(sql, params).rows

    def close(self) -> None:
        self.db.close()


class FifoPool:
    """Items handed out first come, first served (what a gevent-queue pool should do)."""

    def __init__(self) -> None:
        from gevent.hub import get_hub

        self.free: deque[Any] = deque()
        self.waiters: deque[Any] = deque()
        self._loop = get_hub().loop

    def get(self) -> Any:
        if self.free and not self.waiters:
            return self.free.popleft()
        from gevent.hub import Waiter

        waiter = Waiter()
        self.waiters.append(waiter)
        try:
            return waiter.get()
        except BaseException:  # killed while queued (the end of a case): leave the queue
            if waiter in self.waiters:
                self.waiters.remove(waiter)
            raise

    def put(self, item: Any) -> None:
        if self.waiters:
            self._loop.run_callback(self.waiters.popleft().switch, item)
        else:
            self.free.append(item)


class QueuePool(Adapter):
    """A naive FIFO pool of DB-API connections, one cursor kept per connection."""

    def __init__(self, dsn: str | None, connections: int, params: dict[str, Any],
                 pinned: bool = False):
        super().__init__(dsn, connections, params, pinned)
        self.pool = FifoPool()
        self.conns: list[Any] = []

    def connect(self) -> Any:
        raise NotImplementedError

    def native(self, sql: str) -> str:
        return _DOLLAR.sub("%s", sql)

    def start(self) -> None:
        jobs = [gevent.spawn(self.connect) for _ in range(self.connections)]
        gevent.joinall(jobs, raise_error=True)
        for job in jobs:
            conn = job.value
            self.conns.append(conn)
            self.pool.put((conn, conn.cursor()))

    def _run(self, sql: str, params: Params, fetch: Callable[[Any], Any]) -> Any:
        """Check a connection out, execute, ``fetch`` from its cursor, check it back in."""
        pool = self.pool
        item = pool.get()
        try:
            cursor = item[1]
            cursor.execute(sql, params)
            return fetch(cursor)
        finally:
            pool.put(item)

    def fetchval(self, sql: str, params: Params) -> Any:
        row = self._run(sql, params, _fetchone)
        return row[0] if row else None

    def fetchone(self, sql: str, params: Params) -> Any:
        return self._run(sql, params, _fetchone)

    def fetchall(self, sql: str, params: Params) -> Any:
        return self._run(sql, params, _fetchall)

    def run_steps(self, steps: Steps, transaction: bool = False) -> list[Any]:
        """Run ``steps`` one after another on one connection, between BEGIN and COMMIT
        if ``transaction`` (ROLLBACK on any exception); each step's rows or row count."""
        pool = self.pool
        item = pool.get()
        cursor = item[1]
        try:
            if transaction:
                cursor.execute("BEGIN")
            out = [_rows_or_count(cursor, sql, params) for sql, params in steps]
            if transaction:
                cursor.execute("COMMIT")
            return out
        except BaseException:
            if transaction:
                _quietly(cursor.execute, "ROLLBACK")
            raise
        finally:
            pool.put(item)

    def transaction(self, steps: Steps) -> list[Any]:
        return self.run_steps(steps, transaction=True)

    def stream(self, sql: str, params: Params, batch: int) -> None:
        pool = self.pool
        item = pool.get()
        try:
            self.stream_on(item[0], sql, params, batch)
        finally:
            pool.put(item)

    def stream_on(self, conn: Any, sql: str, params: Params, batch: int) -> None:
        """``stream`` on a checked-out connection, through a server-side (named) cursor."""
        raise NotImplementedError

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.close()
            except Exception:
                pass


class Psycopg2(QueuePool):
    name = "psycopg2"
    description = "psycopg2 + psycogreen, gevent-queue pool"
    modules = ("psycopg2", "psycogreen")

    def connect(self) -> Any:
        import psycopg2
        from psycogreen.gevent import patch_psycopg

        patch_psycopg()  # idempotent: installs the gevent wait callback
        conn = psycopg2.connect(self.dsn or "", **self.params)
        conn.autocommit = True
        return conn

    def stream_on(self, conn: Any, sql: str, params: Params, batch: int) -> None:
        conn.autocommit = False  # a named cursor (DECLARE) needs a transaction
        try:
            with conn.cursor(name=STREAM_CURSOR) as cursor:
                cursor.itersize = batch
                cursor.execute(sql, params)
                consume(cursor)
            conn.commit()
        except BaseException:
            _quietly(conn.rollback)
            raise
        finally:  # a greenlet killed mid-stream leaves the connection closed: no new error
            _quietly(setattr, conn, "autocommit", True)


class Psycopg3(QueuePool):
    name = "psycopg3"
    description = "psycopg 3 under gevent (monkey-patched), gevent-queue pool"
    modules = ("psycopg",)
    monkey_patch = True

    def connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.dsn or "", autocommit=True, **self.params)

    def stream_on(self, conn: Any, sql: str, params: Params, batch: int) -> None:
        with conn.transaction(), conn.cursor(name=STREAM_CURSOR) as cursor:
            cursor.itersize = batch
            cursor.execute(sql, params)
            consume(cursor)


BEFORE_ENV = "PGMUX_BENCH_BEFORE"
CLIENTS: dict[str, type[Adapter]] = {c.name: c for c in (
    PgmuxMultiplexed, PgmuxPurePython, PgmuxBefore, PgmuxPinned, PgmuxInflightOne, Psycopg2,
    Psycopg3)}
NAIVE = ("pgmux-pinned", "pgmux-inflight1", "psycopg2", "psycopg3")  # no pipelining


def parse_clients(text: str) -> list[str]:
    """``"pgmux,psycopg2"`` or ``"all"`` -> client names, checked."""
    names = [n for n, c in CLIENTS.items() if c.in_all] if text.strip() == "all" else [
        name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in CLIENTS]
    if unknown or not names:
        raise ValueError(f"unknown client(s) {unknown}; choose from {', '.join(CLIENTS)}")
    return names


def _rows_or_count(cursor: Any, sql: str, params: Params) -> Any:
    cursor.execute(sql, params)
    return cursor.fetchall() if cursor.description is not None else cursor.rowcount


def _quietly(call: Callable[..., Any], *args: Any) -> None:
    """Best-effort cleanup: the exception already propagating is the one that matters."""
    try:
        call(*args)
    except Exception:
        pass


_fetchone = operator.methodcaller("fetchone")
_fetchall = operator.methodcaller("fetchall")
