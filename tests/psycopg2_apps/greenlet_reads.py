"""Run by test_greenlets.py: N greenlets, a psycopg2 connection each, a read transaction per request.

    python -m psycopg2_apps.greenlet_reads DRIVER DSN GREENLETS REQUESTS

Each greenlet connects, then serves REQUESTS requests, each one read transaction (BEGIN, two
SELECTs, COMMIT: psycopg2's default, not autocommit), checking every answer; all of them are
connected before the first request and close only after the last, so the connections are
all open at once. Prints one JSON line: what ran, how long, and the module psycopg2 was.
"""

# ruff: noqa: E402  -- gevent patches, and the psycopg2 is chosen, before anything else loads
import sys

from psycopg2_apps.green import module_name, setup

setup(sys.argv[1])

import json
import time

import gevent
import psycopg2
from gevent.event import Event

ITEMS = 1_000


def main(dsn: str, greenlets: int, requests: int) -> None:
    conn = psycopg2.connect(dsn)
    with conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS items (id integer PRIMARY KEY, name text)")
        cur.execute("INSERT INTO items SELECT i, 'item-' || i FROM generate_series(1, %s) i "
                    "ON CONFLICT DO NOTHING", (ITEMS,))
    conn.close()

    connected, finished = [0], [0]
    all_connected, all_finished = Event(), Event()

    def serve(worker: int) -> int:
        conn = psycopg2.connect(dsn)
        connected[0] += 1
        if connected[0] == greenlets:
            all_connected.set()
        all_connected.wait()
        try:
            for request in range(requests):
                item = (worker * requests + request) % ITEMS + 1
                with conn, conn.cursor() as cur:  # BEGIN ... COMMIT
                    cur.execute("SELECT id, name FROM items WHERE id = %s", (item,))
                    row = cur.fetchone()
                    cur.execute("SELECT count(*) FROM items WHERE id <= %s", (item,))
                    below = cur.fetchone()[0]
                if row != (item, f"item-{item}") or below != item:
                    raise AssertionError(f"request {request}: {row!r}, {below!r} for {item}")
            finished[0] += 1
            if finished[0] == greenlets:
                all_finished.set()
            all_finished.wait()
            return requests
        finally:
            conn.close()

    started = time.monotonic()
    jobs = [gevent.spawn(serve, worker) for worker in range(greenlets)]
    gevent.joinall(jobs, raise_error=True)
    elapsed = time.monotonic() - started
    served = sum(job.value for job in jobs)
    print(json.dumps({"module": module_name(), "greenlets": greenlets, "requests": served,
                      "seconds": round(elapsed, 3)}))


if __name__ == "__main__":
    main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
