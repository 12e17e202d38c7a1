"""The benchmark workloads: what one query of each is, and the tables they need.

A workload turns a client adapter and a random generator into a zero-argument
callable that runs one query (one "operation"). SQL is written with ``$n``
placeholders; each adapter translates it once to its driver's style.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from random import Random
from typing import Any

ACCOUNTS = "pgmux_bench_accounts"
EVENTS = "pgmux_bench_events"
ACCOUNT_ROWS = 100_000
SLOW_FRACTION = 0.01
SLOW_SECONDS = 0.05

Operation = Callable[[], Any]


@dataclass(frozen=True)
class Workload:
    """A named kind of query; ``build(client, rng)`` returns the callable running one."""

    name: str
    description: str
    build: Callable[[Any, Random], Operation]
    needs_tables: bool = False


def _select_int(client: Any, rng: Random) -> Operation:
    fetchval = client.fetchval
    sql = client.native("SELECT $1::int")
    draw = rng.random

    def op() -> Any:
        return fetchval(sql, (int(draw() * 1_000_000),))

    return op


def _point_lookup(client: Any, rng: Random) -> Operation:
    fetchone = client.fetchone
    sql = client.native(f"SELECT id, name, email, balance FROM {ACCOUNTS} WHERE id = $1")
    draw = rng.random

    def op() -> Any:
        return fetchone(sql, (int(draw() * ACCOUNT_ROWS) + 1,))

    return op


def _ten_rows(client: Any, rng: Random) -> Operation:
    fetchall = client.fetchall
    sql = client.native(
        f"SELECT id, name, email, created_at, updated_at FROM {ACCOUNTS} "
        "WHERE id >= $1 ORDER BY id LIMIT 10")
    draw = rng.random
    last_start = ACCOUNT_ROWS - 9

    def op() -> Any:
        return fetchall(sql, (int(draw() * last_start) + 1,))

    return op


def _insert_returning(client: Any, rng: Random) -> Operation:
    fetchone = client.fetchone
    sql = client.native(
        f"INSERT INTO {EVENTS} (account_id, note) VALUES ($1, $2) RETURNING id, created_at")
    draw = rng.random

    def op() -> Any:
        account = int(draw() * ACCOUNT_ROWS) + 1
        return fetchone(sql, (account, f"event for {account}"))

    return op


def _slow_mix(client: Any, rng: Random) -> Operation:
    fetchval = client.fetchval
    fast = client.native("SELECT $1::int")
    slow = client.native(f"SELECT $1::int FROM pg_sleep({SLOW_SECONDS})")
    draw = rng.random

    def op() -> Any:
        value = int(draw() * 1_000_000)
        return fetchval(slow if draw() < SLOW_FRACTION else fast, (value,))

    return op


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("select_int", "SELECT $1::int", _select_int),
    Workload("point_lookup", f"primary-key lookup in {ACCOUNT_ROWS:,} rows", _point_lookup,
             needs_tables=True),
    Workload("ten_rows", "10 rows of int, text and timestamptz", _ten_rows, needs_tables=True),
    Workload("insert_returning", "INSERT ... RETURNING id, created_at", _insert_returning,
             needs_tables=True),
    Workload("slow_mix", f"SELECT $1::int, {SLOW_FRACTION:.0%} pg_sleep({SLOW_SECONDS})",
             _slow_mix),
)}

# Run one at a time by ``setup_tables``; each is idempotent.
SETUP_STATEMENTS = (
    f"CREATE TABLE IF NOT EXISTS {ACCOUNTS} (id int PRIMARY KEY, name text NOT NULL, "
    "email text NOT NULL, balance bigint NOT NULL, created_at timestamptz NOT NULL, "
    "updated_at timestamptz NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS {EVENTS} (id bigserial PRIMARY KEY, account_id int NOT NULL, "
    "note text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())",
    f"TRUNCATE {EVENTS}",
)
SEED_STATEMENTS = (
    f"TRUNCATE {ACCOUNTS}",
    f"INSERT INTO {ACCOUNTS} SELECT i, 'account ' || i, 'user' || i || '@example.com', "
    "i * 100, timestamptz '2024-01-01 00:00:00+00' + i * interval '1 minute', "
    "timestamptz '2024-06-01 00:00:00+00' + i * interval '1 second' "
    f"FROM generate_series(1, {ACCOUNT_ROWS}) AS i",
    f"ANALYZE {ACCOUNTS}",
)


def setup_tables(execute: Callable[[str], Any], fetchval: Callable[[str], Any]) -> bool:
    """Create the tables and seed the accounts unless already seeded; True if it seeded."""
    for sql in SETUP_STATEMENTS:
        execute(sql)
    if fetchval(f"SELECT count(*) FROM {ACCOUNTS}") == ACCOUNT_ROWS:
        return False
    for sql in SEED_STATEMENTS:
        execute(sql)
    return True


def parse_workloads(text: str) -> list[str]:
    """``"select_int,ten_rows"`` or ``"all"`` -> workload names, checked."""
    names = list(WORKLOADS) if text.strip() == "all" else [
        name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in WORKLOADS]
    if unknown or not names:
        raise ValueError(f"unknown workload(s) {unknown}; choose from {', '.join(WORKLOADS)}")
    return names
