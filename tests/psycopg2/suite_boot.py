"""Runs psycopg2's own test modules in this process, under gevent.monkey.patch_all(), on
pgmux.psycopg2 (through register()) or on the real psycopg2, recording every outcome.

    python suite_boot.py SDIST_ROOT pgmux|real RESULTS.json test_connection test_cursor ...
"""

from __future__ import annotations

import sys

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402


class Recorder(unittest.TextTestResult):
    """A text result that also keeps each test's outcome by id."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes: dict[str, str] = {}
        self.details: dict[str, str] = {}

    def _note(self, test, outcome, err=None):
        self.outcomes[test.id()] = outcome
        if err is not None:
            self.details[test.id()] = self._exc_info_to_string(err, test)[-2000:]

    def addSuccess(self, test):
        super().addSuccess(test)
        self._note(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._note(test, "fail", err)

    def addError(self, test, err):
        super().addError(test, err)
        self._note(test, "error", err)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._note(test, "skip")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._note(test, "xfail")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._note(test, "xpass")


def _tests(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _tests(item)
        else:
            yield item


def main() -> int:
    root, implementation, results, *modules = sys.argv[1:]
    sys.path.insert(0, root)
    if implementation == "pgmux":
        import pgmux.psycopg2

        pgmux.psycopg2.register()
    import importlib

    suite = unittest.TestSuite()
    for name in modules:
        module = importlib.import_module(f"tests.{name}")
        suite.addTest(module.test_suite())
    skips = json.loads(os.environ.get("PGMUX_SUITE_SKIPS", "{}"))
    for test in _tests(suite):
        reason = skips.get(test.id())
        if reason is not None:
            setattr(type(test), test._testMethodName,
                    unittest.skip(reason)(lambda self: None))
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2, resultclass=Recorder)
    started = time.monotonic()
    result = runner.run(suite)
    with open(results, "w") as out:
        json.dump({"outcomes": result.outcomes, "details": result.details,
                   "seconds": time.monotonic() - started}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
