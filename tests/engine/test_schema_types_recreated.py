"""A type dropped and created again under cached statements (contract 12): the server keeps
plans that name the old type's OID (a composite, an enum, a domain, as a value or a
parameter) and fails them at Bind with XX000 "cache lookup failed for type" or 42704;
every path prepares such a statement again once, with no error and nothing run twice, and
a transaction block that already ran statements gets a typed error, then runs it next time."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.factory import close_clients_of, closed_after
from support.mux import unique_name

import pgmux.dbapi
from pgmux.client import Client
from pgmux.engine.statements import is_stale_statement_error
from pgmux.errors import DatabaseError, InternalError

# (what the type is, how it is created, a SELECT list naming it, the parameters, its value)
KINDS = {
    "composite": ("CREATE TYPE {t} AS (a int, b int)", "'(1,2)'::{t}", [1], (1, 2)),
    "composite parameter": ("CREATE TYPE {t} AS (a int, b int)", "$2::{t}", [1, "(3,4)"],
                            (3, 4)),
    "enum array": ("CREATE TYPE {t} AS ENUM ('x', 'y')", "'{{x,y}}'::{t}[]", [1], ["x", "y"]),
    "domain": ("CREATE DOMAIN {t} AS int", "3::{t}", [1], 3),
    "checked domain": ("CREATE DOMAIN {t} AS int CHECK (VALUE > 0)", "4::{t}", [1], 4),
}


@pytest.fixture
def open_client(pg) -> Iterator[Callable[..., Client]]:
    yield from closed_after(lambda **options: Client(
        pg.dsn, **{"pipeline_size": 2, "pinned_size": 1, "acquire_timeout": 10, **options}))


@pytest.fixture
def ddl(open_client) -> Callable[[str], None]:
    """DDL from a client of its own (another process's migration): the clients under test
    learn of it only from the server's answers."""
    admin = open_client(pipeline_size=0)

    def run(sql: str) -> None:
        with admin.session() as s:
            s.execute(sql)

    return run


@pytest.fixture
def dbapi(pg) -> Iterator[Callable[..., Any]]:
    """dbapi(isolation_level=None, **options) -> a pgmux.dbapi connection."""
    def connect(isolation_level: str | None = None, **options: Any) -> Any:
        conn = pgmux.dbapi.connect(pg.dsn, **{"acquire_timeout": 10, **options})
        conn.isolation_level = isolation_level
        return conn

    yield from closed_after(connect, close_clients_of)


def pyformat(sql: str, params: list[Any]) -> tuple[str, list[Any]]:
    """``sql`` with ``$n`` placeholders as the DB-API's ``%s``, and its parameters in order."""
    used: list[Any] = []

    def placeholder(match: re.Match[str]) -> str:
        used.append(params[int(match.group(1)) - 1])
        return "%s"
    return re.sub(r"\$(\d)", placeholder, sql), used


def ways(db: Client, dbapi: Callable[..., Any]) -> dict[str, Callable[[str, list[Any]], Any]]:
    """Every path a statement takes, each returning its first row."""
    def session(sql: str, params: list[Any]) -> Any:
        with db.session() as s:
            return s.fetchone(sql, params)

    def transaction(sql: str, params: list[Any]) -> Any:
        with db.transaction() as tx:
            return tx.fetchone(sql, params)

    def atomic(sql: str, params: list[Any]) -> Any:
        with db.atomic() as unit:
            row = unit.fetchone(sql, params)
        return row.result()

    def dbapi_path(conn: Any) -> Callable[[str, list[Any]], Any]:
        def run(sql: str, params: list[Any]) -> Any:
            cur = conn.cursor()
            cur.execute(*pyformat(sql, params))
            row = cur.fetchone()
            conn.commit()
            return row
        return run

    prepared: dict[str, Any] = {}

    def catalog(sql: str, params: list[Any]) -> Any:  # a statement of Client.prepare
        if sql not in prepared:
            prepared[sql] = db.prepare(unique_name("stmt"), sql)
        return prepared[sql].fetchone(params)

    return {"multiplexed": db.fetchone, "session": session, "transaction": transaction,
            "atomic": atomic, "prepared": catalog,
            "dbapi read committed": dbapi_path(dbapi()),  # a deferred transaction's read
            "dbapi autocommit": dbapi_path(dbapi(autocommit=True)),
            "dbapi repeatable read": dbapi_path(dbapi(isolation_level="REPEATABLE READ"))}


@pytest.mark.parametrize("kind", KINDS)
def test_a_type_recreated_under_cached_statements_on_every_path(kind, open_client, ddl, dbapi):
    create, select, params, expected = KINDS[kind]
    t, seq = unique_name("ty"), unique_name("seq")
    ddl(f"{create.format(t=t)}; CREATE SEQUENCE {seq}")
    runs = ways(open_client(), dbapi)
    sql = {name: f"SELECT nextval('{seq}'), {select.format(t=t)}, $1::int, '{name}'"
           for name in runs}
    counter = 0
    for name, run in runs.items():
        for _ in range(2):  # cached on the connection that runs it
            counter += 1
            assert run(sql[name], params) == (counter, expected, 1, name)
    ddl(f"DROP TYPE {t}; {create.format(t=t)}")
    for name, run in runs.items():
        for _ in range(2):  # the first execution after the change, and a later one
            counter += 1  # (nothing ran twice: the sequence moved once per call)
            assert run(sql[name], params) == (counter, expected, 1, name), name


@pytest.mark.parametrize("implicit", [False, True], ids=["pinned", "dbapi"])
def test_inside_a_transaction_that_ran_statements_a_typed_error_then_the_next_try_runs(
        implicit, open_client, ddl, dbapi):
    t = unique_name("ty")
    ddl(f"CREATE TYPE {t} AS (a int, b int)")
    sql = f"SELECT '(1,2)'::{t}, $1::int"
    if implicit:  # pgmux.dbapi pinned by its isolation level: a server transaction block
        conn = dbapi(isolation_level="SERIALIZABLE", pinned_size=1)  # one connection
        cur = conn.cursor()

        def run(statement: str, params: list[Any]) -> Any:
            cur.execute(*pyformat(statement, params))
            return cur.fetchone()
        assert run(sql, [1]) == ((1, 2), 1)
        conn.commit()
        ddl(f"DROP TYPE {t}; CREATE TYPE {t} AS (a int, b int)")
        assert run("SELECT $1::int", [2]) == (2,)  # the block is open: a retry is unsafe
        with pytest.raises(InternalError) as failed:
            run(sql, [1])
        conn.rollback()
        assert run(sql, [1]) == ((1, 2), 1)
        conn.commit()
    else:
        db = open_client(pipeline_size=0)
        with db.session() as s:
            assert s.fetchone(sql, [1]) == ((1, 2), 1)
            ddl(f"DROP TYPE {t}; CREATE TYPE {t} AS (a int, b int)")
            s.execute("BEGIN")
            assert s.fetchval("SELECT $1::int", [2]) == 2
            with pytest.raises(InternalError) as failed:
                s.fetchone(sql, [1])
            s.execute("ROLLBACK")
            assert s.fetchone(sql, [1]) == ((1, 2), 1)
    assert failed.value.sqlstate == "XX000"
    assert "prepared again on its next execution" in (failed.value.hint or "")


@pytest.mark.parametrize(("fields", "stale"), [
    ({"C": "XX000", "M": "cache lookup failed for type 16393", "R": "TupleDescInitEntry"}, True),
    ({"C": "XX000", "M": "cache lookup failed for type 16423", "R": "getTypeInputInfo"}, True),
    ({"C": "42704", "M": "type with OID 16399 does not exist", "R": "lookup_type_cache"}, True),
    ({"C": "XX000", "M": "cache lookup failed for relation 16393", "R": "x"}, False),
    ({"C": "42704", "M": 'type "nope" does not exist', "R": "typenameType"}, False),
])
def test_what_counts_as_a_type_gone_and_only_for_a_cached_statement(fields, stale):
    error = DatabaseError.from_fields({"S": "ERROR", **fields})
    assert is_stale_statement_error(error) is stale
    assert is_stale_statement_error(error, cached=False) is False  # parsed by this request
