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


Activity = dict[int, dict[int, tuple[str, str]]]  # {process: {backend: (state, state_change)}}


def backend_activity(pg, prefix: str) -> Activity:
    """The server connections of the processes named by application_name ``prefix<pid>``:
    {pid: {backend pid: (state, state_change)}} (state_change: when the backend last went
    from running something to idle, or back)."""
    out = pg.admin("SELECT application_name, pid, state, state_change FROM pg_stat_activity "
                   f"WHERE application_name LIKE '{prefix}%'")
    found: Activity = {}
    for line in out.splitlines():
        name, backend, state, changed = line.split("|")
        found.setdefault(int(name[len(prefix):]), {})[int(backend)] = (state, changed)
    return found


def backends_by_pid(pg, prefix: str) -> dict[int, int]:
    """{process id in application_name: backend count} for application names ``prefix<pid>``."""
    return {pid: len(backends) for pid, backends in backend_activity(pg, prefix).items()}


T = TypeVar("T")


def activity_while(pg, prefix: str, work: Callable[[], T]) -> tuple[T, list[Activity]]:
    """``work()``'s result, and ``backend_activity`` sampled over and over while it ran."""
    samples: list[Activity] = []
    with ThreadPoolExecutor(max_workers=1) as runner:
        done = runner.submit(work)
        while not done.done():
            samples.append(backend_activity(pg, prefix))
        return done.result(), samples


def peak_backends_while(pg, prefix: str, work: Callable[[], T]) -> tuple[T, dict[int, int]]:
    """``work()``'s result, and the most server connections each process (named by
    application_name ``prefix<pid>``) held while it ran."""
    result, samples = activity_while(pg, prefix, work)
    peak: dict[int, int] = {}
    for sample in samples:
        for pid, backends in sample.items():
            peak[pid] = max(peak.get(pid, 0), len(backends))
    return result, peak


def ran_since(before: Activity, after: Activity) -> dict[int, set[int]]:
    """{pid: the backends of ``after`` that are new or have changed state since ``before``}."""
    return {pid: {backend for backend, seen in backends.items()
                  if before.get(pid, {}).get(backend) != seen}
            for pid, backends in after.items()}


def assert_reads_stay_on_the_pipeline(pg, gunicorn: Gunicorn, prefix: str,
                                      work: Callable[[], list[tuple[int, Any]]],
                                      pipeline_size: int) -> tuple[Activity, dict[int, set[int]]]:
    """Once every worker has its ``pipeline_size`` pipelined connections open (its /stats
    says so), run ``work`` (requests that only read; their (status, body) answers, all 200)
    and check in pg_stat_activity that the reads took no pinned connection: no worker opened
    a server connection (pinned ones open when first needed), ran anything on more than
    ``pipeline_size`` of those it held, or was seen inside a transaction block. Returns the
    activity after it, and {worker: the backends its reads ran on}."""
    stats = stats_of_every_worker(gunicorn)
    assert all(s["pipeline"]["live"] == pipeline_size for s in stats.values()), stats
    before = backend_activity(pg, prefix)
    answers, samples = activity_while(pg, prefix, work)
    assert [status for status, _ in answers] == [200] * len(answers)
    after = backend_activity(pg, prefix)
    for sample in [*samples, after]:
        for pid, backends in sample.items():
            assert backends.keys() <= before.get(pid, {}).keys(), (pid, "opened", before, sample)
            in_block = [backend for backend, (state, _) in backends.items()
                        if state.startswith("idle in transaction")]
            assert not in_block, (pid, "in a transaction block", in_block, sample)
    read_on = ran_since(before, after)
    print(f"backends each worker's reads ran on: {read_on}, of {before}")
    for pid in gunicorn.workers:
        assert len(read_on.get(pid, set())) <= pipeline_size, (pid, read_on, before)
    return after, read_on


def ran_elsewhere(pg, prefix: str, work: Callable[[], T], since: Activity,
                  elsewhere_than: dict[int, set[int]]) -> tuple[T, dict[int, set[int]]]:
    """``work()``'s result, and {worker: the backends outside ``elsewhere_than`` (e.g. its
    pipelined ones) that are new or ran something since ``since``, by the end of it}."""
    result = work()
    ran = ran_since(since, backend_activity(pg, prefix))
    return result, {pid: backends - elsewhere_than.get(pid, set())
                    for pid, backends in ran.items()}


def stats_of_every_worker(gunicorn: Gunicorn) -> dict[int, Any]:
    """{worker pid: its /stats}, asked until every worker has answered (so each has run its
    post_worker_init hook: a worker serves only after it)."""
    stats: dict[int, Any] = {}
    wait_until(lambda: stats.update({(s := http_get(gunicorn.base + "/stats")[1])["pid"]: s})
               or stats.keys() == gunicorn.workers, timeout=10, interval=POLL,
               what="/stats from every worker")
    return stats


def assert_bounded_connections(gunicorn: Gunicorn, peak: dict[int, int], pipeline_size: int,
                               pinned_size: int) -> None:
    """Every worker answered /stats with its pool sizes, and held pipeline_size to
    pipeline_size + pinned_size server connections at peak (the master none)."""
    for worker_stats in stats_of_every_worker(gunicorn).values():
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
