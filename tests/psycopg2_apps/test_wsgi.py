"""examples/wsgi_app_psycopg2.py under gunicorn's gevent workers, on the real psycopg2 and,
unchanged, on pgmux's drop-in (chosen by PSYCOPG2_DRIVER in examples/gunicorn_psycopg2.conf.py):
every endpoint's answer checked against the database, and each worker's server connections
counted while requests run."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.gunicorn import http_get, running

from psycopg2_apps.kit import (
    DROP_IN,
    DROP_IN_BOUND,
    EXAMPLES,
    MODULE,
    ConnectionSampler,
    fresh_database,
    script_env,
)

pytest.importorskip("gunicorn")
pytest.importorskip("psycogreen")

CONFIG = os.path.join(EXAMPLES, "gunicorn_psycopg2.conf.py")
WORKERS = 2
POOL_SIZE = 6  # the app's default PSYCOPG2_POOL_SIZE
WORLD_ROWS = 10_000
APP_NAME = "psycopg2-example-"  # and the worker's pid
LOAD = ["/db"] * 64 + ["/queries?n=20"] * 48 + ["/updates?n=20"] * 24


def seed_world(server, dbname: str) -> None:
    server.admin("CREATE TABLE world (id integer PRIMARY KEY, randomnumber integer NOT NULL); "
                 "INSERT INTO world SELECT i, 1 + (i * 7919) % 10000 "
                 f"FROM generate_series(1, {WORLD_ROWS}) i", dbname=dbname)


def stored(server, dbname: str, ids: list[int]) -> dict[int, int]:
    out = server.admin("SELECT id, randomnumber FROM world WHERE id IN "
                       f"({', '.join(str(int(i)) for i in ids)})", dbname=dbname)
    return {int(k): int(v) for k, v in (line.split("|") for line in out.splitlines())}


def as_stored(rows: list[dict[str, int]]) -> dict[int, int]:
    return {row["id"]: row["randomNumber"] for row in rows}


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_psycopg2_app_under_gevent_workers(apps_pg, driver):
    dbname = f"wsgi_{driver}"
    dsn = fresh_database(apps_pg, dbname)
    seed_world(apps_pg, dbname)
    env = script_env(PGMUX_DSN=dsn, PSYCOPG2_DRIVER=driver)
    with running(CONFIG, env, workers=WORKERS) as gunicorn:
        base = gunicorn.base
        assert http_get(base + "/health") == (200, {"status": "ok", "database": True})
        status, row = http_get(base + "/db")
        assert status == 200 and stored(apps_pg, dbname, [row["id"]]) == as_stored([row])
        status, rows = http_get(base + "/queries?n=20")
        assert status == 200 and len(rows) == 20
        assert stored(apps_pg, dbname, [r["id"] for r in rows]) == as_stored(rows)
        status, updated = http_get(base + "/updates?n=20")
        ids = [w["id"] for w in updated]
        assert status == 200 and ids == sorted(set(ids)) and len(ids) == 20
        assert stored(apps_pg, dbname, ids) == as_stored(updated)  # committed
        assert status_of(base + "/nowhere") == 404

        with ConnectionSampler(apps_pg.dsn, APP_NAME) as sampler, \
                ThreadPoolExecutor(max_workers=48) as clients:
            statuses = list(clients.map(lambda path: status_of(base + path), LOAD))
        assert statuses == [200] * len(LOAD)
    output = gunicorn.output
    expected = MODULE[driver]
    assert output.count(f"psycopg2 is {expected}\n") == WORKERS, output
    for pid in gunicorn.workers:
        assert f"psycopg2: worker {pid} closed its connections" in output
    assert "Traceback" not in output, output

    peaks = {int(name.removeprefix(APP_NAME)): peak for name, peak in sampler.peaks.items()}
    print(f"{driver}: {len(LOAD)} requests, server connections per worker at most {peaks} "
          f"in {sampler.samples} samples")
    if driver == DROP_IN:  # a worker holds server connections once it has served
        assert peaks and peaks.keys() <= gunicorn.workers, peaks
        assert all(0 < peak <= DROP_IN_BOUND for peak in peaks.values()), (peaks,
                                                                            DROP_IN_BOUND)
    else:  # each worker's pool, opened before it serves, held to the end
        assert peaks == dict.fromkeys(gunicorn.workers, POOL_SIZE), peaks
