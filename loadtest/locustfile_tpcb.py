"""Load-test PostgreSQL with pgbench's TPC-B transaction as atomic units, through Locust.

    PGMUX_DSN=postgresql://user:pw@localhost/db locust -f loadtest/locustfile_tpcb.py
    locust -f loadtest/locustfile_tpcb.py --host postgresql://... --headless -u 64 -r 64 -t 1m
    locust -f loadtest/locustfile_tpcb.py TpcbUnitUser ...          # only the units

Two kinds of users run the same five statements on pgbench's tables (scale 1, its own
`loadtest_tpcb_*` tables): ``TpcbUnitUser`` as one atomic unit (``db.atomic()``: one Sync
on a pipelined connection, all or nothing, request type UNIT) and
``TpcbTransactionUser`` in ``db.transaction()`` (a pinned connection, a round trip per
statement, request type TX), so Locust's table shows both side by side. Every
transaction adds the same delta to an account, its teller and its branch and writes it
to the history: the sums of the four always agree, whatever failed.
"""

import os
import random

from gevent.lock import Semaphore
from locust import constant, task

from pgmux.contrib.locust import PgmuxUser

TABLES = "loadtest_tpcb"
BRANCHES, TELLERS, ACCOUNTS = 1, 10, 100_000  # pgbench -i -s 1
SEED_LOCK = 4244  # advisory lock key: concurrent Locust processes seed once
STATEMENTS = (
    f"UPDATE {TABLES}_accounts SET abalance = abalance + $1 WHERE aid = $2",
    f"SELECT abalance FROM {TABLES}_accounts WHERE aid = $1",
    f"UPDATE {TABLES}_tellers SET tbalance = tbalance + $1 WHERE tid = $2",
    f"UPDATE {TABLES}_branches SET bbalance = bbalance + $1 WHERE bid = $2",
    f"INSERT INTO {TABLES}_history (tid, bid, aid, delta, mtime) "
    "VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)",
)
SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLES}_branches (bid int PRIMARY KEY, bbalance int, "
    "filler char(88)) WITH (fillfactor = 100)",
    f"CREATE TABLE IF NOT EXISTS {TABLES}_tellers (tid int PRIMARY KEY, bid int, "
    "tbalance int, filler char(84)) WITH (fillfactor = 100)",
    f"CREATE TABLE IF NOT EXISTS {TABLES}_accounts (aid int PRIMARY KEY, bid int, "
    "abalance int, filler char(84)) WITH (fillfactor = 100)",
    f"CREATE TABLE IF NOT EXISTS {TABLES}_history (tid int, bid int, aid int, delta int, "
    "mtime timestamp, filler char(22))",
)
SEED = (
    f"INSERT INTO {TABLES}_branches SELECT i, 0, '' FROM generate_series(1, {BRANCHES}) i",
    f"INSERT INTO {TABLES}_tellers SELECT i, (i - 1) / {TELLERS // BRANCHES} + 1, 0, '' "
    f"FROM generate_series(1, {TELLERS}) i",
    f"INSERT INTO {TABLES}_accounts SELECT i, (i - 1) / {ACCOUNTS // BRANCHES} + 1, 0, '' "
    f"FROM generate_series(1, {ACCOUNTS}) i",
)

_seeded = False
_seed_lock = Semaphore()


def setup_once(db) -> None:
    """Create and fill the tables unless they exist (once per process)."""
    global _seeded
    with _seed_lock:
        if _seeded:
            return
        with db.transaction() as tx:  # DDL is refused on the multiplexed path
            tx.execute("SELECT pg_advisory_xact_lock($1)", [SEED_LOCK])
            for sql in SCHEMA:
                tx.execute(sql)
            if tx.fetchval(f"SELECT count(*) FROM {TABLES}_branches") == 0:
                for sql in SEED:
                    tx.execute(sql)
        _seeded = True


def tpcb_steps() -> list[tuple[str, list[int]]]:
    """One TPC-B transaction: the five statements with a random account, teller, delta."""
    aid, tid = random.randint(1, ACCOUNTS), random.randint(1, TELLERS)
    bid, delta = random.randint(1, BRANCHES), random.randint(-5000, 5000)
    params = ([delta, aid], [aid], [delta, tid], [delta, bid], [tid, bid, aid, delta])
    return list(zip(STATEMENTS, params, strict=True))


class TpcbUser(PgmuxUser):
    abstract = True
    dsn = os.environ.get("PGMUX_DSN") or os.environ.get("DATABASE_URL")
    client_options = {"pipeline_size": 4, "pinned_size": 4}
    wait_time = constant(0)

    def on_start(self):
        setup_once(self.client.db)


class TpcbUnitUser(TpcbUser):
    @task
    def tpcb(self):
        with self.client.atomic(name="tpcb") as unit:
            for sql, params in tpcb_steps():
                unit.execute(sql, params)


class TpcbTransactionUser(TpcbUser):
    @task
    def tpcb(self):
        with self.client.transaction(name="tpcb") as tx:
            for sql, params in tpcb_steps():
                tx.execute(sql, params)
