"""The Django example (examples/django_app, ENGINE pgmux.contrib.django) under gunicorn's gevent
workers: every endpoint answers, and under load each worker holds pipeline_size + pinned_size
server connections at most, however many requests it serves at once."""

from __future__ import annotations

import os
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.gunicorn import (
    POLL,
    REPO,
    assert_bounded_connections,
    backends_by_pid,
    http_get,
    peak_backends_while,
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


def _fetch(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.read()


def test_django_example_under_gevent_workers_bounds_its_connections(pg):
    pg.admin("DROP DATABASE IF EXISTS django_example WITH (FORCE)", dbname="postgres")
    pg.admin("CREATE DATABASE django_example OWNER scram_user", dbname="postgres")
    env = {**os.environ, "PGMUX_DSN": pg.dsn_for("scram_user", dbname="django_example")}
    env.pop("DATABASE_URL", None)
    env.pop("DJANGO_APP_BACKEND", None)
    with running(CONFIG, env, APP, workers=WORKERS) as gunicorn:
        base = gunicorn.base
        assert set(http_get(base + "/db")[1]) == {"id", "randomNumber"}
        assert len(http_get(base + "/queries?n=20")[1]) == 20
        updated = http_get(base + "/updates?n=5")[1]
        assert [w["id"] for w in updated] == sorted(w["id"] for w in updated)
        status, page = _fetch(base + "/fortunes")
        assert status == 200 and page.count(b"<tr>") == 14  # header, 12 + 1 fortunes
        assert b"&lt;script&gt;" in page and "フレームワーク".encode() in page
        assert http_get(base + "/health")[1] == {"status": "ok", "database": True}

        def load() -> list[tuple[int, bytes]]:
            with ThreadPoolExecutor(max_workers=48) as pool:
                return list(pool.map(lambda path: _fetch(base + path), REQUESTS))

        results, peak = peak_backends_while(pg, APP_NAME, load)
        print(f"server connections per worker at peak: {peak}")
        assert all(status == 200 for status, _ in results)
        assert_bounded_connections(gunicorn, peak, PIPELINE_SIZE, PINNED_SIZE)
    for pid in gunicorn.workers:
        assert f"pgmux: worker {pid} closed its client" in gunicorn.output
    wait_until(lambda: not (backends_by_pid(pg, APP_NAME).keys() & gunicorn.workers),
               timeout=10, interval=POLL, what="the workers' backends to go away")
    assert "Traceback" not in gunicorn.output, gunicorn.output
