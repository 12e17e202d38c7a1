"""Queries/s of pgmux direct and through PgBouncer (transaction and session pooling).

64 greenlets, ``SELECT $1::int``, 4 pipelined connections per client; the cases run in
turns (round robin, ``--rounds`` times) so a noisy machine slows them alike, and the
best round of each is printed with its p99. Give the DSNs of what to compare:

    python loadtest/bench_poolers.py --direct postgresql://app@127.0.0.1:5432/app \\
        --transaction postgresql://app:pw@127.0.0.1:6432/app_tx \\
        --session postgresql://app:pw@127.0.0.1:6432/app_session

Through transaction pooling pgmux runs with ``pooler="transaction"`` and, by default,
``statement_cache_size=0`` (``--cache`` changes it): until statement names are
content-addressed, named statements are not safe there. The other cases use the same
cache size so the figures compare like with like.
"""

from __future__ import annotations

import argparse
import time

import gevent

from pgmux.client import Client

SQL = "SELECT $1::int"


def measure(db: Client, seconds: float, greenlets: int) -> tuple[float, float]:
    """(queries/s, p99 ms) of ``greenlets`` callers running SQL on ``db`` for ``seconds``."""
    latencies: list[float] = []
    until = time.monotonic() + seconds

    def caller(n: int) -> None:
        while time.monotonic() < until:
            started = time.perf_counter()
            if db.fetchval(SQL, [n]) != n:
                raise AssertionError("wrong result")
            latencies.append(time.perf_counter() - started)

    began = time.monotonic()
    jobs = [gevent.spawn(caller, n) for n in range(greenlets)]
    gevent.joinall(jobs, raise_error=True)
    elapsed = time.monotonic() - began
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99)] * 1000 if latencies else float("nan")
    return len(latencies) / elapsed, p99


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--direct", required=True, help="DSN of the server itself")
    parser.add_argument("--transaction", help="DSN through a transaction-pooling PgBouncer")
    parser.add_argument("--session", help="DSN through a session-pooling PgBouncer")
    parser.add_argument("--cache", type=int, default=0, help="statement_cache_size")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--greenlets", type=int, default=64)
    parser.add_argument("--connections", type=int, default=4)
    args = parser.parse_args()
    cases = {"direct": (args.direct, None), "pgbouncer transaction": (args.transaction,
             "transaction"), "pgbouncer session": (args.session, "session")}
    clients = {name: Client(dsn, pooler=pooler, pipeline_size=args.connections,
                            statement_cache_size=args.cache).start()
               for name, (dsn, pooler) in cases.items() if dsn}
    best: dict[str, tuple[float, float]] = {}
    try:
        for db in clients.values():
            measure(db, 0.5, args.greenlets)  # warm up
        for _ in range(args.rounds):
            for name, db in clients.items():
                qps, p99 = measure(db, args.seconds, args.greenlets)
                if name not in best or qps > best[name][0]:
                    best[name] = (qps, p99)
    finally:
        for db in clients.values():
            db.close()
    direct = best["direct"][0]
    print(f"{args.greenlets} greenlets, {args.connections} connections, {SQL!r}, "
          f"statement_cache_size={args.cache}, best of {args.rounds} x {args.seconds:g}s")
    for name, (qps, p99) in best.items():
        print(f"  {name:24} {qps:9,.0f} q/s  p99 {p99:6.2f} ms  ({qps / direct:.2f} x direct)")


if __name__ == "__main__":
    main()
