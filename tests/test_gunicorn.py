"""gunicorn with gevent workers (examples/gunicorn.conf.py): one Client per worker, after fork."""

from __future__ import annotations

import os

import pytest
from support.gunicorn import POLL, REPO, backends_by_pid, http_get, running
from support.mux import wait_until

pytest.importorskip("gunicorn")

CONFIG = os.path.join(REPO, "examples", "gunicorn.conf.py")
APP_NAME = "pgmux-example-"


def example_backends(pg) -> dict[int, int]:
    """{process id in application_name: backend count} for the example app's connections."""
    return backends_by_pid(pg, APP_NAME)


@pytest.mark.parametrize("preload", [False, True], ids=["lazy", "preload"])
def test_each_gevent_worker_holds_its_own_connections(pg, preload):
    env = {**os.environ, "PGMUX_DSN": pg.dsn_for("scram_user")}
    env.pop("DATABASE_URL", None)
    with running(CONFIG, env, *(["--preload"] if preload else [])) as gunicorn:
        base, workers = gunicorn.base, gunicorn.workers

        # every endpoint answers, from both workers
        for path, count in (("/db", None), ("/queries?n=20", 20), ("/updates?n=5", 5)):
            status, body = http_get(base + path)
            assert status == 200
            assert count is None or len(body) == count
        for world in http_get(base + "/updates?n=20")[1]:  # one atomic unit, committed
            stored = pg.admin(f"SELECT randomnumber FROM world WHERE id = {world['id']}")
            assert int(stored) == world["randomNumber"]
        stats_by_pid = {}

        def collect() -> bool:
            stats = http_get(base + "/stats")[1]
            stats_by_pid[stats["pid"]] = stats
            return stats_by_pid.keys() == workers

        wait_until(collect, timeout=10, interval=POLL,
                   what=f"/stats from both workers {workers}")
        assert all(stats["pipeline"]["live"] == 2 for stats in stats_by_pid.values())

        # each worker (and only the workers, never the master) has its own connections:
        # its pipeline (2) plus the pinned connection that seeded the table
        backends = wait_until(lambda: (found := example_backends(pg)).keys() >= workers
                              and found, timeout=10, interval=POLL,
                              what="both workers' connections")
        assert gunicorn.server.pid not in backends
        assert all(backends[pid] >= 2 for pid in workers)
    for pid in workers:
        assert f"pgmux: worker {pid} closed its client" in gunicorn.output
    wait_until(lambda: not (example_backends(pg).keys() & workers), timeout=10, interval=POLL,
               what="the workers' backends to go away")
    assert "Traceback" not in gunicorn.output, gunicorn.output
