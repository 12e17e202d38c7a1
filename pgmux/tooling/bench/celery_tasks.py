"""The Celery example as a client row: ``examples/celery_app``'s worker with
``--pool=gevent``, its tasks plain psycopg2 code, on pgmux's drop-in against psycopg2 itself.

Theory of operation. The worker is another program, so its case spawns no greenlets of
its own: ``CeleryCase`` (the runner's case for these clients) starts a throwaway Redis
(``pgmux.tooling.redis``: the broker and the result backend), resets the example's tables
(in a schema of their own, ``SCHEMA``, reached through the connections' ``search_path``),
and starts ``celery -A celery_app.app worker --pool=gevent --concurrency=<greenlets>``
from ``examples/`` with ``PSYCOPG2_DRIVER`` choosing the psycopg2 and the tasks' pool of
``<connections>`` connections (``CELERY_APP_DB_CONNECTIONS``). Once the worker answers, a
first batch of tasks opens its pool; then the measured window: the case's tasks (``rows``:
2,000 unless the preset says fewer) sent at once in the tests' mix (2 in 5 lookups, 1
total, 1 note written, 1 transfer between two accounts in a transaction), every result
checked, each task's latency from its sending to its result, the worker's CPU time (from
``/proc``), its backends' and the peak of its server connections. An operation is a task.

* ``celery-pgmux``: ``PSYCOPG2_DRIVER=pgmux`` (``pgmux.psycopg2.register()``): the pool's
  connections are handles on the worker's one client, 4 pipelined + 2 pinned server
  connections;
* ``celery-psycopg2``: ``PSYCOPG2_DRIVER=psycopg2`` (psycogreen): a server connection each.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import gevent

from pgmux.tooling.bench.clients import Adapter
from pgmux.tooling.bench.http import EXAMPLES
from pgmux.tooling.bench.procstat import CpuWindow
from pgmux.tooling.bench.runner import SAMPLE_INTERVAL, Case
from pgmux.tooling.bench.workloads import Workload

NAME = "celery_tasks"
TASKS = 2_000
WARM_UP_TASKS = 25  # the pool opened, the statements prepared
SCHEMA = "pgmux_bench_celery"
APP = os.path.join(EXAMPLES, "celery_app")
TASK = "celery_app.tasks."
BOOT_TIMEOUT = 60.0
RESULTS_TIMEOUT = 180.0
POLL = 0.05
MODULE = {"pgmux": "pgmux.psycopg2", "psycopg2": "psycopg2"}  # what `import psycopg2` gives


def load_schema() -> Any:
    """examples/celery_app/schema.py, loaded by path (its package's app module would choose
    a psycopg2 for this process)."""
    spec = importlib.util.spec_from_file_location("pgmux_bench_celery_schema",
                                                  os.path.join(APP, "schema.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def task_plan(tasks: int, accounts: int, opening_total: int, first_key: int = 0
              ) -> list[tuple[str, tuple[Any, ...], Any]]:
    """``tasks`` (task, arguments, expected result): 2 in 5 lookups, 1 total, 1 note written
    (keys from ``first_key``), 1 transfer between two different accounts (its result
    without the server's id)."""
    out: list[tuple[str, tuple[Any, ...], Any]] = []
    for i in range(tasks):
        kind = i % 5
        if kind in (0, 1):
            account = i % accounts + 1
            out.append(("lookup", (account,), {"id": account, "owner": f"owner-{account}"}))
        elif kind == 2:
            out.append(("total", (), opening_total))
        elif kind == 3:
            out.append(("record", (first_key + i, f"note {i}"), first_key + i))
        else:
            source = i * 7 % accounts
            target = (source + 1 + i % (accounts - 1)) % accounts
            amount = i % 9 + 1
            out.append(("transfer", (source + 1, target + 1, amount),
                        {"source": source + 1, "target": target + 1, "amount": amount}))
    return out


def checked(task: str, result: Any) -> Any:
    """What a result is compared with: a transfer's without its id (the server's)."""
    if task == "transfer" and isinstance(result, dict):
        return {key: value for key, value in result.items() if key != "id"}
    return result


def conninfo(dsn: str | None, overrides: dict[str, Any]) -> str:
    """``dsn`` with ``overrides`` as a libpq key=value string (the password kept: the
    worker's environment carries it)."""
    from pgmux.io.dsn import parse_dsn

    settings = {**(parse_dsn(dsn) if dsn else {}), **overrides}
    return " ".join(f"{key}='{_quote(str(value))}'" for key, value in settings.items())


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


class CeleryCase(Case):
    """One measured batch of tasks through the example's worker (see the module's
    docstring)."""

    def run(self) -> dict[str, Any]:
        from pgmux.tooling.redis import RedisServer, find_redis

        binary = find_redis()
        if binary is None:
            raise RuntimeError("redis-server not found (apt-get install redis-server)")
        self.tasks, self.rows = self.rows, 1  # an operation is a task
        dsn = conninfo(self.plan["dsn"], {**self.plan["params"],
                                           "application_name": self.app_name,
                                           "options": f"-c search_path={SCHEMA}"})
        schema = load_schema()
        self._reset(schema)
        with RedisServer(binary) as redis, tempfile.TemporaryFile("w+") as log:
            worker = self._start(dsn, redis.url(), log)
            try:
                window = self._measure_tasks(redis.url(), worker, schema, log)
            finally:
                _stop(worker)
        return self._result(window)

    def _reset(self, schema: Any) -> None:
        """The example's tables in their schema, the notes and transfers emptied, every
        account at its opening balance."""
        import pgmux.client

        with pgmux.client.Client(self.plan["dsn"], pipeline_size=1, pinned_size=1,
                                 application_name="pgmux-bench-setup",
                                 options=f"-c search_path={SCHEMA}") as db, db.session() as s:
            s.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
            s.execute(schema.schema_sql())
            s.execute("TRUNCATE notes, transfers")
            s.execute(f"UPDATE accounts SET balance = {int(schema.OPENING_BALANCE)}")

    def _start(self, dsn: str, broker: str, log: Any) -> subprocess.Popen[bytes]:
        driver = self.adapter_class.driver  # type: ignore[attr-defined]
        env = {key: value for key, value in os.environ.items()
               if key not in ("DATABASE_URL", "PGMUX_DSN")}
        env.update(DATABASE_URL=dsn, PSYCOPG2_DRIVER=driver, CELERY_BROKER_URL=broker,
                   CELERY_RESULT_BACKEND=broker,
                   CELERY_APP_DB_CONNECTIONS=str(self.connections))
        command = [sys.executable, "-m", "celery", "-A", "celery_app.app", "worker",
                   "--pool=gevent", f"--concurrency={self.case['greenlets']}",
                   "--loglevel=WARNING", "--without-heartbeat", "--without-mingle",
                   "--without-gossip", "--hostname", f"{self.app_name}@%h"]
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                cwd=EXAMPLES, start_new_session=True)

    def _measure_tasks(self, broker: str, worker: subprocess.Popen[bytes], schema: Any,
                       log: Any) -> dict[str, Any]:
        import celery

        client = celery.Celery("pgmux-bench", broker=broker, backend=broker)
        try:
            self._boot(client, worker, log)
            accounts = schema.ACCOUNTS
            total = accounts * schema.OPENING_BALANCE
            self._batch(client, task_plan(WARM_UP_TASKS, accounts, total, -WARM_UP_TASKS))
            steps = task_plan(self.tasks, accounts, total)
            peak = [self.sampler.count(self.app_name)]
            sampling = gevent.spawn(self._sample, peak)
            cpu = CpuWindow([worker.pid]).start()
            server = CpuWindow(self.sampler.backends(self.app_name)).start()
            wall0 = time.perf_counter()
            self.latencies = self._batch(client, steps)
            wall = time.perf_counter() - wall0
            sampling.kill()
            return {"wall": wall, "cpu": cpu.stop() or 0.0, "peak": peak[0], "user": None,
                    "system": None, "fill": None, "turns": None, "rss_peak": None,
                    "server_cpu": server.stop()}
        finally:
            client.close()

    def _boot(self, client: Any, worker: subprocess.Popen[bytes], log: Any) -> None:
        """Wait for the worker's first answer: which psycopg2 it runs."""
        answer = client.send_task(TASK + "driver")
        deadline = time.monotonic() + BOOT_TIMEOUT
        while not answer.ready():
            if worker.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"the Celery worker did not start: {log.read()[-1500:]}")
            gevent.sleep(POLL)
        driver = self.adapter_class.driver  # type: ignore[attr-defined]
        module = answer.get()["module"]
        if module != MODULE[driver]:
            raise RuntimeError(f"the worker runs {module}, not {MODULE[driver]}")

    def _batch(self, client: Any, steps: list[tuple[str, tuple[Any, ...], Any]]
               ) -> list[float]:
        """Send every task at once; each one's latency (seconds) as its result arrives,
        wrong results and failures counted as errors."""
        from celery.result import ResultSet

        sent_at: dict[str, float] = {}
        index: dict[str, int] = {}
        latencies: list[float] = []
        sent = []
        for i, (task, args, _) in enumerate(steps):
            result = client.send_task(TASK + task, args)
            sent_at[result.id] = time.perf_counter()
            index[result.id] = i
            sent.append(result)

        def arrived(task_id: str, value: Any) -> None:
            latencies.append(time.perf_counter() - sent_at[task_id])
            task, args, expected = steps[index[task_id]]
            if checked(task, value) != expected:
                self.errors += 1
                if self.first_error is None:
                    self.first_error = f"{task}{args!r} gave {value!r}"[:300]

        ResultSet(sent).get(timeout=RESULTS_TIMEOUT, callback=arrived, propagate=False)
        return latencies

    def _sample(self, peak: list[int]) -> None:
        while True:
            gevent.sleep(SAMPLE_INTERVAL)
            peak[0] = max(peak[0], self.sampler.count(self.app_name))


def _stop(worker: subprocess.Popen[bytes]) -> None:
    """The worker and anything it started, killed: the batch is over, its results read
    (a cold shutdown takes seconds, and leaves the same)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()


class CeleryWorker(Adapter):
    """The example's worker on one psycopg2 (``driver``)."""

    driver = ""
    workloads = (NAME,)
    case_runner = CeleryCase
    monkey_patch = True  # the case waits on Redis while it samples the server
    install = "pip install celery redis 'pgmux[bench]'; apt-get install redis-server"

    @classmethod
    def missing(cls) -> list[str]:
        from pgmux.tooling.redis import find_redis

        absent = super().missing()
        if find_redis() is None:
            absent.append("redis-server")
        if not os.path.isdir(APP):
            absent.append(f"{APP} (a source checkout of pgmux)")
        return absent


class CeleryPgmux(CeleryWorker):
    name = "celery-pgmux"
    description = ("examples/celery_app's worker (--pool=gevent) on pgmux.psycopg2: its pool's "
                   "connections are handles, 4 pipelined + 2 pinned server connections")
    driver = "pgmux"
    modules = ("celery", "redis")


class CeleryPsycopg2(CeleryWorker):
    name = "celery-psycopg2"
    description = ("examples/celery_app's worker (--pool=gevent) on psycopg2 + psycogreen: a "
                   "server connection per pooled connection")
    driver = "psycopg2"
    modules = ("celery", "redis", "psycopg2", "psycogreen")


CELERY_WORKLOAD = Workload(
    NAME, "the Celery example's tasks (lookups, totals, notes, transfers) sent at once to a "
    "worker with --pool=gevent", lambda client, rng, rows: lambda: None, unit="task",
    rows=TASKS, clients=("celery-pgmux", "celery-psycopg2"))
CELERY_CLIENTS: dict[str, type[Adapter]] = {c.name: c for c in (CeleryPgmux, CeleryPsycopg2)}
