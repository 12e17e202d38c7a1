"""A Django test runner that records every test's outcome and applies pgmux's skip list.

$PGMUX_SUITE_RESULTS: where the outcomes go, as JSON ({test id: outcome}; outcomes:
pass, fail, error, skip, xfail, xpass). $PGMUX_SUITE_SKIPS: a skip list (one test id per
line, then its reason after "#"); each test named there is skipped with its reason.
"""

from __future__ import annotations

import json
import os
import unittest

from django.test.runner import DiscoverRunner


def read_skips(path: str | None) -> dict[str, str]:
    """{test id: reason} from a skip list file (blank lines and comment lines ignored)."""
    skips: dict[str, str] = {}
    if not path:
        return skips
    with open(path) as f:
        for line in f:
            name, _, reason = line.partition("#")
            name = name.strip()
            if name:
                skips[name] = reason.strip() or "in pgmux's skip list"
    return skips


def _tests(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _tests(item)
        else:
            yield item


class RecordingResult(unittest.TextTestResult):
    outcomes: dict[str, str] = {}

    def _note(self, test, outcome: str) -> None:
        key = test.id()
        if self.outcomes.get(key) in ("fail", "error"):
            return  # a failed subtest stays failed
        self.outcomes[key] = outcome

    def addSuccess(self, test):  # noqa: N802 (unittest's names)
        super().addSuccess(test)
        self._note(test, "pass")

    def addFailure(self, test, err):  # noqa: N802
        super().addFailure(test, err)
        self._note(test, "fail")

    def addError(self, test, err):  # noqa: N802
        super().addError(test, err)
        self._note(test, "error")

    def addSkip(self, test, reason):  # noqa: N802
        super().addSkip(test, reason)
        self._note(test, "skip")

    def addExpectedFailure(self, test, err):  # noqa: N802
        super().addExpectedFailure(test, err)
        self._note(test, "xfail")

    def addUnexpectedSuccess(self, test):  # noqa: N802
        super().addUnexpectedSuccess(test)
        self._note(test, "xpass")

    def addSubTest(self, test, subtest, err):  # noqa: N802
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            self.outcomes[test.id()] = "fail" if failed else "error"


class RecordingRunner(DiscoverRunner):
    def get_resultclass(self):
        return RecordingResult

    def build_suite(self, *args, **kwargs):
        suite = super().build_suite(*args, **kwargs)
        skips = read_skips(os.environ.get("PGMUX_SUITE_SKIPS"))
        for test in _tests(suite):
            reason = skips.get(test.id())
            name = getattr(test, "_testMethodName", None)
            if reason is not None and name is not None:
                setattr(test, name, unittest.skip(f"pgmux skip list: {reason}")(
                    getattr(test, name)))
        return suite

    def run_suite(self, suite, **kwargs):
        try:
            return super().run_suite(suite, **kwargs)
        finally:
            path = os.environ.get("PGMUX_SUITE_RESULTS")
            if path:
                with open(path, "w") as f:
                    json.dump(RecordingResult.outcomes, f, indent=0, sort_keys=True)
