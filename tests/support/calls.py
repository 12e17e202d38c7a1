"""Counting the calls a path makes (sys.setprofile): pgmux's own, by greenlet.

Only pgmux's work is counted: calls of pgmux's Python functions, and calls of C functions
made from pgmux code (builtins and the compiled twins); what gevent and the hub do is not.
The profiler does not see calls of Cython methods (gevent's ``loop.run_callback``).
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from typing import Any

import gevent

import pgmux

PGMUX_DIR = os.path.dirname(pgmux.__file__) + os.sep


class CallCounter:
    """A profile function counting pgmux's calls, by greenlet (``where(greenlet)`` names
    the kind), and its Python calls by function (``functions``, by qualified name)."""

    def __init__(self, where: Any = None):
        self.python: Counter[str] = Counter()
        self.c: Counter[str] = Counter()
        self.functions: Counter[str] = Counter()
        self._where = where or (lambda greenlet: "all")

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(PGMUX_DIR):
                self.python[self._where(gevent.getcurrent())] += 1
                self.functions[code.co_qualname] += 1
        elif event == "c_call" and frame.f_code.co_filename.startswith(PGMUX_DIR):
            self.c[self._where(gevent.getcurrent())] += 1

    def __enter__(self) -> CallCounter:
        sys.setprofile(self)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        sys.setprofile(None)

    def per(self, count: int, kind: str = "all") -> tuple[float, float]:
        """(Python calls, C calls) of ``kind`` per one of ``count`` operations."""
        return self.python[kind] / count, self.c[kind] / count
