"""Worker processes: a plan of cases sent to one, its results read back as JSON lines, and
the progress bar they move.

The suite starts one worker process (``pgmux.tooling.bench.runner``) per plan: a client,
its connection count, an RTT and the cases it runs in turn. Separate processes keep the
client CPU figures clean (the delay proxy's and the suite's own work are not counted) and
let the psycopg 3 worker monkey-patch gevent without touching the others.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
import time
from typing import Any

from pgmux.tooling.bench.clients import CLIENTS
from pgmux.tooling.bench.runner import worker_command
from pgmux.tooling.bench.workloads import WORKLOADS

CaseKey = tuple[float, str, int, int, str]  # (rtt, workload, greenlets, connections, client)
WORKER_SILENCE_LIMIT = 120.0  # seconds past a case's planned time before giving up on it
TURNS_SECONDS = 2.0  # measured seconds of a turn-counted case, at most


class Tracker:
    """The progress bar: finished cases plus the elapsed part of the running one."""

    def __init__(self, total_cases: int, case_seconds: float):
        from pgmux.tooling.progress import Progress

        self.bar = Progress(total_cases, "bench")
        self.case_seconds = case_seconds
        self.done = 0
        self.started_at: float | None = None
        self.label = ""

    def start(self, label: str) -> None:
        self.started_at = time.monotonic()
        self.label = label
        self.tick()

    def finish_case(self) -> None:
        self.done += 1
        self.started_at = None
        self.tick()

    def tick(self) -> None:
        part = 0.0
        if self.started_at is not None:
            part = min(0.99, (time.monotonic() - self.started_at) / self.case_seconds)
        self.bar.update(self.done + part, f"{self.done}/{int(self.bar.total)} {self.label}")

    def close(self) -> None:
        self.bar.finish()


def run_worker(plan: dict[str, Any], tracker: Tracker) -> tuple[list[dict], list[str]]:
    """Run one worker process; its results and any error messages."""
    adapter = CLIENTS[plan["client"]]
    labels = {c["index"]: c["label"] for c in plan["cases"]}
    limit = plan["warmup"] + plan["duration"] + WORKER_SILENCE_LIMIT
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    pending = set(labels)
    with tempfile.TemporaryFile(mode="w+") as stderr:
        process = subprocess.Popen(worker_command(adapter.monkey_patch), stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=stderr, text=True,
                                   env={**os.environ, **adapter.worker_environment()},
                                   cwd=adapter.worker_directory())
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps({**plan, "client": adapter.runs_as or plan["client"]}))
        process.stdin.close()
        heard = time.monotonic()
        while True:
            ready, _, _ = select.select([process.stdout], [], [], 0.1)
            tracker.tick()
            if ready:
                line = process.stdout.readline()
                if not line:
                    break
                heard = time.monotonic()
                _handle_event(line, plan["client"], labels, tracker, results, errors, pending)
            elif time.monotonic() - heard > limit:
                process.kill()
                errors.append(f"{plan['client']}: the worker went silent; killed it")
                break
        process.wait()
        process.stdout.close()
        if pending:
            stderr.seek(0)
            tail = stderr.read()[-1500:].strip()
            for index in sorted(pending):
                errors.append(f"{labels[index]}: no result (worker exit {process.returncode})"
                              + (f"\n{tail}" if tail else ""))
                tracker.finish_case()
    return results, errors


def _handle_event(line: str, client: str, labels: dict[int, str], tracker: Tracker,
                  results: list[dict], errors: list[str], pending: set[int]) -> None:
    try:
        event = json.loads(line)
    except ValueError:
        return  # something else printed on stdout
    index = event.get("index")
    kind = event.get("event")
    if kind == "start":
        tracker.start(labels.get(index, ""))
        return
    if kind == "result":
        results.append({**event["result"], "client": client})
    elif kind == "error":
        errors.append(f"{labels.get(index, '?')}: {event['error']}")
    pending.discard(index)
    tracker.finish_case()


Shape = tuple[str, int, int]  # (workload, greenlets, connections)
GROUPINGS = ("case", "client", "shared")


def worker_plan(settings: Any, target: Any, client: str, rtt: float, params: dict[str, Any],
                cases: list[Shape], first_index: int, profile: str | None = None,
                profile_clock: str = "wall", count_turns: bool = False) -> dict[str, Any]:
    extra = {"count_turns": True, "duration": min(settings.duration, TURNS_SECONDS)} if (
        count_turns) else {}
    mark = " (turns counted)" if count_turns else ""
    return {
        "client": client, "dsn": target.dsn, "params": params, "direct_params": {},
        "connections": cases[0][2], "rtt_ms": rtt, "duration": settings.duration,
        "warmup": settings.warmup, "rows": settings.rows, "upstream": target.upstream,
        "stop_grace": settings.stop_grace,
        "cases": [{"index": first_index + i, "workload": workload, "greenlets": greenlets,
                   "connections": connections, "profile": profile,
                   "profile_clock": profile_clock, **extra,
                   "label": f"{client} {workload} g={greenlets} c={connections} "
                            f"rtt={rtt:g}ms{mark}"}
                  for i, (workload, greenlets, connections) in enumerate(cases)],
    }


def worker_groups(cases: list[CaseKey], grouping: str = "client",
                  ) -> list[tuple[str, list[Shape]]]:
    """The cases of one RTT as worker plans: (client, [(workload, greenlets, connections)]).

    ``client``: a worker per client and connection count runs its cases in turn (a
    workload with ``own_process`` gets a worker of its own: clean memory figures);
    ``case``: a worker per case, in the order given (the goal cases list each case's
    clients one after another, so a burst of load from elsewhere falls on the peers alike
    rather than on one client); ``shared``: a worker per client for all its cases, the
    fewest process starts (--quick).
    """
    groups: dict[tuple[str, Any, Any], list[Shape]] = {}
    for index, (_, workload, greenlets, connections, client) in enumerate(cases):
        if grouping == "case":
            key: tuple[str, Any, Any] = (client, connections, index)
        elif grouping == "shared":
            key = (client, None, None)
        else:
            key = (client, connections, workload if WORKLOADS[workload].own_process else "")
        groups.setdefault(key, []).append((workload, greenlets, connections))
    return [(client, found) for (client, _, _), found in groups.items()]


def turn_cases(cases: list[CaseKey]) -> list[CaseKey]:
    """The cases that also run through the turn-counting proxy (RTT 0 only)."""
    return [c for c in cases if c[0] == 0 and WORKLOADS[c[1]].count_turns]


