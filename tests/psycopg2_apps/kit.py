"""What the psycopg2 application tests share: the two implementations, a database of a test's
own, scripts run in a subprocess, and server connections sampled from pg_stat_activity."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

import pgmux
from psycopg2_apps import books

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
EXAMPLES = os.path.join(REPO, "examples")
PSQL_TIMEOUT = 10.0
SAMPLE_EVERY = 0.01  # seconds between two looks at pg_stat_activity
SCRIPT_TIMEOUT = 120.0

# The implementations every test runs on: the real psycopg2 made cooperative by psycogreen
# (the control), and pgmux's drop-in through pgmux.psycopg2.register().
REAL, DROP_IN = "psycopg2", "pgmux"
DRIVERS = (REAL, DROP_IN)
MODULE = {REAL: "psycopg2", DROP_IN: "pgmux.psycopg2"}  # what `import psycopg2` gives
DROP_IN_BUILT = importlib.util.find_spec("pgmux.psycopg2") is not None


def skip_unless_available(driver: str) -> None:
    """The one place a driver's tests skip: the drop-in until the package exists here."""
    if driver == DROP_IN and not DROP_IN_BUILT:
        pytest.skip("pgmux.psycopg2 not built yet")


def _default(name: str) -> int:
    return inspect.signature(pgmux.Client).parameters[name].default


# A drop-in connection is a handle on the process's shared client, made with pgmux.Client's
# defaults: each process holds at most this many server connections.
PIPELINE_SIZE, PINNED_SIZE = _default("pipeline_size"), _default("pinned_size")
DROP_IN_BOUND = PIPELINE_SIZE + PINNED_SIZE


def need_connections(server: Any, driver: str, count: int) -> None:
    """Skip the real psycopg2's run (a server connection per connection it makes) when the
    server takes fewer than ``count`` connections more than it holds now."""
    if driver != REAL:
        return
    free = int(server.admin("SELECT current_setting('max_connections')::int - count(*) "
                            "FROM pg_stat_activity"))
    if free < count:
        pytest.skip(f"the real psycopg2 needs {count} server connections; the server takes "
                    f"{free} more")


def fresh_database(server: Any, name: str) -> str:
    """The superuser's DSN on database ``name``, dropped (with its sessions) and created."""
    server.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", dbname="postgres")
    server.admin(f"CREATE DATABASE {name}", dbname="postgres")
    return server.dsn_for(dbname=name)


def with_application_name(dsn: str, name: str) -> str:
    """``dsn`` (a URL) with application_name=``name``: how a run's connections are counted."""
    return f"{dsn}{'&' if '?' in dsn else '?'}application_name={name}"


def psql_binary() -> str:
    from pgmux.tooling.embedded import find_postgres_bin

    return os.path.join(find_postgres_bin()[0], "psql")


class ConnectionSampler:
    """Counts, from a psql session of its own, the server connections whose application_name
    starts with ``prefix``, every SAMPLE_EVERY seconds in a thread until the block ends.

    ``peaks``: {application_name: the most connections it was seen holding}; ``samples``:
    how many looks were taken.
    """

    def __init__(self, dsn: str, prefix: str):
        self.prefix = prefix
        self.peaks: dict[str, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._psql = subprocess.Popen(
            [psql_binary(), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", dsn],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self._query = (
            "SELECT 'sample:' || coalesce(string_agg(application_name || '=' || n, ','), '') "
            "FROM (SELECT application_name, count(*) AS n FROM pg_stat_activity "
            f"WHERE starts_with(application_name, '{prefix}') GROUP BY 1) AS s;\n")
        self._thread = threading.Thread(target=self._run, name="pg_stat_activity sampler",
                                        daemon=True)
        self.error: BaseException | None = None

    def sample(self) -> dict[str, int]:
        """One look: {application_name: server connections}."""
        self._psql.stdin.write(self._query)
        self._psql.stdin.flush()
        line = self._psql.stdout.readline().strip()
        if not line.startswith("sample:"):
            raise AssertionError(f"psql answered {line!r}")
        pairs = [item.rsplit("=", 1) for item in line.removeprefix("sample:").split(",") if item]
        return {name: int(count) for name, count in pairs}

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for name, count in self.sample().items():
                    self.peaks[name] = max(self.peaks.get(name, 0), count)
                self.samples += 1
                self._stop.wait(SAMPLE_EVERY)
        except BaseException as exc:  # reported by __exit__
            self.error = exc

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(PSQL_TIMEOUT)
        self._psql.stdin.close()
        self._psql.wait(PSQL_TIMEOUT)
        if self.error is not None:
            raise AssertionError(f"sampling pg_stat_activity failed: {self.error!r}")

    def peak(self, name: str | None = None) -> int:
        """The most connections ``name`` (default: the prefix itself) was seen holding."""
        return self.peaks.get(self.prefix if name is None else name, 0)


def script_env(**extra: str) -> dict[str, str]:
    """The environment of a subprocess: this one's, without the variables that would choose
    a database or an implementation for it, and with ``extra``."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "PGMUX_DSN", "PSYCOPG2_DRIVER")}
    return {**env, **extra}


def run_script(module: str, *args: str, timeout: float = SCRIPT_TIMEOUT) -> dict[str, Any]:
    """``python -m psycopg2_apps.<module> args`` from tests/: the JSON object it printed last
    (its other output is shown when it fails)."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", f"psycopg2_apps.{module}", *args],
                          cwd=TESTS, env=script_env(), capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"{module} exited with {done.returncode}:\n"
                             f"{done.stdout[-4000:]}\n{done.stderr[-8000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"{module} printed no result:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    result = json.loads(lines[-1])
    result["wall_seconds"] = round(time.monotonic() - started, 2)
    return result


def run_orm_books(server: Any, driver: str, orm: str, greenlets: int, per_greenlet: int) -> None:
    """Run the ``<orm>_books`` script on ``driver`` in a database of its own, from
    ``greenlets`` greenlets: the books balance, and the drop-in held at most its bound of
    server connections while it ran."""
    need_connections(server, driver, greenlets + 1)
    dbname = f"{orm}_books_{driver}"
    dsn = fresh_database(server, dbname)
    app_name = f"{orm}-books-{driver}"
    with ConnectionSampler(server.dsn, app_name) as sampler:
        result = run_script(f"{orm}_books", driver, with_application_name(dsn, app_name),
                            str(greenlets), str(per_greenlet))
    assert result["module"] == MODULE[driver]
    books.check(server, dbname, result, greenlets, per_greenlet)
    peak = sampler.peak()
    print(f"{driver}: {result['operations']} ORM operations from {greenlets} greenlets in "
          f"{result['seconds']}s, at most {peak} server connections in {sampler.samples} "
          "samples")
    assert sampler.samples > 0 and peak > 0
    if driver == DROP_IN:
        assert peak <= DROP_IN_BOUND, (peak, DROP_IN_BOUND)
