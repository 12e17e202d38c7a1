"""The schema moves under running clients (contract 12): tables recreated with other column
types between two executions of the same SQL, ALTER TABLE under concurrent load on named and
unnamed statements, an enum recreated in one transaction, ALTER TYPE ... ADD VALUE; user
types (enums, domains, arrays of them) decode as their types on every path, with no error."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import gevent
import pytest
from support.factory import closed_after
from support.mux import join_all, unique_name

from pgmux.client import Client
from pgmux.engine import Engine
from pgmux.pool import dispatch

LOAD_GREENLETS = 32


@pytest.fixture
def open_client(pg) -> Iterator[Callable[..., Client]]:
    yield from closed_after(lambda **options: Client(
        pg.dsn, **{"pipeline_size": 2, "pinned_size": 1, "acquire_timeout": 10, **options}))


@pytest.fixture
def ddl(open_client) -> Callable[[str], None]:
    """Run DDL from a client of its own (a migration in another process), without blocking
    the hub: the clients under test learn of it only from the server's answers."""
    admin = open_client(pipeline_size=0)

    def run(sql: str) -> None:
        with admin.session() as s:
            s.execute(sql)

    return run


def every_kind(open_client) -> dict[str, Callable[[str, list[Any]], Any]]:
    """The ways a statement runs: named statements (multiplexed, on both connections, and
    pinned), unnamed ones (pooler="transaction"; a session's statement without
    parameters, in a transaction), each returning the first row."""
    named, unnamed = open_client(), open_client(pooler="transaction")

    def pinned(db: Client) -> Callable[[str, list[Any]], Any]:
        def run(sql: str, params: list[Any]) -> Any:
            with db.transaction() as tx:
                return tx.fetchone(sql, params)
        return run

    def both_connections(db: Client) -> Callable[[str, list[Any]], Any]:
        def run(sql: str, params: list[Any]) -> Any:
            rows = [job.get() for job in [gevent.spawn(db.fetchone, sql, params)
                                          for _ in range(4)]]
            assert len(set(map(repr, rows))) == 1, rows
            return rows[0]
        return run

    return {"multiplexed": both_connections(named), "pinned": pinned(named),
            "pooler=transaction": both_connections(unnamed),
            "pooler=transaction pinned": pinned(unnamed)}


def test_a_table_recreated_with_other_column_types_between_two_executions(open_client, ddl):
    table, mood, posint = unique_name("t"), unique_name("mood"), unique_name("posint")
    kinds = every_kind(open_client)
    sql = f"SELECT status FROM {table} WHERE id = $1"
    steps = [
        (f"CREATE TABLE {table} (id int, status int); INSERT INTO {table} VALUES (1, 7)", 7),
        (f"DROP TABLE {table}; CREATE TYPE {mood} AS ENUM ('happy', 'sad'); "
         f"CREATE TABLE {table} (id int, status {mood}); "
         f"INSERT INTO {table} VALUES (1, 'sad')", "sad"),
        (f"DROP TABLE {table}; CREATE TABLE {table} (id int, status {mood}[]); "
         f"INSERT INTO {table} VALUES (1, '{{happy,sad}}')", ["happy", "sad"]),
        (f"DROP TABLE {table}; CREATE DOMAIN {posint} AS int CHECK (VALUE > 0); "
         f"CREATE TABLE {table} (id int, status {posint}); INSERT INTO {table} VALUES (1, 5)",
         5),
        (f"DROP TABLE {table}; CREATE TABLE {table} (id int, status {posint}[]); "
         f"INSERT INTO {table} VALUES (1, '{{1,2}}')", [1, 2]),
    ]
    for migration, expected in steps:
        ddl(migration)
        for name, run in kinds.items():
            for _ in range(2):  # the first execution after the change, and a later one
                assert run(sql, [1]) == (expected,), (name, migration)


def test_user_types_decode_as_their_types_on_every_path(open_client, ddl):
    mood, posint, money = unique_name("mood"), unique_name("posint"), unique_name("cash")
    ddl(f"CREATE TYPE {mood} AS ENUM ('happy', 'sad'); "
        f"CREATE DOMAIN {posint} AS int CHECK (VALUE > 0); "
        f"CREATE DOMAIN {money} AS numeric(10, 2)")
    sql = (f"SELECT 'happy'::{mood}, '{{happy,sad}}'::{mood}[], 3::{posint}, "
           f"'{{1,2}}'::{posint}[], 1.5::{money}, $1::int")
    expected = ("happy", ["happy", "sad"], 3, [1, 2], Decimal("1.50"), 1)
    for name, run in every_kind(open_client).items():
        for _ in range(2):
            assert run(sql, [1]) == expected, name
    db = open_client(pipeline_size=0)
    with db.session() as s:  # a script: the simple query protocol, text results
        assert s.query(f"SELECT 1; SELECT 'sad'::{mood}, 4::{posint}").rows == [("sad", 4)]
        with s.pipeline() as p:  # open operations: their types are looked up beforehand
            op = p.query(f"SELECT '{{sad}}'::{mood}[], 5::{posint}, $1::int", [1])
        assert op.result().rows == [(["sad"], 5, 1)]
    with open_client(pipeline_size=0).session() as s:  # a stream, by a client of its own
        rows = list(s.stream(f"SELECT '{{happy}}'::{mood}[] FROM generate_series(1, 3)"))
        assert rows == [(["happy"],)] * 3


def test_alter_table_under_concurrent_load_gives_no_error_and_right_values(open_client, ddl):
    table = unique_name("alter_load")
    ddl(f"CREATE TABLE {table} (id int PRIMARY KEY, v int); INSERT INTO {table} VALUES (1, 5)")
    clients = [open_client(), open_client(pooler="transaction")]
    # (migration, the rows SELECT * may return once it ran)
    migrations = [
        (f"ALTER TABLE {table} ALTER v TYPE bigint", {(1, 5)}),
        (f"ALTER TABLE {table} ALTER v TYPE text", {(1, "5")}),
        (f"ALTER TABLE {table} ADD COLUMN w int DEFAULT 7", {(1, "5", 7)}),
        (f"ALTER TABLE {table} ALTER v TYPE numeric USING v::numeric", {(1, Decimal(5), 7)}),
        (f"ALTER TABLE {table} DROP COLUMN w", {(1, Decimal(5))}),
        (f"ALTER TABLE {table} ALTER v TYPE point USING point(v, v)", {(1, "(5,5)")}),
    ]
    allowed = {(1, 5)}
    seen: list[Any] = []
    errors: list[BaseException] = []
    running = True

    def load(db: Client, named: bool) -> None:
        sql = f"SELECT * FROM {table} WHERE id = $1"
        while running:
            try:
                seen.append(db.fetchone(sql, [1]))
            except Exception as exc:  # every error is a failure of the test
                errors.append(exc)
                return

    jobs = [gevent.spawn(load, db, index == 0) for index, db in enumerate(clients)
            for _ in range(LOAD_GREENLETS // 2)]
    try:
        for migration, rows in migrations:
            gevent.sleep(0.05)
            ddl(migration)
            allowed |= rows
            gevent.sleep(0.05)
    finally:
        running = False
        join_all(jobs)
    assert not errors, errors[:3]
    assert set(seen) <= allowed and (1, "(5,5)") in seen
    for db in clients:  # and once the schema is still, every client sees the last state
        assert db.fetchone(f"SELECT * FROM {table} WHERE id = $1", [1]) == (1, "(5,5)")


def test_an_enum_recreated_in_one_transaction_under_load(open_client, ddl):
    table, mood = unique_name("enum_load"), unique_name("mood")
    ddl(f"CREATE TYPE {mood} AS ENUM ('happy', 'sad'); "
        f"CREATE TABLE {table} (id int, status {mood}, tags {mood}[]); "
        f"INSERT INTO {table} VALUES (1, 'happy', '{{happy,sad}}')")
    clients = [open_client(), open_client(pooler="transaction")]
    seen: list[Any] = []
    errors: list[BaseException] = []
    running = True

    def load(db: Client) -> None:
        while running:
            try:
                seen.append(db.fetchone(f"SELECT status, tags FROM {table} WHERE id = $1", [1]))
            except Exception as exc:
                errors.append(exc)
                return

    jobs = [gevent.spawn(load, db) for db in clients for _ in range(LOAD_GREENLETS // 2)]
    try:
        gevent.sleep(0.05)
        ddl(f"BEGIN; ALTER TABLE {table} ALTER status TYPE text, ALTER tags TYPE text[]; "
            f"DROP TYPE {mood}; CREATE TYPE {mood} AS ENUM ('happy', 'sad', 'calm'); "
            f"ALTER TABLE {table} ALTER status TYPE {mood} USING status::{mood}, "
            f"ALTER tags TYPE {mood}[] USING tags::{mood}[]; COMMIT")
        gevent.sleep(0.1)
    finally:
        running = False
        join_all(jobs)
    assert not errors, errors[:3]
    assert set(map(repr, seen)) == {repr(("happy", ["happy", "sad"]))}


def test_alter_type_add_value(open_client, ddl):
    table, mood = unique_name("add_value"), unique_name("mood")
    ddl(f"CREATE TYPE {mood} AS ENUM ('happy'); CREATE TABLE {table} (status {mood}); "
        f"INSERT INTO {table} VALUES ('happy')")
    kinds = every_kind(open_client)
    sql = f"SELECT status, ARRAY[status] FROM {table} WHERE $1::int = 1"
    for run in kinds.values():
        assert run(sql, [1]) == ("happy", ["happy"])
    ddl(f"ALTER TYPE {mood} ADD VALUE 'ecstatic'")
    ddl(f"UPDATE {table} SET status = 'ecstatic'")
    for name, run in kinds.items():
        assert run(sql, [1]) == ("ecstatic", ["ecstatic"]), name


def test_a_type_is_looked_up_once_per_client_on_the_connection_that_met_it(open_client, ddl):
    mood = unique_name("mood")
    ddl(f"CREATE TYPE {mood} AS ENUM ('happy')")
    db = open_client(pipeline_size=1)
    units = db.stats()["pipeline"]["drivers"]
    assert db.fetchval(f"SELECT 'happy'::{mood}, $1::int", [1]) == "happy"
    after_first = db.stats()["pipeline"]["drivers"][0]["units"]
    assert db.fetchval(f"SELECT ARRAY['happy'::{mood}], $1::int", [2]) == ["happy"]
    after_second = db.stats()["pipeline"]["drivers"][0]["units"]
    # the first: its description, the lookup, the statement; the second: no lookup (the
    # enum and its array were learned together)
    assert units == [] or units[0]["units"] == 0
    assert after_first == 3 and after_second - after_first == 2


def test_ddl_through_one_pinned_connection_reaches_every_other_one(open_client, ddl):
    """Pinned connections keep their prepared statements between transactions; DDL the
    client runs on one of them makes every other one close its cached statements, so a
    statement that is not its transaction's first (where no retry is possible) still runs."""
    db = open_client(pipeline_size=0, pinned_size=2)
    table = unique_name("moved")
    sql = f"SELECT v FROM {table} WHERE id = $1"
    ddl(f"CREATE TABLE {table} (id int, v int); INSERT INTO {table} VALUES (1, 5)")

    def in_transaction(expected: Any) -> int:
        with db.transaction() as tx:
            tx.execute("SELECT 1")
            assert tx.fetchone(sql, [1]) == (expected,)
            gevent.sleep(0.01)  # hold it: the other greenlet takes the other connection
            return tx.fetchval("SELECT pg_backend_pid()")

    pids = {job.get() for job in [gevent.spawn(in_transaction, 5) for _ in range(2)]}
    assert len(pids) == 2  # the statement is cached on both pinned connections
    with db.session() as s:  # one of them runs the migration
        s.execute(f"ALTER TABLE {table} ALTER v TYPE text")
    again = {job.get() for job in [gevent.spawn(in_transaction, "5") for _ in range(2)]}
    assert again == pids


def test_a_description_that_went_stale_under_its_request_is_not_recalled(open_client, pg):
    """The schema changes between a request's description and the request itself: its
    execution comes back stale (the result type changed), the engine drops the
    description, and so does the request: it is described again, not built from what it
    had kept (before: recalled, and the dropped description put back)."""
    table = unique_name("t")
    pg.admin(f"CREATE TABLE {table} (a int); INSERT INTO {table} VALUES (1)")
    db = open_client(pipeline_size=1)
    db.fetchval("SELECT 1")  # (its pipeline pool opened)
    sql = f"SELECT * FROM {table} WHERE a = $1"
    built: list[str] = []

    def build(engine, *args):
        if len(built) == 1:  # described: a migration before the request itself runs
            pg.admin(f"ALTER TABLE {table} ADD COLUMN b text DEFAULT 'x'")
        exchange = Engine.query(engine, *args)
        built.append("describe" if exchange.DESCRIBES else "run")
        return exchange

    try:
        exchange = dispatch.run(db._pipeline, build, (sql, (23,), (1,), [b"\0\0\0\1"]), None)
        assert exchange.result().rows == [(1, "x")]
        assert built == ["describe", "run", "describe", "run"]
    finally:
        pg.admin(f"DROP TABLE {table}")
