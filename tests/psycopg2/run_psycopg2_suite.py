"""psycopg2's own test suite on pgmux.psycopg2 (through register(), under gevent).

    python tests/psycopg2/run_psycopg2_suite.py            # the modules below (CI)
    python tests/psycopg2/run_psycopg2_suite.py --modules test_cursor --report-only
    python tests/psycopg2/run_psycopg2_suite.py --implementation real   # psycopg2 itself,
        # green (its wait_select callback: what psycogreen installs), for comparison

Downloads psycopg2's source distribution (its tests/) once into $PGMUX_CACHE_DIR (default
~/.cache/pgmux), starts a throwaway PostgreSQL with a ``psycopg2_test`` database, points
psycopg2's test configuration (``PSYCOPG2_TESTDB*``) at it and runs the application-facing
modules under ``gevent.monkey.patch_all()`` (suite_boot.py). The run fails on any failure
or error that psycopg2_suite_failures.txt does not list (each entry says why a multiplexed
handle differs there), and reports the listed entries that pass now.

psycopg2 itself (2.9, green through its wait_select callback, the same modules) passes all
of them here but test_connection's test_pgconn_ptr (ctypes finds no libpq of the one
psycopg2-binary bundles), with its 18 COPY tests skipped in green mode.

Out of scope: psycopg2's modules about its C internals and libpq's own modes,
test_async (asynchronous connections), test_green (psycopg2's wait callbacks),
test_lobject (large objects), test_replication (replication connections), test_bug*
(reference-count and garbage-collection checks of the C extension), test_ipaddress
(runs in test_types_extras' terms only through register_ipaddress, covered there).
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

from support.sdist import unpacked_sdist  # noqa: E402

from pgmux.tooling.embedded import EmbeddedPostgres  # noqa: E402

VERSION = "2.9.10"
MODULES = ("test_connection", "test_cursor", "test_transaction", "test_with",
           "test_extras_dictcursor", "test_fast_executemany", "test_sql", "test_dates",
           "test_types_basic", "test_types_extras", "test_errors", "test_errcodes",
           "test_quote", "test_module", "test_psycopg2_dbapi20", "test_copy", "test_cancel",
           "test_notify")
FAILURES = HERE / "psycopg2_suite_failures.txt"
# Tests that cannot run under gevent with either implementation: skipped in both runs.
GEVENT_SKIPS = {
    "tests.test_connection.ConnectionTests.test_commit_concurrency":
        "a thread that calls commit() in a loop with nothing to commit never yields to the "
        "other greenlets under gevent (psycopg2 itself hangs the same way)",
}
BAD = ("fail", "error", "xpass")
RUN_TIMEOUT = 3600
SERVER_SETTINGS = {"max_connections": "200", "max_prepared_transactions": "10"}


def suite_root() -> Path:
    """The unpacked source distribution (tests/ only), downloaded once."""
    return unpacked_sdist("psycopg2", VERSION, ("tests/",), ("tests/testutils.py",))


def read_list(path: Path) -> dict[str, str]:
    """The reviewed failures: ``test id  # reason`` per line."""
    listed: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        test, _, reason = line.partition("#")
        if not reason.strip():
            raise SystemExit(f"{path.name}: {test.strip()} has no reason")
        listed[test.strip()] = reason.strip()
    return listed


def run(implementation: str, modules: list[str], server: EmbeddedPostgres,
        scratch: Path) -> dict:
    results, log = scratch / f"{implementation}.json", scratch / f"{implementation}.log"
    env = {**os.environ, "PSYCOPG2_TESTDB": "psycopg2_test",
           "PSYCOPG2_TESTDB_HOST": "127.0.0.1", "PSYCOPG2_TESTDB_PORT": str(server.port),
           "PSYCOPG2_TESTDB_USER": server.superuser,
           "PGMUX_SUITE_SKIPS": json.dumps(GEVENT_SKIPS)}
    for name in ("PSYCOPG2_TEST_GREEN", "PSYCOPG2_TEST_FAST", "PSYCOPG2_TEST_REPL_DSN",
                 "PSYCOPG2_TESTDB_PASSWORD", "PGPASSWORD"):
        env.pop(name, None)
    if implementation == "real":  # psycopg2 waits through select() (as psycogreen's does)
        env["PSYCOPG2_TEST_GREEN"] = "1"
    command = [sys.executable, str(HERE / "suite_boot.py"), str(suite_root()),
               implementation, str(results), *modules]
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                   cwd=str(scratch))
        try:
            process.wait(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if not results.exists():
        raise SystemExit(f"the {implementation} run recorded nothing "
                         f"(exit {process.returncode}):\n{log.read_text()[-4000:]}")
    return json.loads(results.read_text())


def table(outcomes: dict[str, str], listed: dict[str, str]) -> str:
    kinds = ("pass", "fail", "error", "skip")
    header = f"{'module':<26} {'tests':>6} " + " ".join(f"{k:>6}" for k in kinds) + \
        f" {'listed':>7}"
    lines = [header, "-" * len(header)]
    modules = sorted({t.split(".")[1] for t in outcomes})
    for module in [*modules, "TOTAL"]:
        mine = Counter(v for t, v in outcomes.items() if module in ("TOTAL", t.split(".")[1]))
        listed_here = sum(1 for t in listed if module in ("TOTAL", t.split(".")[1])
                          and outcomes.get(t) in BAD)
        lines.append(f"{module:<26} {sum(mine.values()):>6} "
                     + " ".join(f"{mine[k]:>6}" for k in kinds) + f" {listed_here:>7}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", help="comma-separated test modules (default: all above)")
    parser.add_argument("--implementation", choices=("pgmux", "real"), default="pgmux")
    parser.add_argument("--report-only", action="store_true", help="report, exit 0")
    parser.add_argument("--keep", metavar="DIR", help="keep the log and results here")
    args = parser.parse_args(argv)
    modules = args.modules.split(",") if args.modules else list(MODULES)
    listed = read_list(FAILURES) if args.implementation == "pgmux" else {}
    scratch = Path(args.keep or tempfile.mkdtemp(prefix="pgmux-psycopg2-suite-"))
    scratch.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with EmbeddedPostgres(settings=SERVER_SETTINGS) as server:
        server.psql("CREATE DATABASE psycopg2_test")
        # psycopg2's hstore tests skip without the extension (Debian's server has it)
        server.psql("CREATE EXTENSION IF NOT EXISTS hstore", dbname="psycopg2_test")
        data = run(args.implementation, modules, server, scratch)
    outcomes: dict[str, str] = data["outcomes"]
    unexpected = sorted(t for t, v in outcomes.items() if v in BAD and t not in listed)
    now_pass = sorted(t for t in listed if outcomes.get(t) == "pass")
    print(f"psycopg2 {VERSION}'s suite on "
          f"{'pgmux.psycopg2 (register(), gevent)' if args.implementation == 'pgmux' else 'psycopg2 itself (gevent)'}")
    print(table(outcomes, listed))
    print(f"\nreviewed list: {len(listed)} entries ({FAILURES.name})")
    if now_pass:
        print("listed but passing now (remove them from the list):"
              + "".join(f"\n  {t}" for t in now_pass))
    for test in unexpected:
        print(f"\nUNEXPECTED {outcomes[test].upper()}: {test}\n{data['details'].get(test, '')}")
    print(f"log and results: {scratch}; wall time {time.monotonic() - started:.0f} s")
    if args.report_only:
        return 0
    return 1 if unexpected or not outcomes else 0


if __name__ == "__main__":
    sys.exit(main())
