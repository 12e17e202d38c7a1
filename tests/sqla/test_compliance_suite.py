"""SQLAlchemy's dialect compliance suite against postgresql+pgmux, in a pytest run of its own.

The suite needs SQLAlchemy's pytest plugin and its own configuration, so it runs as a
separate ``python -m pytest`` in tests/sqla/suite (the main run does not collect that
folder). Its PostgreSQL requirements come from SQLAlchemy's source distribution, which
``sqla.sdist`` downloads once (pip, from the package index) into a cache directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy

from sqla.sdist import sqlalchemy_sdist

SUITE_DIR = Path(__file__).resolve().parent / "suite"
DATABASE = "sqla_suite"
SUMMARY = re.compile(r"^=* ?(?P<counts>\d+ \w+(?:, \d+ \w+)*) in [\d.]+s", re.MULTILINE)
# Each connection holding session state (temporary tables, SET search_path) keeps a pinned
# connection while it sits in SQLAlchemy's pool (pool_size 5) and tests make engines of
# their own: more than the default two.
PINNED_SIZE = 8
MINIMUM_PASSED = 1850  # what the suite holds for PostgreSQL: a mass skip must not pass


def _counts(output: str) -> dict[str, int]:
    found = SUMMARY.findall(output)
    assert found, output[-3000:]
    counts = {}
    for part in found[-1].split(", "):
        number, _, what = part.partition(" ")
        counts[what.rstrip("s") if what.endswith("errors") else what] = int(number)
    return counts


def _fresh_database(pg) -> str:
    pg.admin(f"DROP DATABASE IF EXISTS {DATABASE}", dbname="postgres")
    pg.admin(f"CREATE DATABASE {DATABASE} ENCODING 'UTF8' TEMPLATE template0",
             dbname="postgres")
    pg.admin("CREATE SCHEMA test_schema; CREATE SCHEMA test_schema_2; "
             f"ALTER DATABASE {DATABASE} SET default_text_search_config = 'pg_catalog.english'",
             dbname=DATABASE)
    url = pg.dsn_for(dbname=DATABASE, pinned_size=PINNED_SIZE)
    return url.replace("postgresql://", "postgresql+pgmux://", 1)


# Longer than the run's default per-test timeout: the download (600 s at most) and the
# suite's own run (900 s at most) have bounds of their own. About a minute: a long variant,
# run by .ci/run (whose SQLAlchemy backend suite step covers the dialect more widely still).
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_sqlalchemy_dialect_compliance_suite(pg):
    sdist = sqlalchemy_sdist(sqlalchemy.__version__)
    their_suite = (sdist / "test" / "dialect" / "test_suite.py").read_text()
    assert "from sqlalchemy.testing.suite import *" in their_suite  # what suite/ runs
    url = _fresh_database(pg)
    env = {**os.environ, "PGMUX_SQLA_SDIST": str(sdist)}
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "test_suite.py", "--dburi", url, "-q"],
        cwd=SUITE_DIR, env=env, capture_output=True, text=True, timeout=900)
    output = done.stdout + done.stderr
    counts = _counts(output)
    print(f"SQLAlchemy {sqlalchemy.__version__} dialect suite: {counts}")
    failures = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))]
    assert done.returncode == 0 and not failures, "\n".join(failures[:50]) or output[-3000:]
    assert counts.get("failed", 0) == 0 and counts.get("error", 0) == 0, counts
    assert counts["passed"] >= MINIMUM_PASSED, counts
