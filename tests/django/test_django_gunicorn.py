"""The Django example (examples/django_app, ENGINE pgmux.contrib.django, ATOMIC_REQUESTS) under
gunicorn's gevent workers: every endpoint answers; under load each worker holds pipeline_size +
pinned_size server connections at most, however many requests it serves at once; its read
endpoints, each in a transaction, take no pinned connection."""

from __future__ import annotations

import json
import os
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.gunicorn import (
    POLL,
    REPO,
    assert_bounded_connections,
    assert_reads_stay_on_the_pipeline,
    backends_by_pid,
    http_get,
    peak_backends_while,
    ran_elsewhere,
    running,
)
from support.mux import wait_until

pytest.importorskip("gunicorn")
pytest.importorskip("django")

CONFIG = os.path.join(REPO, "examples", "gunicorn.conf.py")  # given the Django app's module
APP = "django_app.wsgi:application"
APP_NAME = "django-pgmux-"
PIPELINE_SIZE, PINNED_SIZE = 2, 4  # examples/django_app/settings.py
WORKERS = 2
REQUESTS = ["/queries?n=20"] * 48 + ["/updates?n=5"] * 24 + ["/db"] * 24 + ["/fortunes"] * 8
READS = ["/db"] * 64 + ["/queries?n=20"] * 48 + ["/fortunes"] * 16
UPDATES = ["/updates?n=5"] * 16


def _fetch(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.read()


def _example_env(pg) -> dict[str, str]:
    """The environment of the example on a fresh database of its own (pgmux's backend)."""
    pg.admin("DROP DATABASE IF EXISTS django_example WITH (FORCE)", dbname="postgres")
    pg.admin("CREATE DATABASE django_example OWNER scram_user", dbname="postgres")
    env = {**os.environ, "PGMUX_DSN": pg.dsn_for("scram_user", dbname="django_example")}
    env.pop("DATABASE_URL", None)
    env.pop("DJANGO_APP_BACKEND", None)
    return env


def _load(base: str, paths: list[str]) -> list[tuple[int, bytes]]:
    with ThreadPoolExecutor(max_workers=48) as pool:
        return list(pool.map(lambda path: _fetch(base + path), paths))


def test_django_example_under_gevent_workers_bounds_its_connections(pg):
    with running(CONFIG, _example_env(pg), APP, workers=WORKERS) as gunicorn:
        base = gunicorn.base
        assert set(http_get(base + "/db")[1]) == {"id", "randomNumber"}
        assert len(http_get(base + "/queries?n=20")[1]) == 20
        updated = http_get(base + "/updates?n=5")[1]
        assert [w["id"] for w in updated] == sorted(w["id"] for w in updated)
        status, page = _fetch(base + "/fortunes")
        assert status == 200 and page.count(b"<tr>") == 14  # header, 12 + 1 fortunes
        assert b"&lt;script&gt;" in page and "フレームワーク".encode() in page
        assert http_get(base + "/health")[1] == {"status": "ok", "database": True}

        results, peak = peak_backends_while(pg, APP_NAME, lambda: _load(base, REQUESTS))
        print(f"server connections per worker at peak: {peak}")
        assert all(status == 200 for status, _ in results)
        assert_bounded_connections(gunicorn, peak, PIPELINE_SIZE, PINNED_SIZE)
    for pid in gunicorn.workers:
        assert f"pgmux: worker {pid} closed its client" in gunicorn.output
    wait_until(lambda: not (backends_by_pid(pg, APP_NAME).keys() & gunicorn.workers),
               timeout=10, interval=POLL, what="the workers' backends to go away")
    assert "Traceback" not in gunicorn.output, gunicorn.output


def _stored(pg, world_id: int) -> int:
    return int(pg.admin(f"SELECT randomnumber FROM world WHERE id = {int(world_id)}",
                        dbname="django_example"))


def test_django_example_reads_in_atomic_requests_take_no_pinned_connection(pg):
    """Every view runs in a transaction (ATOMIC_REQUESTS). Under load, a worker's reads (/db,
    /queries, /fortunes) open no server connection, run on pipeline_size of those it holds
    and on none of the others (the pinned one its seeding used), and none of its backends
    is ever seen inside a transaction block. /updates does take a pinned connection (the
    same probe sees it), and commits what it returns."""
    with running(CONFIG, _example_env(pg), APP, workers=WORKERS) as gunicorn:
        base = gunicorn.base
        # (each worker's warm-up, get_client, seeds and opens its pipelined connections)
        after_reads, read_on = assert_reads_stay_on_the_pipeline(
            pg, gunicorn, APP_NAME, lambda: _load(base, READS), PIPELINE_SIZE)

        updated, pinned = ran_elsewhere(pg, APP_NAME, lambda: _load(base, UPDATES),
                                        after_reads, read_on)
        assert [status for status, _ in updated] == [200] * len(UPDATES)
        assert any(pinned.values()), pinned  # /updates wrote on a pinned connection
        returned: dict[int, set[int]] = {}
        for _, body in updated:
            for world in json.loads(body):
                returned.setdefault(world["id"], set()).add(world["randomNumber"])
        assert all(_stored(pg, world_id) in numbers for world_id, numbers in returned.items())
        status, worlds = http_get(base + "/updates?n=5")
        assert status == 200 and len(worlds) == 5
        assert all(_stored(pg, world["id"]) == world["randomNumber"] for world in worlds)
    assert "Traceback" not in gunicorn.output, gunicorn.output
