"""The example app's endpoints on psycopg2 + psycogreen: the peer of wsgi_app.py in `pgmux bench`.

    PGMUX_DSN=postgresql://user:pw@localhost/db \
        gunicorn -c examples/gunicorn.conf.py wsgi_app_psycopg2:application

The same endpoints and responses as wsgi_app.py (/db, /queries?n=20, /updates?n=20,
/health), served from a per-process pool of PSYCOPG2_POOL_SIZE psycopg2 connections
(default 6: the server connections of wsgi_app's Client, 2 pipelined + 4 pinned) in
autocommit mode, handed out first come, first served (the bench's own psycopg2 pool).
A psycopg2 connection runs one query at a time, so /queries runs its n lookups one after
another on one connection; /updates does the same, then sends its n UPDATEs as one
multi-statement string (one round trip, one implicit transaction: psycopg2's best form of
batched writes, as wsgi_app.py's atomic unit is pgmux's). It expects the `world` table:
wsgi_app.py seeds it, and so does `pgmux bench`.
"""

from __future__ import annotations

import os
import random
from typing import Any

import psycopg2
from gevent.lock import Semaphore
from wsgi_app import (
    WORLD_ROWS,
    dsn_from_env,
    make_application,
    query_count,
    random_id,
    row_dict,
)

from pgmux.tooling.bench.clients import Psycopg2

POOL_SIZE = int(os.environ.get("PSYCOPG2_POOL_SIZE", "6"))
APP_NAME = "psycopg2-example"
WORLD_SQL = "SELECT id, randomnumber FROM world WHERE id = %s"
UPDATE_SQL = "UPDATE world SET randomnumber = %s WHERE id = %s"

_pool: Psycopg2 | None = None
_pool_lock = Semaphore()


def get_client() -> Psycopg2:
    """This process's pool, its connections opened on first use (after gunicorn's fork)."""
    global _pool
    if _pool is not None:
        return _pool
    with _pool_lock:
        if _pool is None:
            pool = Psycopg2(dsn_from_env(), POOL_SIZE,
                            {"application_name": f"{APP_NAME}-{os.getpid()}"})
            try:
                pool.start()
            except BaseException:
                pool.close()
                raise
            _pool = pool
    return _pool


def close_client() -> None:
    """Close this process's pool, if any (gunicorn's worker_exit hook calls this)."""
    global _pool
    pool, _pool = _pool, None
    if pool is not None:
        pool.close()


def single_query(environ: dict) -> Any:
    return row_dict(get_client().fetchone(WORLD_SQL, (random_id(),)))


def multiple_queries(environ: dict) -> Any:
    steps = [(WORLD_SQL, (random_id(),)) for _ in range(query_count(environ))]
    return [row_dict(rows[0]) for rows in get_client().run_steps(steps)]


def updates(environ: dict) -> Any:
    """n lookups one after another (as /queries), then the n UPDATEs as one multi-statement
    string: one round trip, one implicit transaction (what psycopg2.extras.execute_batch
    does; psycopg2 interpolates the values client-side)."""
    ids = sorted(random.sample(range(1, WORLD_ROWS + 1), query_count(environ)))  # lock order
    pool = get_client()
    worlds = [row_dict(rows[0]) for rows in pool.run_steps([(WORLD_SQL, (i,)) for i in ids])]
    params: list[int] = []
    for world in worlds:
        world["randomNumber"] = random_id()
        params += [world["randomNumber"], world["id"]]
    pool.run_steps([(";".join([UPDATE_SQL] * len(worlds)), params)])
    return worlds


def health(environ: dict) -> Any:
    return {"status": "ok", "database": get_client().fetchval("SELECT 1", ()) == 1}


ROUTES = {"/db": single_query, "/queries": multiple_queries, "/updates": updates,
          "/health": health}
application = make_application(ROUTES, psycopg2.Error)  # the WSGI entry point
