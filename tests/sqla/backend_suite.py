"""SQLAlchemy's backend suite against postgresql+pgmux and, for comparison, postgresql+psycopg.

A step of .ci/run of its own (not the main pytest run: it takes minutes per driver):

    python tests/sqla/backend_suite.py [--drivers pgmux,psycopg] [--timeout 60]

It starts a throwaway PostgreSQL (two-phase commit allowed, hstore/citext/btree_gist
available), fetches SQLAlchemy's source distribution (``support.sqla``), and for each
driver runs ``python -s -m pytest test -m "backend and not memory_intensive and not
timing_intensive"`` from a scratch copy of it (the dialect suite, test/dialect/test_suite.py,
excluded: the main run has it), on a fresh database per driver, each test bounded by
``--timeout`` seconds (pytest-timeout). pgmux runs with
``backend_requirements.Requirements`` (named in the copy's test.cfg: SQLAlchemy's plugin
reads its requirements class from there, whatever --requirements says) and
``backend_plugin``; psycopg with SQLAlchemy's own requirements. It prints each driver's
counts and wall time, and exits non-zero unless pgmux had no failure, no error and no
timeout, and collected and passed at least as many tests as psycopg.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: support.*

import sqlalchemy  # noqa: E402
from support.sqla import sqlalchemy_sdist  # noqa: E402

from pgmux.tooling.embedded import EmbeddedPostgres, find_postgres_bin  # noqa: E402

MARKERS = "backend and not memory_intensive and not timing_intensive"
PASSWORD = "sqla-suite"  # some tests need one in the URL; pg_hba trusts local connections
# Connections holding session state (temporary tables, SET) keep a pinned connection while
# they sit in SQLAlchemy's pool, and tests open engines of their own: more than two.
PINNED_SIZE = 8
SUMMARY = re.compile(r"^=+ (?P<counts>\d+ \w+(?:, \d+ \w+)*) in [\d.]+s", re.MULTILINE)
SELECTED = re.compile(r"collected (\d+) items(?:[^\n]*?/ (\d+) selected)?")
REQUIREMENTS_CFG = "[sqla_testing]\nrequirement_cls = backend_requirements:Requirements\n"
DATABASE_SETUP = (
    "CREATE SCHEMA test_schema; CREATE SCHEMA test_schema_2; "
    "CREATE EXTENSION hstore; CREATE EXTENSION citext; CREATE EXTENSION btree_gist; "
    "CREATE COLLATION \"en_US\" (provider = icu, locale = 'en-US'); "
    "ALTER DATABASE {db} SET default_text_search_config = 'pg_catalog.english'")


@dataclass
class Run:
    driver: str
    returncode: int
    seconds: float
    selected: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # FAILED / ERROR / timeout lines

    @property
    def ran(self) -> int:
        return sum(self.counts.get(k, 0) for k in ("passed", "failed", "skipped", "error",
                                                   "xfailed", "xpassed"))

    def line(self) -> str:
        counts = ", ".join(f"{n} {k}" for k, n in sorted(self.counts.items()))
        return (f"postgresql+{self.driver}: {self.selected} selected, {self.ran} run: {counts}"
                f" in {self.seconds:.0f} s")


def start_server() -> EmbeddedPostgres:
    bin_dir, _ = find_postgres_bin()
    server = EmbeddedPostgres(bin_dir=bin_dir, settings={
        "max_prepared_transactions": "20", "max_connections": "300"})
    server.start()
    server.psql(f"ALTER ROLE {server.superuser} PASSWORD '{PASSWORD}'")
    return server


def fresh_database(server: EmbeddedPostgres, name: str) -> None:
    server.psql(f"DROP DATABASE IF EXISTS {name}")
    server.psql(f"CREATE DATABASE {name} ENCODING 'UTF8' TEMPLATE template0")
    server.psql(DATABASE_SETUP.format(db=name), dbname=name)


def url_for(server: EmbeddedPostgres, driver: str, database: str) -> str:
    url = (f"postgresql+{driver}://{server.superuser}:{PASSWORD}@127.0.0.1:{server.port}"
           f"/{database}")
    return url + (f"?pinned_size={PINNED_SIZE}" if driver == "pgmux" else "")


def run_suite(sdist: Path, driver: str, url: str, timeout: int, extra: list[str]) -> Run:
    command = [sys.executable, "-s", "-m", "pytest", "test", "--dburi", url, "-m", MARKERS,
               "--ignore", "test/dialect/test_suite.py", "-p", "no:cacheprovider",
               "--maxfail=100000", "-p", "timeout", "--timeout", str(timeout), "-q",
               "-o", "console_output_style=classic", "-rfE", *extra]
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}
    if driver == "pgmux":
        command += ["-p", "backend_plugin"]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"sqla-{driver}-") as scratch:
        where = Path(scratch) / sdist.name
        shutil.copytree(sdist, where)
        if driver == "pgmux":
            (where / "test.cfg").write_text(REQUIREMENTS_CFG)
        done = subprocess.run(command, cwd=where, env=env, capture_output=True, text=True)
    run = Run(driver, done.returncode, time.monotonic() - started)
    output = done.stdout + done.stderr
    log = sdist.parent / f"sqlalchemy-backend-{driver}.log"
    log.write_text(output)
    selected = SELECTED.search(output)
    if selected:
        run.selected = int(selected.group(2) or selected.group(1))
    found = SUMMARY.findall(output)
    for part in (found[-1].split(", ") if found else ()):
        number, _, what = part.partition(" ")
        run.counts["error" if what.startswith("error") else what] = int(number)
    run.problems = [line for line in output.splitlines()
                    if line.startswith(("FAILED", "ERROR")) or "Timeout >" in line]
    if not found:
        run.problems.append(f"no summary line; the end of the output:\n{output[-3000:]}")
    print(f"{run.line()} (log: {log})", flush=True)
    return run


def acceptance(runs: dict[str, Run]) -> list[str]:
    """Why the pgmux run does not pass (empty: it passes)."""
    mine = runs.get("pgmux")
    if mine is None:
        return []
    reasons = [f"pgmux: {problem}" for problem in mine.problems[:100]]
    if mine.returncode not in (0,) and not reasons:
        reasons.append(f"pgmux: pytest exited with {mine.returncode}")
    theirs = runs.get("psycopg")
    if theirs is not None:
        if mine.ran < theirs.ran:  # (pytest's "selected" counts classes SQLAlchemy's
            # plugin has not yet made per database: not the tests that run)
            reasons.append(f"pgmux collected fewer tests than psycopg ({mine.ran} run, "
                           f"psycopg {theirs.ran})")
        if mine.counts.get("passed", 0) < theirs.counts.get("passed", 0):
            reasons.append(f"pgmux passed fewer tests than psycopg ({mine.counts.get('passed', 0)}"
                           f" < {theirs.counts.get('passed', 0)})")
    return reasons


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drivers", default="pgmux,psycopg")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per test")
    parser.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    args = parser.parse_args(argv)
    sdist = sqlalchemy_sdist(sqlalchemy.__version__)
    print(f"SQLAlchemy {sqlalchemy.__version__} backend suite from {sdist}", flush=True)
    server = start_server()
    runs: dict[str, Run] = {}
    try:
        for driver in args.drivers.split(","):
            database = f"sqla_{driver}"
            fresh_database(server, database)
            runs[driver] = run_suite(sdist, driver, url_for(server, driver, database),
                                     args.timeout, args.pytest_args)
    finally:
        server.stop()
    for run in runs.values():
        print(run.line())
    reasons = acceptance(runs)
    for reason in reasons:
        print(reason)
    return 1 if reasons else 0


if __name__ == "__main__":
    sys.exit(main())
