"""Load-test PostgreSQL itself through pgmux, with Locust's UI, CSV and distributed mode.

    PGMUX_DSN=postgresql://user:pw@localhost/db locust -f loadtest/locustfile_db.py
    locust -f loadtest/locustfile_db.py --host postgresql://... --headless -u 200 -r 50 -t 1m

Every query shows up as a request of type SQL (a transaction as one of type TX). All users
of a Locust process share that process's pgmux Client: their queries are multiplexed on
its pipelined connections, the way a gevent web app's requests are.
"""

import os
import random

from gevent.lock import Semaphore
from locust import constant, task

from pgmux.contrib.locust import PgmuxUser

ACCOUNTS = 10_000
SEED_LOCK = 4243  # advisory lock key: concurrent Locust processes seed once

_seeded = False
_seed_lock = Semaphore()


BY_ID = ("account by id", "SELECT id, balance FROM loadtest_accounts WHERE id = $1")


def setup_once(db) -> None:
    """Create and fill `loadtest_accounts` unless it exists, and prepare the lookup
    (once per process, before any user runs a task)."""
    global _seeded
    with _seed_lock:
        if _seeded:
            return
        with db.transaction() as tx:  # DDL is refused on the multiplexed path
            tx.execute("SELECT pg_advisory_xact_lock($1)", [SEED_LOCK])
            tx.execute("CREATE TABLE IF NOT EXISTS loadtest_accounts "
                       "(id integer PRIMARY KEY, balance bigint NOT NULL)")
            if tx.fetchval("SELECT count(*) FROM loadtest_accounts") == 0:
                tx.execute("INSERT INTO loadtest_accounts "
                           "SELECT i, 1000 FROM generate_series(1, $1) i", [ACCOUNTS])
        db.prepare(*BY_ID)
        _seeded = True


class DatabaseUser(PgmuxUser):
    dsn = os.environ.get("PGMUX_DSN") or os.environ.get("DATABASE_URL")
    client_options = {"pipeline_size": 4, "pinned_size": 8}
    wait_time = constant(0)

    def on_start(self):
        setup_once(self.client.db)
        self.by_id = self.client.prepare(*BY_ID)  # already prepared: a lookup

    @task(10)
    def point_select(self):
        self.by_id.fetchone([random.randint(1, ACCOUNTS)])

    @task(3)
    def range_scan(self):
        start = random.randint(1, ACCOUNTS - 100)
        self.client.query("SELECT id, balance FROM loadtest_accounts "
                          "WHERE id BETWEEN $1 AND $1 + 99", [start], name="range of 100")

    @task(1)
    def transfer(self):
        first, second = sorted(random.sample(range(1, ACCOUNTS + 1), 2))  # lock order
        with self.client.transaction(name="transfer") as tx:
            tx.execute("UPDATE loadtest_accounts SET balance = balance - 1 WHERE id = $1",
                       [first])
            tx.execute("UPDATE loadtest_accounts SET balance = balance + 1 WHERE id = $1",
                       [second])
