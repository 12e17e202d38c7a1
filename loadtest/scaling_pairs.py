"""The scaling line (4,096 greenlets against 64) measured in alternating pairs.

``pgmux bench --goals`` measures the scaling cases minutes apart, so a VM whose speed
drifts moves their ratio. This runs ``select_int`` (4 connections, local) at 64 and at
4,096 greenlets in turn, ``--pairs`` times, each case in the bench's own worker process,
and prints every pair's CPU-per-query and throughput ratios and their medians. Any
``pgmux bench`` option may be added, e.g.:

    python loadtest/scaling_pairs.py
    python loadtest/scaling_pairs.py --pairs 5 --dsn postgresql://postgres@127.0.0.1/postgres
    python loadtest/scaling_pairs.py --clients pgmux-python
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path

from pgmux.tooling.bench import main
from pgmux.tooling.bench.goals.hot_path import MANY, MANY_CPU, MANY_QPS

SMALL, LARGE = 64, MANY


def case(extra: list[str], greenlets: int, json_path: Path) -> dict:
    """One select_int case at ``greenlets``: the client's result from the bench's JSON."""
    argv = ["--workloads", "select_int", "--connections", "4", "--rtt-ms", "0",
            "--duration", "5", "--warmup", "2", "--no-micro", *extra,
            "--greenlets", str(greenlets), "--json", str(json_path)]
    with contextlib.redirect_stdout(io.StringIO()):
        if main(argv) != 0:
            raise SystemExit(f"pgmux bench {' '.join(argv)} failed")
    (result,) = [r for r in json.loads(json_path.read_text())["results"]
                 if r["workload"] == "select_int"]  # (the floor is measured too)
    return result


def main_pairs(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--clients", default="pgmux", help="one client (default pgmux)")
    args, extra = parser.parse_known_args(argv)
    extra += ["--clients", args.clients]
    cpu_ratios, qps_ratios = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for pair in range(1, args.pairs + 1):
            small = case(extra, SMALL, Path(scratch, "small.json"))
            large = case(extra, LARGE, Path(scratch, "large.json"))
            cpu = large["cpu_us_per_query"] / small["cpu_us_per_query"]
            qps = large["qps"] / small["qps"]
            cpu_ratios.append(cpu)
            qps_ratios.append(qps)
            print(f"pair {pair}: {SMALL} greenlets {small['qps']:,.0f} q/s "
                  f"{small['cpu_us_per_query']:.1f} us; {LARGE:,} greenlets "
                  f"{large['qps']:,.0f} q/s {large['cpu_us_per_query']:.1f} us: "
                  f"CPU/query {cpu:.2f}x, throughput {qps:.2f}x", flush=True)
    print(f"median of {args.pairs}: CPU/query {statistics.median(cpu_ratios):.2f}x "
          f"(goal <= {MANY_CPU:g}x), throughput {statistics.median(qps_ratios):.2f}x "
          f"(goal >= {MANY_QPS:g}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main_pairs(sys.argv[1:]))
