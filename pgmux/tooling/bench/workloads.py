"""The benchmark workloads: what one operation of each is, and the tables they need.

A workload turns a client adapter, a random generator and a row count into a
zero-argument callable that runs one operation: a query, a transaction or a whole
stream. SQL is written with ``$n`` placeholders, each used once and in order; each
adapter translates it once to its driver's style. A workload that reports kinds of
operations separately (``kinds``) has its operation return the kind it ran.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from random import Random
from typing import Any

ACCOUNTS = "pgmux_bench_accounts"
EVENTS = "pgmux_bench_events"
ACCOUNT_ROWS = 100_000
SLOW_FRACTION = 0.01
SLOW_SECONDS = 0.05
TPCB = "pgmux_bench_tpcb"  # prefix of the pgbench-like tables: _branches, _tellers, ...
TPCB_SCALE = 4  # branches; pgbench -i -s 4 (as many branches as the 4 connections)
TPCB_TELLERS, TPCB_ACCOUNTS = 10, 100_000  # per branch, as pgbench
WIDE = "pgmux_bench_wide"
WIDE_ROWS = 100_000  # the largest stream
WIDE_RESULT_ROWS = 1_000
STREAM_BATCH = 1_000
WIDE_COLUMNS = "id, name, at, amount, score, flag, uid, doc"

Operation = Callable[[], Any]
Steps = Sequence[tuple[str, Sequence[Any]]]


@dataclass(frozen=True)
class Workload:
    """A named kind of operation; ``build(client, rng, rows)`` returns the callable running one.

    ``rows``: rows per operation (the default; ``--stream-rows`` sets the stream's).
    ``pinned``: pgmux runs it on pinned connections (``pipeline_size=0``).
    ``clients``: the clients it applies to (None: all). ``count_turns``: also measure
    its client round trips (an extra case through a counting proxy).
    """

    name: str
    description: str
    build: Callable[[Any, Random, int], Operation]
    tables: tuple[str, ...] = ()
    unit: str = "query"
    rows: int = 1
    pinned: bool = False
    clients: tuple[str, ...] | None = None
    kinds: bool = False
    count_turns: bool = False
    own_process: bool = False  # a fresh worker process (clean memory figures)


def _select_int(client: Any, rng: Random, rows: int) -> Operation:
    fetchval = client.fetchval
    sql = client.native("SELECT $1::int")
    draw = rng.random

    def op() -> Any:
        return fetchval(sql, (int(draw() * 1_000_000),))

    return op


POINT_SQL = f"SELECT id, name, email, balance FROM {ACCOUNTS} WHERE id = $1"


def _point_lookup(client: Any, rng: Random, rows: int) -> Operation:
    fetchone = client.fetchone
    sql = client.native(POINT_SQL)
    draw = rng.random

    def op() -> Any:
        return fetchone(sql, (int(draw() * ACCOUNT_ROWS) + 1,))

    return op


def _ten_rows(client: Any, rng: Random, rows: int) -> Operation:
    fetchall = client.fetchall
    sql = client.native(
        f"SELECT id, name, email, created_at, updated_at FROM {ACCOUNTS} "
        "WHERE id >= $1 ORDER BY id LIMIT 10")
    draw = rng.random
    last_start = ACCOUNT_ROWS - 9

    def op() -> Any:
        return fetchall(sql, (int(draw() * last_start) + 1,))

    return op


def _insert_returning(client: Any, rng: Random, rows: int) -> Operation:
    fetchone = client.fetchone
    sql = client.native(
        f"INSERT INTO {EVENTS} (account_id, note) VALUES ($1, $2) RETURNING id, created_at")
    draw = rng.random

    def op() -> Any:
        account = int(draw() * ACCOUNT_ROWS) + 1
        return fetchone(sql, (account, f"event for {account}"))

    return op


def _slow_mix(client: Any, rng: Random, rows: int) -> Operation:
    """The point lookup; 1 in 100 instead sleeps 50 ms on the server. Returns the kind."""
    fetchone, fetchval = client.fetchone, client.fetchval
    fast = client.native(POINT_SQL)
    slow = client.native(f"SELECT $1::int FROM pg_sleep({SLOW_SECONDS})")
    draw = rng.random

    def op() -> str:
        key = int(draw() * ACCOUNT_ROWS) + 1
        if draw() < SLOW_FRACTION:
            fetchval(slow, (key,))
            return "slow"
        fetchone(fast, (key,))
        return "fast"

    return op


def tpcb_statements(prefix: str) -> tuple[str, ...]:
    """pgbench's TPC-B-like transaction on ``prefix``'s tables: its five statements."""
    return (
        f"UPDATE {prefix}_accounts SET abalance = abalance + $1 WHERE aid = $2",
        f"SELECT abalance FROM {prefix}_accounts WHERE aid = $1",
        f"UPDATE {prefix}_tellers SET tbalance = tbalance + $1 WHERE tid = $2",
        f"UPDATE {prefix}_branches SET bbalance = bbalance + $1 WHERE bid = $2",
        f"INSERT INTO {prefix}_history (tid, bid, aid, delta, mtime) "
        "VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)",
    )


# The names of each statement's parameters, in order (pgbench's script variables).
TPCB_PARAMETERS = (("delta", "aid"), ("aid",), ("delta", "tid"), ("delta", "bid"),
                   ("tid", "bid", "aid", "delta"))


def tpcb_draw(rng: Random, scale: int) -> Callable[[], tuple[tuple[int, ...], ...]]:
    """A callable drawing one transaction's parameters at ``scale``, per statement."""
    randint = rng.randint
    accounts, tellers = scale * TPCB_ACCOUNTS, scale * TPCB_TELLERS

    def draw() -> tuple[tuple[int, ...], ...]:
        aid, tid = randint(1, accounts), randint(1, tellers)
        bid, delta = randint(1, scale), randint(-5000, 5000)
        return (delta, aid), (aid,), (delta, tid), (delta, bid), (tid, bid, aid, delta)

    return draw


def tpcb_transactions(prefix: str, scale: int) -> Callable[[Any, Random, int], Operation]:
    """The workload builder of pgbench's TPC-B-like transaction on ``prefix``'s tables at
    ``scale``: 5 statements between BEGIN and COMMIT, through the client's transaction()."""

    def build(client: Any, rng: Random, rows: int) -> Operation:
        transaction = client.transaction
        sqls = [client.native(sql) for sql in tpcb_statements(prefix)]
        draw = tpcb_draw(rng, scale)

        def op() -> Any:
            return transaction(list(zip(sqls, draw(), strict=True)))

        return op

    return build


_tpcb = tpcb_transactions(TPCB, TPCB_SCALE)


def _wide(client: Any, rng: Random, rows: int) -> Operation:
    fetchall = client.fetchall
    sql = client.native(f"SELECT {WIDE_COLUMNS} FROM {WIDE} WHERE id BETWEEN $1 AND $2")
    draw = rng.random
    last_start = WIDE_ROWS - rows + 1

    def op() -> Any:
        start = int(draw() * last_start) + 1
        return fetchall(sql, (start, start + rows - 1))

    return op


def _wide_stream(client: Any, rng: Random, rows: int) -> Operation:
    stream = client.stream
    sql = client.native(f"SELECT {WIDE_COLUMNS} FROM {WIDE} WHERE id <= $1")

    def op() -> Any:
        return stream(sql, (rows,), STREAM_BATCH)

    return op


PEERS = ("pgmux", "pgmux-python", "pgmux-before", "psycopg2", "psycopg3")
WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("select_int", "SELECT $1::int", _select_int),
    Workload("point_lookup", f"primary-key lookup in {ACCOUNT_ROWS:,} rows", _point_lookup,
             tables=("accounts",)),
    Workload("ten_rows", "10 rows of int, text and timestamptz", _ten_rows,
             tables=("accounts",)),
    Workload("insert_returning", "INSERT ... RETURNING id, created_at", _insert_returning,
             tables=("accounts",)),
    Workload("slow_mix", f"point lookups, {SLOW_FRACTION:.0%} SELECT pg_sleep({SLOW_SECONDS})",
             _slow_mix, tables=("accounts",), kinds=True),
    Workload("tpcb", f"pgbench TPC-B-like transaction (scale {TPCB_SCALE}), pgmux "
             "transaction()", _tpcb, tables=("tpcb",), unit="tx", pinned=True, clients=PEERS,
             count_turns=True),
    Workload("wide", f"{WIDE_RESULT_ROWS:,} rows x 8 typed columns", _wide, tables=("wide",),
             unit="result", rows=WIDE_RESULT_ROWS),
    Workload("wide_stream", "rows x 8 typed columns streamed (pgmux session.stream(), "
             "server-side cursors)", _wide_stream, tables=("wide",), unit="stream",
             rows=WIDE_ROWS, pinned=True, clients=PEERS, own_process=True),
)}


@dataclass(frozen=True)
class TableSet:
    """Tables some workloads need: created if missing, seeded unless ``count_sql`` already
    gives ``rows``; ``setup`` runs every time (each statement idempotent)."""

    setup: tuple[str, ...]
    count_sql: str
    rows: int
    seed: tuple[str, ...]


def pgbench_tables(prefix: str, scale: int) -> TableSet:
    """pgbench -i's schema and data (filler columns included) at ``scale``, as ``prefix``'s
    tables; the history emptied at every run."""
    return TableSet(
        setup=(
            f"CREATE TABLE IF NOT EXISTS {prefix}_branches (bid int PRIMARY KEY, bbalance int, "
            "filler char(88)) WITH (fillfactor = 100)",
            f"CREATE TABLE IF NOT EXISTS {prefix}_tellers (tid int PRIMARY KEY, bid int, "
            "tbalance int, filler char(84)) WITH (fillfactor = 100)",
            f"CREATE TABLE IF NOT EXISTS {prefix}_accounts (aid int PRIMARY KEY, bid int, "
            "abalance int, filler char(84)) WITH (fillfactor = 100)",
            f"CREATE TABLE IF NOT EXISTS {prefix}_history (tid int, bid int, aid int, delta int, "
            "mtime timestamp, filler char(22))",
            f"TRUNCATE {prefix}_history",
        ),
        count_sql=f"SELECT count(*) FROM {prefix}_accounts", rows=scale * TPCB_ACCOUNTS,
        seed=(
            f"TRUNCATE {prefix}_branches, {prefix}_tellers, {prefix}_accounts",
            f"INSERT INTO {prefix}_branches SELECT i, 0, '' FROM generate_series(1, {scale}) i",
            f"INSERT INTO {prefix}_tellers SELECT i, (i - 1) / {TPCB_TELLERS} + 1, 0, '' "
            f"FROM generate_series(1, {scale * TPCB_TELLERS}) i",
            f"INSERT INTO {prefix}_accounts SELECT i, (i - 1) / {TPCB_ACCOUNTS} + 1, 0, '' "
            f"FROM generate_series(1, {scale * TPCB_ACCOUNTS}) i",
            f"VACUUM ANALYZE {prefix}_branches, {prefix}_tellers, {prefix}_accounts",
        ))


TABLE_SETS: dict[str, TableSet] = {
    "accounts": TableSet(
        setup=(
            f"CREATE TABLE IF NOT EXISTS {ACCOUNTS} (id int PRIMARY KEY, name text NOT NULL, "
            "email text NOT NULL, balance bigint NOT NULL, created_at timestamptz NOT NULL, "
            "updated_at timestamptz NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS {EVENTS} (id bigserial PRIMARY KEY, "
            "account_id int NOT NULL, note text NOT NULL, "
            "created_at timestamptz NOT NULL DEFAULT now())",
            f"TRUNCATE {EVENTS}",
        ),
        count_sql=f"SELECT count(*) FROM {ACCOUNTS}", rows=ACCOUNT_ROWS,
        seed=(
            f"TRUNCATE {ACCOUNTS}",
            f"INSERT INTO {ACCOUNTS} SELECT i, 'account ' || i, 'user' || i || '@example.com', "
            "i * 100, timestamptz '2024-01-01 00:00:00+00' + i * interval '1 minute', "
            "timestamptz '2024-06-01 00:00:00+00' + i * interval '1 second' "
            f"FROM generate_series(1, {ACCOUNT_ROWS}) AS i",
            f"ANALYZE {ACCOUNTS}",
        )),
    # pgbench -i's schema and data (filler columns included), at scale TPCB_SCALE.
    "tpcb": pgbench_tables(TPCB, TPCB_SCALE),
    # int, text, timestamptz, numeric(12,2), float8, bool, uuid, jsonb
    "wide": TableSet(
        setup=(
            f"CREATE TABLE IF NOT EXISTS {WIDE} (id int PRIMARY KEY, name text NOT NULL, "
            "at timestamptz NOT NULL, amount numeric(12,2) NOT NULL, score float8 NOT NULL, "
            "flag bool NOT NULL, uid uuid NOT NULL, doc jsonb NOT NULL)",
        ),
        count_sql=f"SELECT count(*) FROM {WIDE}", rows=WIDE_ROWS,
        seed=(
            f"TRUNCATE {WIDE}",
            f"INSERT INTO {WIDE} SELECT i, 'item number ' || i, "
            "timestamptz '2024-01-01 00:00:00+00' + i * interval '37 seconds', "
            "(i * 12.34)::numeric(12,2), i / 7.0, i % 3 = 0, md5(i::text)::uuid, "
            "jsonb_build_object('id', i, 'tags', jsonb_build_array('a', 'b'), 'ok', i % 2 = 0) "
            f"FROM generate_series(1, {WIDE_ROWS}) AS i",
            f"ANALYZE {WIDE}",
        )),
}


def tables_needed(workloads: Sequence[str]) -> list[str]:
    """The table sets the named workloads need, in a stable order."""
    return [name for name in TABLE_SETS
            if any(name in WORKLOADS[w].tables for w in workloads)]


def setup_tables(execute: Callable[[str], Any], fetchval: Callable[[str], Any],
                 sets: Sequence[str] = ("accounts",)) -> list[str]:
    """Create the table sets and seed those not already seeded; the names it seeded."""
    seeded = []
    for name in sets:
        tables = TABLE_SETS[name]
        for sql in tables.setup:
            execute(sql)
        if fetchval(tables.count_sql) == tables.rows:
            continue
        for sql in tables.seed:
            execute(sql)
        seeded.append(name)
    return seeded


def parse_workloads(text: str, extra: Sequence[str] = ()) -> list[str]:
    """``"select_int,ten_rows"`` or ``"all"`` -> workload names, checked (``extra``: other
    names allowed, such as the http suite)."""
    known = [*WORKLOADS, *extra]
    names = known if text.strip() == "all" else [
        name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise ValueError(f"unknown workload(s) {unknown}; choose from {', '.join(known)}")
    return names
