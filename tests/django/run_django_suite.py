"""Django's own test suite on pgmux.contrib.django, against Django's psycopg2 backend as control.

    python tests/django/run_django_suite.py             # the required apps (CI)
    python tests/django/run_django_suite.py --apps expressions,schema --report-only

Downloads Django's source distribution for the installed version once (into
$PGMUX_CACHE_DIR, as tests/test_sqlalchemy_suite.py does for SQLAlchemy's), starts a
throwaway PostgreSQL, and runs ``tests/runtests.py --parallel=1`` twice at once, each on
databases of its own, under ``gevent.monkey.patch_all()`` (suite/pgmux_suite_boot.py):

* control: Django's PostgreSQL backend on psycopg2 with psycogreen;
* pgmux: pgmux.contrib.django, with the tests of django_suite_skips.txt skipped.

Every test's outcome is recorded (suite/pgmux_suite_runner.py). The run fails when a test
fails (or errors, or passes unexpectedly) on pgmux but not on the control, or when either
run ran too little to mean anything; the table printed gives the counts per app.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: support.*
sys.path.insert(0, str(HERE.parent.parent))  # the checkout: pgmux

import django  # noqa: E402
from support.sdist import unpacked_sdist  # noqa: E402

from pgmux.tooling.embedded import EmbeddedPostgres  # noqa: E402

REQUIRED_APPS = ("backends", "basic", "bulk_create", "db_utils", "delete", "get_or_create",
                 "lookup", "model_fields", "prefetch_related", "queries", "raw_query",
                 "select_for_update", "timezones", "transaction_hooks", "transactions",
                 "update")
SKIPS = HERE / "django_suite_skips.txt"
SUITE = HERE / "suite"
BAD = ("fail", "error", "xpass")
MAX_SKIPS = 30
MIN_PASSED_SHARE = 0.8  # of the tests a run recorded: less means it did not really run
RUN_TIMEOUT = 3600
# lock_timeout: some of Django's async tests write through another greenlet's connection a
# row the test's own transaction holds, and wait for it forever under gevent (on either
# backend): such a test fails after 30 s instead.
SERVER_SETTINGS = {"max_connections": "400", "max_locks_per_transaction": "256",
                   "lock_timeout": "30s"}


def django_tests_dir() -> Path:
    """tests/ of the installed Django's source distribution (downloaded once)."""
    version = django.__version__
    return unpacked_sdist("django", version, ("tests/",), ("tests/runtests.py",)) / "tests"


def read_skips() -> dict[str, str]:
    sys.path.insert(0, str(SUITE))
    from pgmux_suite_runner import read_skips as parse

    return parse(str(SKIPS))


def start_run(backend: str, tests: Path, apps: list[str], server: EmbeddedPostgres,
              scratch: Path) -> tuple[subprocess.Popen, Path, Path]:
    results, log = scratch / f"{backend}.json", scratch / f"{backend}.log"
    env = {**os.environ, "PGMUX_SUITE_BACKEND": backend, "PGMUX_SUITE_RESULTS": str(results),
           "PGMUX_SUITE_HOST": "127.0.0.1", "PGMUX_SUITE_PORT": str(server.port),
           "PGMUX_SUITE_USER": server.superuser, "PGMUX_SUITE_DB_PREFIX": f"suite_{backend}",
           "PYTHONPATH": os.pathsep.join([str(SUITE), str(HERE.parent.parent)]),
           "DJANGO_ALLOW_ASYNC_UNSAFE": "1"}
    env.pop("PGMUX_SUITE_SKIPS", None)
    if backend == "pgmux":
        env["PGMUX_SUITE_SKIPS"] = str(SKIPS)
    command = [sys.executable, str(SUITE / "pgmux_suite_boot.py"), str(tests),
               "--settings=pgmux_suite_settings", "--parallel=1", "--noinput", *apps]
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    return process, results, log


def finish_run(process: subprocess.Popen, results: Path, log: Path) -> dict[str, str]:
    try:
        process.wait(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if not results.exists():
        tail = log.read_text()[-3000:]
        raise SystemExit(f"{log.stem} run recorded nothing (exit {process.returncode}):\n{tail}")
    return json.loads(results.read_text())


def app_of(test_id: str) -> str:
    """The app of a test id ("basic.tests.T.test_x"; a class fixture's "setUpClass (app.T)")."""
    if " (" in test_id:
        test_id = test_id.split(" (", 1)[1]
    return test_id.split(".")[0]


def table(pgmux: dict[str, str], control: dict[str, str], regressions: set[str]) -> str:
    """Per app: pgmux's and the control's outcome counts, and the pgmux-only failures."""
    kinds = ("pass", "fail", "error", "skip", "xfail", "xpass")
    header = (f"{'app':<20} {'tests':>6} | pgmux " + " ".join(f"{k:>5}" for k in kinds)
              + " | control " + " ".join(f"{k:>5}" for k in kinds) + " | pgmux-only")
    lines = [header, "-" * len(header)]
    apps = sorted({app_of(t) for t in pgmux} | {app_of(t) for t in control})
    for app in [*apps, "TOTAL"]:
        mine = Counter(v for t, v in pgmux.items() if app in ("TOTAL", app_of(t)))
        theirs = Counter(v for t, v in control.items() if app in ("TOTAL", app_of(t)))
        only = sum(1 for t in regressions if app in ("TOTAL", app_of(t)))
        lines.append(f"{app:<20} {sum(mine.values()):>6} |       "
                     + " ".join(f"{mine[k]:>5}" for k in kinds) + " |         "
                     + " ".join(f"{theirs[k]:>5}" for k in kinds) + f" | {only:>10}")
    return "\n".join(lines)


def verdict(pgmux: dict[str, str], control: dict[str, str], skips: dict[str, str],
            apps: list[str]) -> list[str]:
    """Why the run fails: pgmux-only failures, a run that barely ran, a long skip list."""
    problems = []
    regressions = sorted(t for t, v in pgmux.items()
                         if v in BAD and control.get(t) not in BAD and t not in skips)
    problems += [f"fails on pgmux only: {t} ({pgmux[t]})" for t in regressions]
    for name, run in (("pgmux", pgmux), ("control", control)):
        counts = Counter(run.values())
        ran = sum(counts[k] for k in ("pass", "fail", "error", "xfail", "xpass"))
        if ran == 0 or counts["pass"] < MIN_PASSED_SHARE * ran:
            problems.append(f"the {name} run passed {counts['pass']} of {ran} tests: it did "
                            "not really run")
        missing = [app for app in apps if not any(app_of(t) == app.split(".")[0] for t in run)]
        problems += [f"the {name} run has no test of {app}" for app in missing]
    if len(skips) > MAX_SKIPS:
        problems.append(f"the skip list has {len(skips)} entries (at most {MAX_SKIPS})")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", help="comma-separated test labels (default: the apps CI requires)")
    parser.add_argument("--report-only", action="store_true",
                        help="print the counts and pgmux-only failures, exit 0")
    parser.add_argument("--keep", metavar="DIR", help="keep the logs and results here")
    args = parser.parse_args(argv)
    apps = args.apps.split(",") if args.apps else list(REQUIRED_APPS)
    started = time.monotonic()
    tests = django_tests_dir()
    skips = read_skips()
    scratch = Path(args.keep or tempfile.mkdtemp(prefix="pgmux-django-suite-"))
    scratch.mkdir(parents=True, exist_ok=True)
    with EmbeddedPostgres(settings=SERVER_SETTINGS) as server:
        runs = {backend: start_run(backend, tests, apps, server, scratch)
                for backend in ("control", "pgmux")}
        control, pgmux = (finish_run(*runs[backend]) for backend in ("control", "pgmux"))
    problems = verdict(pgmux, control, skips, apps)
    regressions = {t for t, v in pgmux.items() if v in BAD and control.get(t) not in BAD
                   and t not in skips}
    print(f"Django {django.__version__}'s suite, {', '.join(apps)}: pgmux.contrib.django "
          "against Django's psycopg2 backend + psycogreen (the control), both under "
          "gevent.monkey.patch_all()")
    print(table(pgmux, control, regressions))
    applied = sorted(t for t in skips if pgmux.get(t) == "skip")
    print(f"\nskip list: {len(skips)} entries ({SKIPS.name}), {len(applied)} applied here")
    both = sorted(t for t, v in pgmux.items() if v in BAD and control.get(t) in BAD)
    print(f"failing on both: {len(both)}" + "".join(f"\n  {t}" for t in both))
    print(f"logs and results: {scratch}; wall time {time.monotonic() - started:.0f} s")
    for problem in problems:
        print(f"PROBLEM: {problem}")
    if args.report_only:
        return 0
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
