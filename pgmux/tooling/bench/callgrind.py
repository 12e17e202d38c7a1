"""Counting instructions under callgrind, segment by segment, in one process.

The measured process runs under ``valgrind --tool=callgrind --instr-atstart=no``: its
start-up runs uninstrumented (at a few times native speed), and around each measured
segment it calls ``segment("on")`` and ``segment("dump")``. Each call prints the word and
blocks reading its stdin until this side has told callgrind (``callgrind_control -i on``;
``-i off``, then ``-d`` to dump the segment's count) and written a line back: a blocked
read costs no instructions, so what a segment counts besides its operations is a few
calls. The counts are the dumps' totals, in order. Without valgrind the segments are
timed instead: the process prints each one's CPU seconds (``segment("dump", cpu)``), far
noisier.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

UNDER_ENV = "PGMUX_BENCH_CALLGRIND"  # set in the measured process: wait for each command
TIMEOUT = 900.0  # seconds for one measured process
_TOTALS = re.compile(r"^totals:\s*(\d+)", re.MULTILINE)
_CONTROL = {"on": (("-i", "on"),), "dump": (("-i", "off"), ("-d",))}


def available() -> bool:
    """Whether valgrind's callgrind and its control tool are installed."""
    return bool(shutil.which("valgrind") and shutil.which("callgrind_control"))


def count(command: list[str], env: dict[str, str]) -> tuple[list[float], str]:
    """The instructions of each segment ``command`` marks (or, without valgrind, each one's
    CPU seconds), and what it printed otherwise."""
    if not available():
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        if done.returncode != 0:
            raise RuntimeError(f"measured process failed: {done.stderr[-2000:]}")
        lines = done.stdout.splitlines()
        return [float(x.split()[1]) for x in lines if x.startswith("dump ")], "\n".join(
            x for x in lines if not x.startswith(("on", "dump")))
    with tempfile.TemporaryDirectory(prefix="pgmux-callgrind-") as scratch:
        out = os.path.join(scratch, "out")
        worker = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no",
             f"--callgrind-out-file={out}", *command], env={**env, UNDER_ENV: "1"},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert worker.stdout is not None and worker.stdin is not None
        printed = []
        try:
            for text in worker.stdout:
                word = text.split(maxsplit=1)[0] if text.strip() else ""
                if word not in _CONTROL:
                    printed.append(text.rstrip("\n"))
                    continue
                for arguments in _CONTROL[word]:
                    subprocess.run(["callgrind_control", *arguments, str(worker.pid)],
                                   capture_output=True, timeout=120, check=True)
                worker.stdin.write("go\n")
                worker.stdin.flush()
            _, errors = worker.communicate(timeout=TIMEOUT)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        if worker.returncode != 0:
            raise RuntimeError(f"callgrind run failed: {errors[-2000:]}")
        return _dumps(out), "\n".join(printed)


def _dumps(out: str) -> list[float]:
    """The totals of ``out.1``, ``out.2``, ...: one per dump, in order."""
    counts = []
    index = 1
    while os.path.exists(f"{out}.{index}"):
        with open(f"{out}.{index}") as f:
            found = _TOTALS.search(f.read())
        if found is None:
            raise RuntimeError(f"no totals in callgrind's dump {out}.{index}")
        counts.append(float(found[1]))
        index += 1
    return counts


def segment(what: str, cpu_seconds: float | None = None) -> None:
    """In the measured process: ``"on"`` before a segment, ``"dump"`` after it. Under
    callgrind, block until the parent has acted (it writes a line); otherwise print the
    segment's CPU seconds with ``"dump"``."""
    if not os.environ.get(UNDER_ENV):
        if what == "dump":
            print(f"dump {cpu_seconds or 0.0:.6f}", flush=True)
        return
    print(what, flush=True)
    sys.stdin.readline()
