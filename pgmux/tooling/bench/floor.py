"""gevent's floor: what one park-and-wake round of a caller costs, with no I/O and no
protocol, measured in the same run as the workloads (the ``floor`` case of the ``gevent``
client), so that each workload's client CPU per operation reads as a multiple of it.

Theory of operation. N caller greenlets each park on a ``Waiter`` they append to a shared
list, setting an ``Event`` if it is not set; one waker greenlet waits for the event,
yields one loop turn (as a socket read would), takes the whole list and wakes every
caller through the loop's callback queue, as a pipelined connection's reader wakes the
callers whose replies it read. A round is one caller parked and woken. Nothing else
runs: the window's CPU time over its rounds is the least a multiplexed query can cost
under gevent. ``FloorCase`` is the worker's case for this client: it runs the loop
through the warm-up and a measured window and reports the rounds as the operations.
"""

from __future__ import annotations

import os
import time
from random import Random
from typing import Any

import gevent
from gevent.event import Event
from gevent.hub import Waiter, get_hub

from pgmux._native import implementation
from pgmux.tooling.bench.clients import Adapter
from pgmux.tooling.bench.procstat import per_operation
from pgmux.tooling.bench.runner import STOP_GRACE, Case
from pgmux.tooling.bench.workloads import Operation, Workload

NAME, CLIENT = "floor", "gevent"
CALLERS = 64  # as the multiplexed workloads' greenlets
CASE = (0.0, NAME, CALLERS, 0, CLIENT)  # (rtt, workload, greenlets, connections, client)


class ParkAndWake:
    """The loop: ``callers`` greenlets parked and woken in batches by one waker."""

    def __init__(self, callers: int, rounds: int | None = None):
        self.callers = callers
        self.limit = rounds  # stop by itself after this many rounds (None: when told)
        self.parked: list[Waiter] = []
        self.kick = Event()
        self.rounds = 0
        self.stopping = False
        self.greenlets: list[gevent.Greenlet] = []

    def caller(self) -> None:
        parked, kick = self.parked, self.kick
        while not self.stopping:
            waiter = Waiter()
            parked.append(waiter)
            if not kick.is_set():
                kick.set()
            waiter.get()
            self.rounds += 1
            if self.rounds == self.limit:
                self.stopping = True
                kick.set()  # the waker's last batch wakes the others, and they leave

    def waker(self) -> None:
        run_callback = get_hub().loop.run_callback
        kick, parked = self.kick, self.parked
        while not self.stopping:
            kick.wait()
            kick.clear()
            gevent.sleep(0)  # one loop turn, as a read of the socket would take
            batch = parked[:]
            del parked[:]
            for waiter in batch:
                run_callback(waiter.switch, None)

    def start(self) -> None:
        self.greenlets = [gevent.spawn(self.caller) for _ in range(self.callers)]
        self.greenlets.append(gevent.spawn(self.waker))

    def run(self) -> None:
        """Start, and return when ``rounds`` rounds are done (every greenlet has left)."""
        self.start()
        gevent.joinall(self.greenlets, raise_error=True)

    def stop(self) -> None:
        """End the loop: the waker's last batch wakes everyone parked, and they leave."""
        self.stopping = True
        self.kick.set()
        gevent.joinall(self.greenlets, timeout=STOP_GRACE)
        gevent.killall([g for g in self.greenlets if not g.dead], block=True, timeout=5.0)


class FloorCase(Case):
    """One measured run of the loop (see the module's docstring)."""

    def run(self) -> dict[str, Any]:
        loop = ParkAndWake(self.case["greenlets"])
        loop.start()
        try:
            gevent.sleep(self.plan["warmup"])
            rounds0, times0 = loop.rounds, os.times()
            wall0, cpu0 = time.perf_counter(), time.process_time()
            gevent.sleep(self.duration)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            rounds, times1 = loop.rounds - rounds0, os.times()
        finally:
            loop.stop()
        return {
            "client": self.plan["client"], "pgmux_implementation": implementation,
            "workload": NAME, "unit": "round", "rows_per_op": 1,
            "greenlets": self.case["greenlets"], "connections": self.connections,
            "rtt_ms": self.plan["rtt_ms"], "duration_s": round(wall, 3), "queries": rounds,
            "qps": round(rounds / wall, 1) if wall > 0 else 0.0,
            "cpu_us_per_query": per_operation(cpu, rounds),
            "cpu_user_us_per_query": per_operation(times1.user - times0.user, rounds),
            "cpu_system_us_per_query": per_operation(times1.system - times0.system, rounds),
            "server_cpu_us_per_query": None, "peak_server_connections": 0, "errors": 0,
            "first_error": None, "fill": None, "profiled": False, "turns_counted": False,
            "censored": 0, "latency_ms": {}, "cdf_ms": [],
        }


class GeventFloor(Adapter):
    name = CLIENT
    description = ("gevent alone: callers parked on a Waiter and woken in batches through the "
                   "loop's callbacks, no I/O (the floor)")
    workloads = (NAME,)
    case_runner = FloorCase


def _no_operation(client: Any, rng: Random, rows: int) -> Operation:
    raise RuntimeError("the floor runs its own loop (FloorCase), not an operation per caller")


FLOOR_WORKLOAD = Workload(NAME, "gevent's floor: one park-and-wake round of a caller, no I/O",
                          _no_operation, unit="round", clients=(CLIENT,))


def add_multiples(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Each result's client CPU per operation as a multiple of the floor's per round
    (``cpu_floor_multiple``); the floor's result, if it ran."""
    floor = next((r for r in results if r["workload"] == NAME and r["queries"]), None)
    base = floor.get("cpu_us_per_query") if floor else None
    for r in results:
        value = r.get("cpu_us_per_query")
        r["cpu_floor_multiple"] = round(value / base, 2) if base and value else None
    return floor
