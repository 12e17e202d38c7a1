"""SQLAlchemy's own performance examples (``examples/performance`` of its source
distribution): ``short_selects`` and ``single_inserts``, single-threaded, on
``postgresql+pgmux`` against ``postgresql+psycopg2``, alternating.

Theory of operation. SQLAlchemy's source distribution (the installed version's) is
downloaded once into ``$PGMUX_CACHE_DIR`` (default ``~/.cache/pgmux``), where the test
suites' runners keep it too. Each run is a process that runs one suite through the
examples' own ``Profiler.main()`` (``--dburl URL --num N``: its timing and its report
lines), against a database of the bench's own (the suites drop and create their tables).
One difference: a suite's setup runs once per process rather than before every test.
``short_selects`` leaves each test's ORM Session open; the next test's setup drops the
table from a new Engine and, on psycopg2, waits forever for that Session's transaction
(pgmux does not pin a transaction for its reads, so it does not hang). The pairs run A B
A B (pgmux, then psycopg2, per suite); each test's ratio is psycopg2's time over
pgmux's, per pair, and its median is judged.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

SUITES = ("short_selects", "single_inserts")
DRIVERS = ("pgmux", "psycopg2")
DATABASE = "pgmux_bench_sqlalchemy"
CACHE_ENV = "PGMUX_CACHE_DIR"
MARKER = "examples/performance/__init__.py"
RUN_TIMEOUT = 900.0
REPORT = re.compile(r"^(test_\w+) : (.*) \((\d+) iterations\); total time ([\d.]+) sec",
                     re.MULTILINE)
# The measured process: the suite's setup runs once (see the module's docstring), then the
# examples' own command line runs every test of the suite.
BOOT = """\
import sys
from examples.performance import Profiler
__import__("examples.performance." + sys.argv[1])
setup, done = Profiler._setup, []

def once(dburl, echo, num):
    if not done:
        setup(dburl, echo, num)
        done.append(True)
    import gc
    gc.collect()  # what the last test left open is closed before the next is timed

Profiler._setup = staticmethod(once)
sys.argv = ["python -m examples.performance", *sys.argv[2:]]
Profiler.main()
"""


def cache_dir() -> Path:
    """$PGMUX_CACHE_DIR, else ~/.cache/pgmux."""
    path = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "pgmux")
    path.mkdir(parents=True, exist_ok=True)
    return path


def source(version: str) -> Path:
    """The root of SQLAlchemy ``version``'s source distribution with its examples, fetched
    with pip the first time. ``--no-binary sqlalchemy``: its build requirements come as
    wheels (building Cython from source, as ``:all:`` would, takes minutes)."""
    root = cache_dir() / f"sqlalchemy-{version}"
    if (root / MARKER).exists():
        return root
    with tempfile.TemporaryDirectory(dir=cache_dir()) as scratch:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary",
                        "sqlalchemy", "--no-deps", f"sqlalchemy=={version}", "--dest", scratch],
                       check=True, timeout=900, capture_output=True)
        archive = next(Path(scratch).glob("sqlalchemy-*.tar.gz"))
        prefix = f"sqlalchemy-{version}/"
        with tarfile.open(archive) as tar:
            wanted = [m for m in tar.getmembers()
                      if m.name.removeprefix(prefix).startswith("examples/")]
            tar.extractall(scratch, members=wanted, filter="data")
        root.mkdir(exist_ok=True)
        if not (root / "examples").exists():
            os.replace(Path(scratch) / prefix / "examples", root / "examples")
    if not (root / MARKER).exists():
        raise RuntimeError(f"{MARKER} not found in SQLAlchemy {version}'s source distribution")
    return root


def missing() -> list[str]:
    """What the comparison needs that is not installed."""
    import importlib.util

    return [f"{name} (pip install 'pgmux[bench]')" for name in ("sqlalchemy", "psycopg2")
            if importlib.util.find_spec(name) is None]


def url(dsn: str, driver: str) -> tuple[str, dict[str, str]]:
    """(the database URL for ``driver``, environment variables: the password apart)."""
    from pgmux.io.dsn import parse_dsn

    settings = parse_dsn(dsn)
    host, port = settings.get("host", "localhost"), settings.get("port", "5432")
    user, password = settings.get("user", ""), settings.get("password")
    address = (f"postgresql+{driver}://{user}@/{DATABASE}?host={host}&port={port}"
               if host.startswith("/") else
               f"postgresql+{driver}://{user}@{host}:{port}/{DATABASE}")
    return address, {"PGPASSWORD": password} if password else {}


def create_database(dsn: str) -> None:
    """A database of the bench's own for the suites' tables, created if missing."""
    import pgmux.client

    with pgmux.client.Client(dsn, pipeline_size=1, pinned_size=0, guard="off",
                             application_name="pgmux-bench-setup") as db:
        if not db.fetchval("SELECT count(*) FROM pg_database WHERE datname = $1", [DATABASE]):
            db.execute(f"CREATE DATABASE {DATABASE}")


def run_suite(root: Path, suite: str, driver: str, dsn: str, num: int) -> dict[str, float]:
    """One process: every test of ``suite`` on ``driver``; test -> seconds."""
    address, extra = url(dsn, driver)
    done = subprocess.run([sys.executable, "-c", BOOT, suite, "--dburl", address, "--num",
                           str(num)], cwd=root, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, env={**os.environ, **extra})
    found = {name: float(seconds) for name, _, _, seconds in REPORT.findall(done.stdout)}
    if done.returncode != 0 or not found:
        raise RuntimeError(f"{suite} on {driver} failed (exit {done.returncode}): "
                           f"{(done.stderr or done.stdout)[-800:].strip()}")
    return found


def measure(dsn: str, num: int, pairs: int,
            progress: Callable[[int, int, str], None] | None = None) -> list[dict[str, Any]]:
    """Per suite and test: each driver's seconds per pair, the pairs' ratios (psycopg2's
    time over pgmux's) and their median; a suite that could not run gives one row with
    ``error``."""
    import sqlalchemy

    root = source(sqlalchemy.__version__)
    create_database(dsn)
    out: list[dict[str, Any]] = []
    steps = len(SUITES) * pairs * len(DRIVERS)
    for index, suite in enumerate(SUITES):
        times: dict[str, list[dict[str, float]]] = {driver: [] for driver in DRIVERS}
        try:
            for pair in range(pairs):
                for turn, driver in enumerate(DRIVERS):
                    if progress is not None:
                        step = (index * pairs + pair) * len(DRIVERS) + turn
                        progress(step, steps, f"{suite} {driver} (pair {pair + 1})")
                    times[driver].append(run_suite(root, suite, driver, dsn, num))
        except (RuntimeError, subprocess.SubprocessError) as exc:
            out.append({"suite": suite, "test": None, "error": str(exc)[:600]})
            continue
        for test in times["pgmux"][0]:
            mine = [t[test] for t in times["pgmux"]]
            theirs = [t.get(test) for t in times["psycopg2"]]
            ratios = [b / a for a, b in zip(mine, theirs, strict=True) if a and b]
            out.append({"suite": suite, "test": test, "num": num, "pgmux_s": mine,
                        "psycopg2_s": theirs, "ratios": [round(r, 3) for r in ratios],
                        "ratio": round(statistics.median(ratios), 3) if ratios else None})
    if progress is not None:
        progress(steps, steps, "done")
    return out
