"""The example app's endpoints written against psycopg2: runs on the real psycopg2 + psycogreen,
and unchanged on pgmux's drop-in (``pgmux.psycopg2.register()`` in gunicorn's config).

    PGMUX_DSN=postgresql://user:pw@localhost/db \
        gunicorn -c examples/gunicorn_psycopg2.conf.py                       # psycopg2
    PSYCOPG2_DRIVER=pgmux PGMUX_DSN=postgresql://user:pw@localhost/db \
        gunicorn -c examples/gunicorn_psycopg2.conf.py                       # pgmux.psycopg2

The same endpoints and responses as wsgi_app.py (/db, /queries?n=20, /updates?n=20,
/health), served from a per-process pool of PSYCOPG2_POOL_SIZE psycopg2 connections
(default 6) in autocommit mode, lent first come, first served; their application_name is
PSYCOPG2_APP_NAME (default psycopg2-example) and the worker's pid. A psycopg2 connection runs
one query at a time, so /queries runs its n lookups one after another on one connection;
/updates does the same, then sends its n UPDATEs as one multi-statement string (one round
trip, one implicit transaction: psycopg2's best form of batched writes). It expects the
`world` table: wsgi_app.py seeds it, and so does `pgmux bench`.

Nothing here knows which psycopg2 it runs on. On the real one, each pooled connection is a
server connection; psycogreen's wait callback (installed below) lets a query wait in the
gevent hub. On pgmux's drop-in each is a cheap handle on the worker's one multiplexed
client, and psycogreen's patch is accepted and changes nothing.
"""

from __future__ import annotations

import os
import random
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg2
from gevent.hub import Waiter, get_hub
from gevent.lock import Semaphore
from psycogreen.gevent import patch_psycopg
from wsgi_app import (
    WORLD_ROWS,
    dsn_from_env,
    make_application,
    query_count,
    random_id,
    row_dict,
)

POOL_SIZE = int(os.environ.get("PSYCOPG2_POOL_SIZE", "6"))
APP_NAME = os.environ.get("PSYCOPG2_APP_NAME", "psycopg2-example")  # and the worker's pid
WORLD_SQL = "SELECT id, randomnumber FROM world WHERE id = %s"
UPDATE_SQL = "UPDATE world SET randomnumber = %s WHERE id = %s"

patch_psycopg()  # queries wait in the gevent hub (idempotent)


class Pool:
    """``size`` psycopg2 connections in autocommit, each with its cursor, lent first come,
    first served: a request that waits is never overtaken by one that came later."""

    def __init__(self, dsn: str | None, size: int, **params: Any):
        self.conns: list[Any] = []
        self.free: deque[Any] = deque()
        self.waiters: deque[Waiter] = deque()
        try:
            for _ in range(size):
                conn = psycopg2.connect(dsn or "", **params)
                self.conns.append(conn)
                conn.autocommit = True
                self.free.append(conn.cursor())
        except BaseException:
            self.close()
            raise

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        if self.free and not self.waiters:
            cursor = self.free.popleft()
        else:
            waiter = Waiter()
            self.waiters.append(waiter)
            try:
                cursor = waiter.get()
            except BaseException:  # killed while waiting: leave the queue
                if waiter in self.waiters:
                    self.waiters.remove(waiter)
                raise
        try:
            yield cursor
        finally:
            if self.waiters:
                get_hub().loop.run_callback(self.waiters.popleft().switch, cursor)
            else:
                self.free.append(cursor)

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.close()
            except psycopg2.Error:
                pass


_pool: Pool | None = None
_pool_lock = Semaphore()


def get_client() -> Pool:
    """This process's pool, its connections opened on first use (after gunicorn's fork)."""
    global _pool
    if _pool is not None:
        return _pool
    with _pool_lock:
        if _pool is None:
            _pool = Pool(dsn_from_env(), POOL_SIZE,
                         application_name=f"{APP_NAME}-{os.getpid()}")
    return _pool


def close_client() -> None:
    """Close this process's pool, if any (gunicorn's worker_exit hook calls this)."""
    global _pool
    pool, _pool = _pool, None
    if pool is not None:
        pool.close()


def lookups(cursor: Any, ids: list[int]) -> list[dict[str, int]]:
    """One query per id, one after another on ``cursor``."""
    out = []
    for world_id in ids:
        cursor.execute(WORLD_SQL, (world_id,))
        out.append(row_dict(cursor.fetchone()))
    return out


def single_query(environ: dict) -> Any:
    with get_client().cursor() as cursor:
        return lookups(cursor, [random_id()])[0]


def multiple_queries(environ: dict) -> Any:
    with get_client().cursor() as cursor:
        return lookups(cursor, [random_id() for _ in range(query_count(environ))])


def updates(environ: dict) -> Any:
    """n lookups one after another (as /queries), then the n UPDATEs as one multi-statement
    string: one round trip, one implicit transaction (what psycopg2.extras.execute_batch
    does; psycopg2 interpolates the values client-side)."""
    ids = sorted(random.sample(range(1, WORLD_ROWS + 1), query_count(environ)))  # lock order
    with get_client().cursor() as cursor:
        worlds = lookups(cursor, ids)
        params: list[int] = []
        for world in worlds:
            world["randomNumber"] = random_id()
            params += [world["randomNumber"], world["id"]]
        cursor.execute(";".join([UPDATE_SQL] * len(worlds)), params)
    return worlds


def health(environ: dict) -> Any:
    with get_client().cursor() as cursor:
        cursor.execute("SELECT 1")
        return {"status": "ok", "database": cursor.fetchone()[0] == 1}


ROUTES = {"/db": single_query, "/queries": multiple_queries, "/updates": updates,
          "/health": health}
application = make_application(ROUTES, psycopg2.Error)  # the WSGI entry point
