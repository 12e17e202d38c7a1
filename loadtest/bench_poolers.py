"""Queries/s of pgmux direct and through PgBouncer (transaction and session pooling).

64 greenlets, ``SELECT $1::int``, 4 pipelined connections per client; the cases run in
turns (round robin, ``--rounds`` times) so a noisy machine slows them alike, and the
best round of each is printed with its p99. Give the DSNs of what to compare:

    python loadtest/bench_poolers.py --direct postgresql://app@127.0.0.1:5432/app \\
        --transaction postgresql://app:pw@127.0.0.1:6432/app_tx \\
        --session postgresql://app:pw@127.0.0.1:6432/app_session

Through transaction pooling two clients are measured: ``pooler="transaction"`` (unnamed
statements) and pgmux's defaults (content-addressed named statements, recovered when the
pooler lends a server connection that lacks one or already has it). ``--cache`` sets
``statement_cache_size`` for every case (default 512, pgmux's own).
"""

from __future__ import annotations

import argparse
import time

import gevent

from pgmux.client import Client
from pgmux.errors import Error

SQL = "SELECT $1::int"


def measure(db: Client, seconds: float, greenlets: int) -> tuple[float, float, int]:
    """(queries/s, p99 ms, errors) of ``greenlets`` callers running SQL on ``db`` for
    ``seconds``; a wrong result stops the benchmark, a pgmux error is counted."""
    latencies: list[float] = []
    errors = 0
    until = time.monotonic() + seconds

    def caller(n: int) -> None:
        nonlocal errors
        while time.monotonic() < until:
            started = time.perf_counter()
            try:
                value = db.fetchval(SQL, [n])
            except Error:
                errors += 1
                continue
            if value != n:
                raise AssertionError(f"wrong result: {value!r} for {n}")
            latencies.append(time.perf_counter() - started)

    began = time.monotonic()
    jobs = [gevent.spawn(caller, n) for n in range(greenlets)]
    gevent.joinall(jobs, raise_error=True)
    elapsed = time.monotonic() - began
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99)] * 1000 if latencies else float("nan")
    return len(latencies) / elapsed, p99, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--direct", required=True, help="DSN of the server itself")
    parser.add_argument("--transaction", help="DSN through a transaction-pooling PgBouncer")
    parser.add_argument("--session", help="DSN through a session-pooling PgBouncer")
    parser.add_argument("--cache", type=int, default=512, help="statement_cache_size")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--greenlets", type=int, default=64)
    parser.add_argument("--connections", type=int, default=4)
    args = parser.parse_args()
    cases = {"direct": (args.direct, None),
             "pgbouncer transaction": (args.transaction, "transaction"),
             "pgbouncer transaction, no pooler=": (args.transaction, None),
             "pgbouncer session": (args.session, "session")}
    clients = {name: Client(dsn, pooler=pooler, pipeline_size=args.connections,
                            statement_cache_size=args.cache).start()
               for name, (dsn, pooler) in cases.items() if dsn}
    best: dict[str, tuple[float, float]] = {}
    errors = dict.fromkeys(clients, 0)
    try:
        for name, db in clients.items():
            errors[name] += measure(db, 0.5, args.greenlets)[2]  # warm up
        for _ in range(args.rounds):
            for name, db in clients.items():
                qps, p99, failed = measure(db, args.seconds, args.greenlets)
                errors[name] += failed
                if name not in best or qps > best[name][0]:
                    best[name] = (qps, p99)
    finally:
        for db in clients.values():
            db.close()
    direct = best["direct"][0]
    print(f"{args.greenlets} greenlets, {args.connections} connections, {SQL!r}, "
          f"statement_cache_size={args.cache}, best of {args.rounds} x {args.seconds:g}s")
    for name, (qps, p99) in best.items():
        print(f"  {name:34} {qps:9,.0f} q/s  p99 {p99:6.2f} ms  ({qps / direct:.2f} x direct)"
              f"  errors {errors[name]}")


if __name__ == "__main__":
    main()
