"""Instructions per statement through pgmux.psycopg2 against the same through pgmux.dbapi.

    python tools/psycopg2_instructions.py [DSN]     # a throwaway server when no DSN

Each operation is ``cursor.execute("SELECT %s", (i,)); cursor.fetchall()`` from one
greenlet, in autocommit mode and in a transaction (committed after each statement; a READ
COMMITTED transaction's plain read stays multiplexed, so the commit sends nothing).
Counted with callgrind as pgmux's telemetry-cost measurement counts (instrumentation on
for the measured loop only; a run of N and one of 3N, the difference over 2N), compiled.
"""

from __future__ import annotations

import gc
import os
import sys

WARM_UP = 256
N = 2000
CASES = [(api, mode) for mode in ("autocommit", "transaction") for api in ("dbapi", "psycopg2")]


def worker(api: str, mode: str, n: int, dsn: str) -> None:
    from pgmux.tooling.bench.telemetry_cost import _handshake

    if api == "psycopg2":
        from pgmux import psycopg2 as module
    else:
        import pgmux.dbapi as module  # type: ignore[no-redef]
    conn = module.connect(dsn)
    conn.autocommit = mode == "autocommit"
    cur = conn.cursor()
    commit = conn.commit if mode == "transaction" else None

    def run(count: int) -> None:
        for i in range(count):
            cur.execute("SELECT %s", (i,))
            cur.fetchall()
            if commit is not None:
                commit()

    run(WARM_UP)
    gc.collect()
    gc.freeze()
    _handshake("start")
    run(n)
    _handshake("stop")
    print("cpu 0")
    conn.close()


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--worker":
        worker(argv[1], argv[2], int(argv[3]), argv[4])
        return 0
    from pgmux.tooling.bench.telemetry_cost import _count
    from pgmux.tooling.embedded import EmbeddedPostgres

    env = dict(os.environ)
    env.pop("PGMUX_PURE_PYTHON", None)
    server = None
    if argv:
        dsn = argv[0]
    else:
        server = EmbeddedPostgres().start()
        dsn = server.dsn()
    try:
        results = {}
        for api, mode in CASES:
            command = [sys.executable, __file__, "--worker", api, mode]
            low = _count([*command, str(N), dsn], env)
            high = _count([*command, str(3 * N), dsn], env)
            results[(api, mode)] = (high - low) / (2 * N)
    finally:
        if server is not None:
            server.stop()
    print(f"{'mode':<12} {'pgmux.dbapi':>12} {'pgmux.psycopg2':>15} {'ratio':>6}")
    for mode in ("autocommit", "transaction"):
        base, mine = results[("dbapi", mode)], results[("psycopg2", mode)]
        print(f"{mode:<12} {base:>12,.0f} {mine:>15,.0f} {mine / base:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
