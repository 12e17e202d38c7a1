"""The Celery example (examples/celery_app) under a gevent worker of 500 greenlets, a real Redis
broker and result backend: 2,000 tasks of psycopg2 code, every result checked, the books
balanced afterwards, and the worker's server connections counted while the tasks ran."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from pgmux.tooling.bench.celery_tasks import checked, load_schema, task_plan
from psycopg2_apps.kit import (
    DROP_IN,
    DROP_IN_BOUND,
    EXAMPLES,
    MODULE,
    REAL,
    ConnectionSampler,
    fresh_database,
    need_connections,
    script_env,
    with_application_name,
)

celery = pytest.importorskip("celery")
pytest.importorskip("redis")

TASKS = 2_000
CONCURRENCY = 500
BOOT_TIMEOUT = 60.0
RESULTS_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0
TASK = "celery_app.tasks."
POOL_SIZE = 100  # the tasks' pool (the example's default CELERY_APP_DB_CONNECTIONS)
REDIS_DB = {REAL: 1, DROP_IN: 2}  # a broker and result database per implementation


def read(path: str) -> str:
    with open(path, errors="replace") as f:
        return f.read()


@contextlib.contextmanager
def worker(env: dict[str, str], client: Any) -> Iterator[tuple[str, str]]:
    """``celery -A celery_app.app worker --pool=gevent --concurrency=500`` from examples/ until
    the block ends (then SIGTERM: a warm shutdown). Yields, once the worker has answered its
    first task: its log's path and the name of the module its ``import psycopg2`` gave."""
    command = [sys.executable, "-m", "celery", "-A", "celery_app.app", "worker",
               "--pool=gevent", f"--concurrency={CONCURRENCY}", "--loglevel=WARNING",
               "--without-heartbeat", "--without-mingle", "--without-gossip",
               "--hostname", f"psycopg2-apps-{os.getpid()}@%h"]
    with tempfile.NamedTemporaryFile("w+", suffix=".log") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                   cwd=EXAMPLES)
        try:
            answer = client.send_task(TASK + "driver")
            deadline = time.monotonic() + BOOT_TIMEOUT
            while not answer.ready():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the worker did not start:\n{read(log.name)[-6000:]}")
                time.sleep(0.05)
            yield log.name, answer.get()["module"]
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise AssertionError(f"the worker did not stop:\n{read(log.name)[-6000:]}")


def expected_balances(steps: list[tuple[str, tuple, Any]], accounts: int, opening: int
                      ) -> dict[int, int]:
    balances = dict.fromkeys(range(1, accounts + 1), opening)
    for task, args, _ in steps:
        if task == "transfer":
            source, target, amount = args
            balances[source] -= amount
            balances[target] += amount
    return balances


def rows(server: Any, sql: str, dbname: str) -> list[list[str]]:
    return [line.split("|") for line in server.admin(sql, dbname=dbname).splitlines()]


def test_celery_gevent_worker_runs_psycopg2_tasks(apps_pg, redis_server, driver):
    need_connections(apps_pg, driver, POOL_SIZE)
    schema = load_schema()
    dbname = f"celery_{driver}"
    dsn = fresh_database(apps_pg, dbname)
    apps_pg.admin(schema.schema_sql(), dbname=dbname)
    app_name = f"celery-example-{driver}"
    broker = redis_server.url(REDIS_DB[driver])
    env = script_env(DATABASE_URL=with_application_name(dsn, app_name), PSYCOPG2_DRIVER=driver,
                     CELERY_BROKER_URL=broker, CELERY_RESULT_BACKEND=broker,
                     CELERY_APP_DB_CONNECTIONS=str(POOL_SIZE))
    client = celery.Celery("psycopg2-apps-client", broker=broker, backend=broker)
    steps = task_plan(TASKS, schema.ACCOUNTS, schema.ACCOUNTS * schema.OPENING_BALANCE)
    try:
        with worker(env, client) as (log, module):
            assert module == MODULE[driver]
            started = time.monotonic()
            with ConnectionSampler(apps_pg.dsn, app_name) as sampler:
                sent = [client.send_task(TASK + task, args) for task, args, _ in steps]
                results = celery.result.ResultSet(sent).get(timeout=RESULTS_TIMEOUT)
            elapsed = time.monotonic() - started
            output = read(log)
    finally:
        client.close()

    assert len(results) == TASKS
    for (task, args, expected), result in zip(steps, results, strict=True):
        assert checked(task, result) == expected, (task, args)
    transfer_ids = [r["id"] for (task, _, _), r in zip(steps, results, strict=True)
                    if task == "transfer"]
    assert len(set(transfer_ids)) == len(transfer_ids)

    # The books: every transfer applied once (no lost update), the total unchanged.
    balances = {int(k): int(v) for k, v in rows(apps_pg, "SELECT id, balance FROM accounts",
                                                 dbname)}
    assert balances == expected_balances(steps, schema.ACCOUNTS, schema.OPENING_BALANCE)
    logged = Counter(tuple(map(int, row)) for row in rows(
        apps_pg, "SELECT source, target, amount FROM transfers", dbname))
    assert logged == Counter(args for task, args, _ in steps if task == "transfer")
    notes = {int(key) for (key,) in rows(apps_pg, "SELECT key FROM notes", dbname)}
    assert notes == {args[0] for task, args, _ in steps if task == "record"}

    peak = sampler.peak()
    print(f"{driver}: {TASKS} tasks in {elapsed:.2f}s ({TASKS / elapsed:.0f} tasks/s), "
          f"at most {peak} server connections in {sampler.samples} samples")
    assert sampler.samples > 0 and peak > 0
    if driver == DROP_IN:
        assert peak <= DROP_IN_BOUND, (peak, DROP_IN_BOUND)
    else:
        assert peak <= POOL_SIZE
    assert "Traceback" not in output, output[-6000:]
