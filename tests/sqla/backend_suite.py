"""SQLAlchemy's backend suite against postgresql+pgmux and, for comparison, postgresql+psycopg.

A step of .ci/run of its own (not the main pytest run: it takes minutes per driver):

    python tests/sqla/backend_suite.py [--drivers pgmux,psycopg] [--timeout 60]

It starts a throwaway PostgreSQL (two-phase commit allowed, hstore/citext/btree_gist
available), fetches SQLAlchemy's source distribution (``support.sqla``), and for each
driver runs ``python -s -m pytest test -m "backend and not memory_intensive and not
timing_intensive"`` from a scratch copy of it (the dialect suite, test/dialect/test_suite.py,
excluded: tests/sqla/test_compliance_suite.py runs it), on a fresh database per driver, each
test bounded by ``--timeout`` seconds (pytest-timeout). pgmux runs with
``backend_requirements.Requirements`` (named in the copy's test.cfg: SQLAlchemy's plugin
reads its requirements class from there, whatever --requirements says) and
``backend_plugin``; psycopg with SQLAlchemy's own requirements. It prints each driver's
counts and wall time, and exits non-zero unless pgmux had no failure, no error and no
timeout, and every test psycopg passed passed for pgmux too, or is one of those
backend_plugin names with its reason (psycopg's own API, pgmux's deliberate differences).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]  # tests/: support.*; tests/sqla: backend_plugin

import backend_plugin  # noqa: E402
import sqlalchemy  # noqa: E402

from pgmux.tooling.embedded import EmbeddedPostgres, find_postgres_bin  # noqa: E402
from sqla.sdist import sqlalchemy_sdist  # noqa: E402

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
    outcomes: dict[str, str] = field(default_factory=dict)  # test name -> passed/skipped/...

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
        command += ["--junitxml", str(Path(scratch) / "junit.xml")]
        done = subprocess.run(command, cwd=where, env=env, capture_output=True, text=True)
        outcomes = read_outcomes(Path(scratch) / "junit.xml")
    run = Run(driver, done.returncode, time.monotonic() - started, outcomes=outcomes)
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


_CONFIG_SUFFIX = re.compile(r"_postgresql\+\w+?_\d+_\d+$")  # the class name's database


def read_outcomes(junit: Path) -> dict[str, str]:
    """Each test's outcome by its name as backend_plugin writes it (file::Class::test[..])."""
    if not junit.exists():
        return {}
    found = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        module, _, cls = case.get("classname", "").rpartition(".")
        name = f"{module.replace('.', '/')}.py::{_CONFIG_SUFFIX.sub('', cls)}::{case.get('name')}"
        kinds = {child.tag for child in case}
        found[name] = ("failed" if kinds & {"failure", "error"} else
                       "skipped" if "skipped" in kinds else "passed")
    return found


def why_not_for_pgmux(name: str) -> str | None:
    """The reason backend_plugin gives for pgmux not passing this test, if any."""
    function, _, parameters = name.partition("[")
    for table in (backend_plugin.SKIPPED, backend_plugin.NOT_FOR_PGMUX):
        if function in table:
            return table[function]
    for (pattern, within), reason in backend_plugin.PSYCOPG_ONLY.items():
        if fnmatch.fnmatchcase(function, pattern) and within in parameters:
            return reason
    return None


def lost_tests(mine: Run, theirs: Run) -> tuple[dict[str, list[str]], list[str]]:
    """Tests psycopg passed that pgmux skipped or did not run: by the reason given, and
    those without one."""
    accounted: dict[str, list[str]] = {}
    unaccounted = []
    for name, outcome in sorted(theirs.outcomes.items()):
        if outcome != "passed" or mine.outcomes.get(name) in ("passed", "failed"):
            continue  # (pgmux's failures are reported as such)
        reason = why_not_for_pgmux(name)
        if reason is None:
            unaccounted.append(f"{name} ({mine.outcomes.get(name, 'not run')})")
        else:
            accounted.setdefault(reason, []).append(name)
    return accounted, unaccounted


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
        accounted, unaccounted = lost_tests(mine, theirs)
        gained = sum(1 for name, outcome in mine.outcomes.items()
                     if outcome == "passed" and theirs.outcomes.get(name) != "passed")
        print(f"pgmux ran {mine.ran} tests (psycopg {theirs.ran}) and passed "
              f"{mine.counts.get('passed', 0)} (psycopg {theirs.counts.get('passed', 0)}): "
              f"{gained} passed for pgmux only; psycopg's passes pgmux has not, by reason:")
        for reason, names in accounted.items():
            print(f"  {len(names)}: {reason}")
        reasons += [f"pgmux did not pass, without a reason: {name}" for name in unaccounted]
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
