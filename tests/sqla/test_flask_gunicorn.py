"""The Flask-SQLAlchemy example (postgresql+pgmux, db.session at the default isolation) under
gunicorn's gevent workers: it answers; each worker holds pipeline_size + pinned_size server
connections at most, however many greenlets query at once; its read requests take no pinned
connection, its writes do."""

from __future__ import annotations

import os
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
pytest.importorskip("flask_sqlalchemy")

CONFIG = os.path.join(REPO, "examples", "gunicorn_flask.conf.py")
APP_NAME = "pgmux-flask-"
PIPELINE_SIZE, PINNED_SIZE = 2, 2  # examples/flask_sqlalchemy_app.py
WORKERS = 2
LOOKUPS = 50  # per /queries request, each in its own greenlet and SQLAlchemy session


MIXED = [f"/queries?n={LOOKUPS}"] * 48 + ["/updates?n=3"] * 16 + ["/db"] * 16
READS = [f"/queries?n={LOOKUPS}"] * 32 + ["/db"] * 64


def _load(base: str, paths: list[str] = MIXED) -> list[tuple[int, object]]:
    with ThreadPoolExecutor(max_workers=32) as pool:
        return list(pool.map(lambda path: http_get(base + path), paths))


def test_flask_sqlalchemy_app_shares_few_server_connections(pg):
    env = {**os.environ, "PGMUX_DSN": pg.dsn_for("scram_user")}
    env.pop("DATABASE_URL", None)
    with running(CONFIG, env, workers=WORKERS) as gunicorn:
        base = gunicorn.base
        # each worker's warm-up seeds and opens its pipelined connections: its reads run
        # there, in sessions that never pin; /updates pins for its writes
        after_reads, read_on = assert_reads_stay_on_the_pipeline(
            pg, gunicorn, APP_NAME, lambda: _load(base, READS), PIPELINE_SIZE)
        _, pinned = ran_elsewhere(pg, APP_NAME, lambda: http_get(base + "/updates?n=3"),
                                  after_reads, read_on)
        assert any(pinned.values()), pinned

        status, world = http_get(base + "/db")
        assert status == 200 and set(world) == {"id", "randomNumber"}
        assert len(http_get(base + "/queries?n=20")[1]) == 20
        updated = http_get(base + "/updates?n=5")[1]
        assert len(updated) == 5 and [w["id"] for w in updated] == sorted(w["id"] for w in updated)
        for world in updated:  # committed, as returned
            stored = pg.admin(f"SELECT randomnumber FROM world WHERE id = {world['id']}")
            assert int(stored) == world["randomNumber"]
        assert http_get(base + "/health")[1] == {"status": "ok", "database": True}

        answers, peak = peak_backends_while(pg, APP_NAME, lambda: _load(base))
        print(f"server connections per worker at peak: {peak}")
        assert all(status == 200 for status, _ in answers)
        assert sum(len(body) for _, body in answers[:48]) == 48 * LOOKUPS
        assert_bounded_connections(gunicorn, peak, PIPELINE_SIZE, PINNED_SIZE)
        assert sum(peak.values()) <= WORKERS * (PIPELINE_SIZE + PINNED_SIZE)
    for pid in gunicorn.workers:
        assert f"pgmux: worker {pid} closed its connections" in gunicorn.output
    wait_until(lambda: not (backends_by_pid(pg, APP_NAME).keys() & gunicorn.workers),
               timeout=10, interval=POLL, what="the workers' backends to go away")
    assert "Traceback" not in gunicorn.output, gunicorn.output
