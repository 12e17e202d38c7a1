"""gunicorn with gevent workers (examples/gunicorn.conf.py): one Client per worker, after fork."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import urllib.request

import pytest
from support.mux import wait_until

pytest.importorskip("gunicorn")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, "examples", "gunicorn.conf.py")
BOOT_TIMEOUT = 30.0
APP_NAME = "pgmux-example-"
POLL = 0.05  # seconds between looks at the log, /stats or pg_stat_activity


def http_get(url: str) -> tuple[int, object]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, json.loads(response.read())


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def example_backends(pg) -> dict[int, int]:
    """{process id in application_name: backend count} for the example app's connections."""
    out = pg.admin("SELECT application_name, count(*) FROM pg_stat_activity "
                   f"WHERE application_name LIKE '{APP_NAME}%' GROUP BY 1")
    found = {}
    for line in out.splitlines():
        name, count = line.split("|")
        found[int(name[len(APP_NAME):])] = int(count)
    return found


@pytest.mark.parametrize("preload", [False, True], ids=["lazy", "preload"])
def test_each_gevent_worker_holds_its_own_connections(pg, preload):
    env = {**os.environ, "PGMUX_DSN": pg.dsn_for("scram_user"), "WEB_CONCURRENCY": "2"}
    env.pop("DATABASE_URL", None)
    args = [sys.executable, "-m", "gunicorn", "-c", CONFIG, "--bind", "127.0.0.1:0",
            "--log-level", "info", *(["--preload"] if preload else [])]
    with tempfile.NamedTemporaryFile("w+", suffix=".log") as log:
        server = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        try:
            port = int(wait_until(lambda: re.search(r"Listening at: http://127\.0\.0\.1:(\d+)",
                                                    read(log.name)),
                                  timeout=BOOT_TIMEOUT, interval=POLL, what="gunicorn")[1])
            workers = wait_until(
                lambda: (found := re.findall(r"Booting worker with pid: (\d+)", read(log.name)))
                and len(found) == 2 and {int(pid) for pid in found},
                timeout=BOOT_TIMEOUT, interval=POLL, what="2 workers")
            base = f"http://127.0.0.1:{port}"

            # every endpoint answers, from both workers
            for path, count in (("/db", None), ("/queries?n=20", 20), ("/updates?n=5", 5)):
                status, body = http_get(base + path)
                assert status == 200
                assert count is None or len(body) == count
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
            assert server.pid not in backends
            assert all(backends[pid] >= 2 for pid in workers)
        finally:
            server.send_signal(signal.SIGTERM)  # graceful: workers run worker_exit
            server.wait(timeout=30)
        output = read(log.name)
    for pid in workers:
        assert f"pgmux: worker {pid} closed its client" in output
    wait_until(lambda: not (example_backends(pg).keys() & workers), timeout=10, interval=POLL,
               what="the workers' backends to go away")
    assert "Traceback" not in output, output
