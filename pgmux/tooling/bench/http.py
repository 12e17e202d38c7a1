"""The http suite: the example app under gunicorn's gevent workers, pgmux against psycopg2.

Theory of operation. For each RTT the suite starts gunicorn for each app (they
boot at once) with ``examples/gunicorn.conf.py`` (2 gevent workers) on a free port,
the app's DSN pointing at the server or at the RTT's delay proxy, and checks every
endpoint once. Then, endpoint by endpoint, ``wrk`` (1 thread, 64 connections) warms up and
measures a window, the apps back to back per endpoint (all of them serve at once:
an idle app costs nothing), so a burst of load from elsewhere falls on both alike;
a Lua ``done`` hook prints wrk's figures as one JSON line. The requests a window leaves
queued (a warm-up's too) are served before the app's next window starts (the server is
watched until none of the app's connections has started a query for a moment), and
dropped at the end (a quick shutdown). A suite is a ``Pass``
(apps, endpoints, wrk's connections); suites that run at the same RTT share the boot
(``run_passes``: ``psycopg2_http`` measures this suite's psycopg2 app under its own load).
Alongside: the CPU time of the two workers and of the app's server backends over
the window (user + system, from ``/proc``; the backends' only when the server runs
on this machine) and the peak of the app's server connections in
``pg_stat_activity`` (by ``application_name`` prefix). The apps:

* ``pgmux``: ``examples/wsgi_app.py``, one Client per worker with 2 pipelined and
  4 pinned connections (the pinned ones open on demand: the seeding);
* ``psycopg2``: ``examples/wsgi_app_psycopg2.py``, the same endpoints on psycopg2 +
  psycogreen with a pool of 6 connections per worker (12 in all, like pgmux's).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgmux._native import implementation
from pgmux.tooling.bench.procstat import CpuWindow, children, per_operation

ENDPOINTS = {"/db": None, "/queries?n=20": 20, "/updates?n=5": 5,  # path -> rows expected
             "/updates?n=20": 20}
WORKERS = 2
WRK_CONNECTIONS, WRK_THREADS = 64, 1
BOOT_TIMEOUT = 60.0
STOP_TIMEOUT = 0.5  # for gunicorn's quick shutdown, before its process group is killed
DRAIN_TIMEOUT = 60.0  # for an app to serve what an earlier window left queued
QUIET_SECONDS = 0.1  # no query started for this long (or 3 RTTs): the app is drained
POLL = 0.1
REPO = str(Path(__file__).resolve().parents[3])  # the checkout: pgmux/tooling/bench/http.py
EXAMPLES = os.path.join(REPO, "examples")
CONFIG = os.path.join(EXAMPLES, "gunicorn.conf.py")
WRK_INSTALL = "install it: apt-get install -y wrk (Debian/Ubuntu), brew install wrk (macOS)"
WRK_SCRIPT = """\
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("PGMUX_WRK {\\"requests\\": %d, \\"duration_us\\": %d, " ..
    "\\"connect\\": %d, \\"read\\": %d, \\"write\\": %d, \\"status\\": %d, \\"timeout\\": %d, " ..
    "\\"mean_us\\": %.1f, \\"max_us\\": %.1f, \\"p50_us\\": %.1f, \\"p90_us\\": %.1f, " ..
    "\\"p99_us\\": %.1f, \\"p999_us\\": %.1f}\\n",
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.max, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9)))
end
"""


@dataclass(frozen=True)
class App:
    """One side of the comparison: a WSGI app of ``examples/`` and what it needs."""

    name: str
    uri: str  # gunicorn's APP_MODULE
    prefix: str  # of its connections' application_name
    modules: tuple[str, ...]
    connections: str
    config: str = CONFIG  # gunicorn's configuration file
    env: tuple[tuple[str, str], ...] = ()  # its environment, over the suite's
    log: str | None = None  # a line each worker logs once booted (what it runs on)


@dataclass(frozen=True)
class Pass:
    """Endpoints measured on some apps under one load: wrk's connections."""

    apps: tuple[App, ...]
    endpoints: dict[str, int | None]
    connections: int = WRK_CONNECTIONS

    def measurements(self, names: list[str]) -> int:
        """How many windows of wrk it takes with the apps ``names`` allows."""
        return len(self.endpoints) * sum(app.name in names for app in self.apps)


APPS = {app.name: app for app in (
    App("pgmux", "wsgi_app:application", "pgmux-example-", (),
        "2 pipelined + 4 pinned per worker"),
    App("psycopg2", "wsgi_app_psycopg2:application", "psycopg2-example-",
        ("psycopg2", "psycogreen"), "a pool of 6 per worker"),
)}
PASS = Pass(tuple(APPS.values()), ENDPOINTS)


def missing(apps: list[str], known: dict[str, App] = APPS) -> list[str]:
    """Why the suite cannot run (each with what to install), or nothing."""
    reasons = []
    if shutil.which("wrk") is None:
        reasons.append(f"wrk not found: {WRK_INSTALL}")
    if importlib.util.find_spec("gunicorn") is None:
        reasons.append("gunicorn not installed: pip install gunicorn (or 'pgmux[bench]')")
    if not os.path.exists(CONFIG):
        reasons.append(f"{CONFIG} not found: run from a source checkout of pgmux")
    for name in apps:
        if not os.path.exists(known[name].config):
            reasons.append(f"{known[name].config} not found: run from a source checkout")
        absent = [m for m in known[name].modules if importlib.util.find_spec(m) is None]
        if absent:
            reasons.append(f"the {name} app needs {', '.join(absent)} (pip install "
                           "'pgmux[bench]')")
    return reasons


def dsn_via(dsn: str, host: str, port: int) -> str:
    """``dsn`` as a key=value string pointed at ``host:port`` (a delay proxy)."""
    from pgmux.io.dsn import parse_dsn

    settings = {k: v for k, v in parse_dsn(dsn).items() if k not in ("host", "hostaddr", "port")}
    settings.update(host=host, port=str(port))
    return " ".join(f"{key}='{_quote(value)}'" for key, value in settings.items())


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def seed_world(dsn: str) -> None:
    """Create and fill the example's `world` table with the example's own code."""
    import pgmux.client

    spec = importlib.util.spec_from_file_location("pgmux_bench_wsgi_app",
                                                  os.path.join(EXAMPLES, "wsgi_app.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    db = pgmux.client.Client(dsn, pipeline_size=0, pinned_size=1,
                             application_name="pgmux-bench-setup")
    try:
        module.seed(db)
    finally:
        db.close()


# -- gunicorn --------------------------------------------------------------------------------


class Gunicorn:
    """gunicorn serving ``app`` with the example config, on a free port."""

    def __init__(self, app: App, dsn: str):
        self.app = app
        self.dsn = dsn
        self.port = 0
        self._log = tempfile.NamedTemporaryFile("w+", suffix=".log")  # noqa: SIM115 (stop)
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Gunicorn:
        self.start()
        try:
            self.ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def stop(self) -> None:
        """Ask gunicorn to stop (``__exit__`` waits for it: several stop at once): a quick
        shutdown (SIGQUIT), which drops the requests still queued from the last window
        instead of serving them first."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGQUIT)

    def start(self) -> None:
        """Start gunicorn (``ready`` waits for it: several boot at once)."""
        env = {**os.environ, "PGMUX_DSN": self.dsn, **dict(self.app.env)}
        env.pop("DATABASE_URL", None)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", self.app.config, "--bind", "127.0.0.1:0",
             "--workers", str(WORKERS), "--log-level", "info", self.app.uri],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=EXAMPLES,
            start_new_session=True)  # a process group: its workers end with it

    def ready(self) -> None:
        """Wait until its workers have booted and it answers /health."""
        listening = re.compile(r"Listening at: http://127\.0\.0\.1:(\d+)")
        self.port = int(self._wait_for(lambda log: listening.search(log))[1])
        self._wait_for(lambda log: log.count("Booting worker with pid") >= WORKERS)
        self._wait_for_health()
        expected = self.app.log
        if expected is not None:  # what each worker says it runs on
            self._wait_for(lambda log: log.count(expected) >= WORKERS)

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
        process, self._process = self._process, None
        if process is not None:
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):  # a worker left behind, if any
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self._log.close()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def log_tail(self, chars: int = 1500) -> str:
        self._log.seek(0)
        return self._log.read()[-chars:].strip()

    def _wait_for(self, found_in: Callable[[str], Any]) -> Any:
        """What ``found_in(log)`` returns once true; RuntimeError if gunicorn exits first."""
        deadline = time.monotonic() + BOOT_TIMEOUT
        while time.monotonic() < deadline:
            self._log.seek(0)
            found = found_in(self._log.read())
            if found:
                return found
            if self._process is None or self._process.poll() is not None:
                break
            time.sleep(POLL)
        raise RuntimeError(f"gunicorn ({self.app.name} app) did not start:\n{self.log_tail()}")

    def _wait_for_health(self) -> None:
        deadline = time.monotonic() + BOOT_TIMEOUT
        while True:
            try:
                get_json(self.url("/health"))
                return
            except (OSError, ValueError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(POLL)

    def worker_pids(self) -> list[int]:
        return children(self._process.pid) if self._process is not None else []


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        if response.status != 200:
            raise ValueError(f"{url}: HTTP {response.status}")
        return json.loads(response.read())


def check_endpoints(server: Gunicorn, endpoints: dict[str, int | None] = ENDPOINTS) -> None:
    """Each endpoint answers 200 with as many rows as asked (else ValueError)."""
    for path, rows in endpoints.items():
        body = get_json(server.url(path))
        if rows is not None and len(body) != rows:
            raise ValueError(f"{server.app.name} {path}: {len(body)} rows, expected {rows}")


# -- wrk ------------------------------------------------------------------------------------------


def run_wrk(url: str, seconds: int, script: str,
            while_running: Callable[[], None] = lambda: None,
            connections: int = WRK_CONNECTIONS) -> dict[str, Any]:
    """wrk's figures for ``seconds`` of load on ``url`` from ``connections`` connections;
    ``while_running`` is called every POLL seconds meanwhile."""
    command = ["wrk", f"-t{WRK_THREADS}", f"-c{connections}", f"-d{seconds}s",
               "--timeout", "30s", "-s", script, url]
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True)
        while process.poll() is None:
            while_running()
            time.sleep(POLL)
        out.seek(0)
        text = out.read()
    found = re.search(r"^PGMUX_WRK (\{.*\})$", text, re.MULTILINE)
    if process.returncode != 0 or found is None:
        raise RuntimeError(f"wrk failed (exit {process.returncode}): {text[-500:].strip()}")
    return json.loads(found[1])


def http_result(app: App, endpoint: str, rtt: float, wrk: dict[str, Any], cpu: float | None,
                peak: int, server_cpu: float | None = None,
                connections: int = WRK_CONNECTIONS) -> dict[str, Any]:
    """One endpoint's figures from wrk's numbers (from ``connections`` connections), the
    workers' and the backends' CPU seconds and the connection peak."""
    seconds = wrk["duration_us"] / 1e6
    requests = wrk["requests"]
    errors = sum(wrk[k] for k in ("connect", "read", "write", "status", "timeout"))
    return {
        "app": app.name, "endpoint": endpoint, "rtt_ms": rtt, "connections": connections,
        "pgmux_implementation": implementation,  # the workers inherit this process's

        "workers": WORKERS, "server_connections": app.connections,
        "duration_s": round(seconds, 3), "requests": requests,
        "rps": round(requests / seconds, 1) if seconds else 0.0,
        "latency_ms": {key: round(wrk[f"{key}_us"] / 1000.0, 3)
                       for key in ("p50", "p90", "p99", "p999", "max", "mean")},
        "errors": errors, "non_2xx": wrk["status"],
        "app_cpu_us_per_request": per_operation(cpu, requests),
        "server_cpu_us_per_request": per_operation(server_cpu, requests),
        "peak_server_connections": peak,
    }


# -- the suite ------------------------------------------------------------------------------------


class ConnectionPeak:
    """The largest count of an app's server connections seen, over a direct connection."""

    SQL = ("SELECT count(*)::int FROM pg_stat_activity "
           "WHERE starts_with(application_name, $1)")
    PIDS = "SELECT pid FROM pg_stat_activity WHERE starts_with(application_name, $1)"
    IDLE = ("SELECT coalesce(extract(epoch FROM clock_timestamp() - max(query_start)), "
            "1e9)::float8 FROM pg_stat_activity WHERE starts_with(application_name, $1)")

    def __init__(self, dsn: str):
        import pgmux.client

        self.db = pgmux.client.Client(dsn, pipeline_size=1, pinned_size=0,
                                      application_name="pgmux-bench-sampler")
        self.peak = 0
        self.prefix = ""

    def reset(self, prefix: str) -> None:
        self.prefix, self.peak = prefix, 0

    def backends(self) -> list[int]:
        """The server process ids of the app's connections."""
        return [row[0] for row in self.db.query(self.PIDS, (self.prefix,))]

    def sample(self) -> None:
        try:
            self.peak = max(self.peak, int(self.db.fetchval(self.SQL, (self.prefix,)) or 0))
        except Exception:
            pass

    def wait_quiet(self, prefix: str, seconds: float) -> None:
        """Wait (DRAIN_TIMEOUT at most) until no connection of the app's has started a
        query for ``seconds``: it has served what an earlier window left queued."""
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while time.monotonic() < deadline:
            try:
                idle = float(self.db.fetchval(self.IDLE, (prefix,)))
            except Exception:
                return
            if idle >= seconds:
                return
            time.sleep(max(POLL, seconds - idle))

    def close(self) -> None:
        self.db.close(timeout=1.0)


@dataclass
class HttpRun:
    """What to run: apps x RTTs x endpoints, each ``warmup`` + ``duration`` seconds of wrk."""

    dsn: str
    apps: list[str]
    duration: float
    warmup: float

    def seconds(self) -> tuple[int, int]:
        """wrk's whole-second durations: (warm-up, measured); warm-up 0 means none."""
        return (max(1, round(self.warmup)) if self.warmup >= 0.5 else 0,
                max(1, round(self.duration)))


def run_rtt(run: HttpRun, rtt: float, route: dict[str, Any], progress: Any,
            results: list[dict[str, Any]], errors: list[str], apps: dict[str, App] = APPS,
            endpoints: dict[str, int | None] = ENDPOINTS) -> None:
    """Every endpoint of ``apps`` at one RTT (``route``: the delay proxy's host/port, if
    any); ``apps`` and ``endpoints``: another suite's (django_http's). See ``run_passes``."""
    run_passes(run, rtt, route, progress, [(Pass(tuple(apps.values()), endpoints), results)],
               errors)


def run_passes(run: HttpRun, rtt: float, route: dict[str, Any], progress: Any,
               passes: list[tuple[Pass, list[dict[str, Any]]]], errors: list[str]) -> None:
    """Each pass at one RTT, its figures into its list: the apps of every pass (those
    ``run.apps`` names) boot at once and serve at once; pass by pass, endpoint by endpoint,
    the pass's apps are measured back to back (an idle app costs nothing), so that load
    from elsewhere falls on them alike."""
    dsn = dsn_via(run.dsn, route["host"], route["port"]) if route else run.dsn
    apps = {app.name: app for chosen, _ in passes for app in chosen.apps
            if app.name in run.apps}
    sampler = ConnectionPeak(run.dsn)
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".lua") as script, \
                contextlib.ExitStack() as stack:
            script.write(WRK_SCRIPT)
            script.flush()
            booting: list[Gunicorn] = []
            for app in apps.values():  # they boot at once, and stop at once
                server = Gunicorn(app, dsn)
                stack.callback(server.__exit__)
                server.start()
                booting.append(server)
            stack.callback(_stop_all, booting)
            servers = {}
            for server in booting:
                served = {path: rows for chosen, _ in passes if server.app in chosen.apps
                          for path, rows in chosen.endpoints.items()}
                try:
                    server.ready()
                    check_endpoints(server, served)
                except Exception as exc:
                    errors.append(f"http {server.app.name} rtt={rtt:g}ms: "
                                  f"{type(exc).__name__}: {exc}")
                    continue
                servers[server.app.name] = (server, server.worker_pids())
            for chosen, results in passes:
                for endpoint in chosen.endpoints:
                    for app in chosen.apps:
                        if app.name in servers:
                            server, workers = servers[app.name]
                            _measure(run, server, workers, endpoint, rtt, script.name,
                                     sampler, progress, results, chosen.connections)
    finally:
        sampler.close()


def _stop_all(servers: list[Gunicorn]) -> None:
    for server in servers:
        server.stop()


def _measure(run: HttpRun, server: Gunicorn, workers: list[int], endpoint: str, rtt: float,
             script: str, sampler: ConnectionPeak, progress: Any,
             results: list[dict[str, Any]], connections: int = WRK_CONNECTIONS) -> None:
    """One endpoint of one app from wrk's ``connections``: its warm-up, then the measured
    window."""
    warmup, seconds = run.seconds()
    app = server.app
    progress.start(f"http {app.name} {endpoint} c={connections} rtt={rtt:g}ms")
    quiet = max(QUIET_SECONDS, 3 * rtt / 1000)
    sampler.wait_quiet(app.prefix, quiet)
    url = server.url(endpoint)
    if warmup:
        run_wrk(url, warmup, script, connections=connections)
        sampler.wait_quiet(app.prefix, quiet)  # what the warm-up left queued: served first
    sampler.reset(app.prefix)
    app_cpu, server_cpu = CpuWindow(workers).start(), CpuWindow(sampler.backends()).start()
    def while_running() -> None:
        sampler.sample()
        progress.tick()

    wrk = run_wrk(url, seconds, script, while_running, connections)
    results.append(http_result(app, endpoint, rtt, wrk, app_cpu.stop(), sampler.peak,
                               server_cpu.stop(), connections))
    progress.finish_case()
