"""The tasks: plain psycopg2 code (reads, writes, a transfer in a transaction) over a pool.

Each task borrows a connection from one process-wide ``psycopg2.pool.ThreadedConnectionPool``
of ``CELERY_APP_DB_CONNECTIONS`` connections (default 100). A semaphore of the same size makes
a task wait for a free connection instead of failing with "connection pool exhausted"; under
``--pool=gevent`` the worker is monkey-patched, so the pool's lock and the semaphore are
gevent's and a waiting task yields to the others.

On the real psycopg2 each pooled connection is a server connection. On pgmux's drop-in each
is a handle on the worker's one multiplexed client: reads and writes outside a transaction
share its pipelined connections, and a transaction holds one of its pinned connections
only from its first statement that needs one (here the transfer's ``FOR UPDATE``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg2
import psycopg2.pool

from celery_app.app import app

POOL_SIZE = int(os.environ.get("CELERY_APP_DB_CONNECTIONS", "100"))

_pool: psycopg2.pool.ThreadedConnectionPool | None = None
_pool_lock = threading.Lock()
_free = threading.BoundedSemaphore(POOL_SIZE)


class InsufficientFunds(Exception):
    """A transfer larger than the source's balance (nothing is changed)."""


def pool() -> psycopg2.pool.ThreadedConnectionPool:
    """This worker's pool, its connections opened by the first task that needs one."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = psycopg2.pool.ThreadedConnectionPool(
                POOL_SIZE, POOL_SIZE, os.environ.get("DATABASE_URL", ""))
        return _pool


@contextmanager
def connection() -> Iterator[Any]:
    """A pooled connection for the block: ``with conn:`` in it commits or rolls back."""
    with _free:
        connections = pool()
        conn = connections.getconn()
        try:
            yield conn
        finally:
            connections.putconn(conn)  # rolls back what the block left open


@app.task
def lookup(account_id: int) -> dict[str, Any]:
    """A read: one account's id and owner."""
    with connection() as conn, conn, conn.cursor() as cur:
        cur.execute("SELECT id, owner FROM accounts WHERE id = %s", (account_id,))
        found = cur.fetchone()
    if found is None:
        raise KeyError(f"no account {account_id}")
    return {"id": found[0], "owner": found[1]}


@app.task
def total() -> int:
    """A read: the sum of all balances (transfers move money; the sum never changes)."""
    with connection() as conn, conn, conn.cursor() as cur:
        cur.execute("SELECT sum(balance) FROM accounts")
        return int(cur.fetchone()[0])


@app.task
def record(key: int, note: str) -> int:
    """A write: one note, committed; returns its key."""
    with connection() as conn, conn, conn.cursor() as cur:
        cur.execute("INSERT INTO notes (key, note) VALUES (%s, %s) RETURNING key", (key, note))
        return cur.fetchone()[0]


@app.task
def transfer(source: int, target: int, amount: int) -> dict[str, int]:
    """Move ``amount`` from one account to another in one transaction: both rows locked (in
    id order, so two transfers never deadlock), read, written back, the transfer logged."""
    with connection() as conn, conn, conn.cursor() as cur:
        cur.execute("SELECT id, balance FROM accounts WHERE id IN (%s, %s) ORDER BY id "
                    "FOR UPDATE", (source, target))
        balances = dict(cur.fetchall())
        if balances[source] < amount:
            raise InsufficientFunds(f"account {source} holds {balances[source]} < {amount}")
        cur.execute("UPDATE accounts SET balance = %s WHERE id = %s",
                    (balances[source] - amount, source))
        cur.execute("UPDATE accounts SET balance = %s WHERE id = %s",
                    (balances[target] + amount, target))
        cur.execute("INSERT INTO transfers (source, target, amount) VALUES (%s, %s, %s) "
                    "RETURNING id", (source, target, amount))
        transfer_id = cur.fetchone()[0]
    return {"id": transfer_id, "source": source, "target": target, "amount": amount}


@app.task
def driver() -> dict[str, str]:
    """Which psycopg2 this worker runs: its module's name ("pgmux.psycopg2" for the drop-in,
    "psycopg2" for the real one) and version."""
    return {"module": psycopg2.__name__, "version": psycopg2.__version__}
