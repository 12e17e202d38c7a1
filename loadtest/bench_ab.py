"""An A/B: pgmux against a naive one-query-per-round-trip pool of the same size.

4 connections, 64 greenlets, ``SELECT $1::int``, locally and through a 10 ms
round-trip delay proxy; prints queries/s, p50/p99 latency and client CPU per
query, and the targets met or not. The naive pools: pgmux's multiplexed path with
``max_in_flight=1`` (same code, no multiplexing), pgmux pinned sessions, and
psycopg2 + psycogreen when installed. Any ``pgmux bench`` option may be added
(they win over these defaults), e.g.:

    python loadtest/bench_ab.py
    python loadtest/bench_ab.py --dsn postgresql://postgres@127.0.0.1:5432/postgres --duration 10
    python loadtest/bench_ab.py --json ab.json --plot ab.png
"""

from __future__ import annotations

import sys

from pgmux.tooling.bench import main

AB_DEFAULTS = {
    "--clients": "pgmux,pgmux-inflight1,pgmux-pinned,psycopg2",
    "--workloads": "select_int",
    "--greenlets": "64",
    "--connections": "4",
    "--rtt-ms": "0,10",
    "--duration": "5",
    "--warmup": "1",
}


def ab_argv(extra: list[str]) -> list[str]:
    """The suite's arguments: these defaults unless ``extra`` sets the same option."""
    given = {arg.split("=", 1)[0] for arg in extra if arg.startswith("--")}
    argv = ["--no-micro"] if "--micro" not in given else []
    for option, value in AB_DEFAULTS.items():
        if option not in given:
            argv += [option, value]
    if "--clients" not in given:
        from pgmux.tooling.bench.clients import CLIENTS

        installed = [c for c in AB_DEFAULTS["--clients"].split(",") if not CLIENTS[c].missing()]
        argv[argv.index("--clients") + 1] = ",".join(installed)
    return argv + extra


if __name__ == "__main__":
    sys.exit(main(ab_argv(sys.argv[1:])))
