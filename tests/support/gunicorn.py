"""Booting gunicorn on an example app and reading what it did (HTTP, log, pg_stat_activity)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from support.mux import wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOOT_TIMEOUT = 30.0
POLL = 0.05  # seconds between looks at the log, /stats or pg_stat_activity


def http_get(url: str) -> tuple[int, object]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, json.loads(response.read())


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def backends_by_pid(pg, prefix: str) -> dict[int, int]:
    """{process id in application_name: backend count} for application names ``prefix<pid>``."""
    out = pg.admin("SELECT application_name, count(*) FROM pg_stat_activity "
                   f"WHERE application_name LIKE '{prefix}%' GROUP BY 1")
    found = {}
    for line in out.splitlines():
        name, count = line.split("|")
        found[int(name[len(prefix):])] = int(count)
    return found


T = TypeVar("T")


def peak_backends_while(pg, prefix: str, work: Callable[[], T]) -> tuple[T, dict[int, int]]:
    """``work()``'s result, and the most server connections each process (named by
    application_name ``prefix<pid>``) held while it ran."""
    peak: dict[int, int] = {}
    with ThreadPoolExecutor(max_workers=1) as runner:
        done = runner.submit(work)
        while not done.done():
            for pid, count in backends_by_pid(pg, prefix).items():
                peak[pid] = max(peak.get(pid, 0), count)
        return done.result(), peak


def assert_bounded_connections(gunicorn: Gunicorn, peak: dict[int, int], pipeline_size: int,
                               pinned_size: int) -> None:
    """Every worker answered /stats with its pool sizes, and held pipeline_size to
    pipeline_size + pinned_size server connections at peak (the master none)."""
    stats: dict[int, Any] = {}
    wait_until(lambda: stats.update({(s := http_get(gunicorn.base + "/stats")[1])["pid"]: s})
               or stats.keys() == gunicorn.workers, timeout=10, interval=POLL,
               what="/stats from every worker")
    for worker_stats in stats.values():
        assert worker_stats["pipeline"]["live"] == pipeline_size
        assert worker_stats["pinned"]["size"] == pinned_size
    assert peak.keys() <= gunicorn.workers and gunicorn.server.pid not in peak
    for pid in gunicorn.workers:
        assert pipeline_size <= peak.get(pid, 0) <= pipeline_size + pinned_size, peak


@dataclass
class Gunicorn:
    server: subprocess.Popen
    base: str  # http://127.0.0.1:port
    workers: set[int]
    output: str = ""  # the whole log, once the block has ended and gunicorn has exited


@contextlib.contextmanager
def running(config: str, env: dict[str, str], *args: str,
            workers: int = 2) -> Iterator[Gunicorn]:
    """gunicorn -c config on a free port until the block ends (then SIGTERM, graceful)."""
    command = [sys.executable, "-m", "gunicorn", "-c", config, "--bind", "127.0.0.1:0",
               "--log-level", "info", *args]
    with tempfile.NamedTemporaryFile("w+", suffix=".log") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                  env={**env, "WEB_CONCURRENCY": str(workers)}, cwd=REPO)
        instance = None
        try:
            port = int(wait_until(lambda: re.search(r"Listening at: http://127\.0\.0\.1:(\d+)",
                                                    read(log.name)),
                                  timeout=BOOT_TIMEOUT, interval=POLL, what="gunicorn")[1])
            pids = wait_until(
                lambda: (found := re.findall(r"Booting worker with pid: (\d+)", read(log.name)))
                and len(found) == workers and {int(pid) for pid in found},
                timeout=BOOT_TIMEOUT, interval=POLL, what=f"{workers} workers")
            instance = Gunicorn(server, f"http://127.0.0.1:{port}", pids)
            yield instance
        finally:
            server.send_signal(signal.SIGTERM)  # graceful: workers run worker_exit
            server.wait(timeout=30)
            if instance is not None:
                instance.output = read(log.name)
