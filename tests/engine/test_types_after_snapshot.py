"""Types another session created after a transaction took its snapshot (REPEATABLE READ,
SERIALIZABLE): the transaction's own look at pg_type cannot see them, so they are looked up
out of it, on the multiplexed connections; every path decodes them as their types, in the
transaction and after it, and a type created inside the transaction is still found there."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import gevent
import pytest
from support.factory import close_clients_of, closed_after
from support.mux import unique_name

import pgmux.dbapi
from pgmux.client import Client
from pgmux.types import Range

# (how the type is created, a SELECT list naming it, what it decodes to)
KINDS = {
    "composite": ("CREATE TYPE {t} AS (a int, b text)", "'(1,x)'::{t}", (1, "x")),
    "enum array": ("CREATE TYPE {t} AS ENUM ('x', 'y')", "'{{y,x}}'::{t}[]", ["y", "x"]),
    "composite array": ("CREATE TYPE {t} AS (a int)", "ARRAY['(2)'::{t}]", [(2,)]),
    "range": ("CREATE TYPE {t} AS RANGE (subtype = int4)", "{t}(1, 3)", "range"),
}
ISOLATIONS = ("repeatable read", "serializable")


@pytest.fixture
def open_client(pg) -> Iterator[Callable[..., Client]]:
    yield from closed_after(lambda **options: Client(
        pg.dsn, **{"pipeline_size": 2, "pinned_size": 2, "acquire_timeout": 10, **options}))


@pytest.fixture
def ddl(open_client) -> Callable[[str], None]:
    """DDL from a client of its own (another application's migration)."""
    admin = open_client(pipeline_size=0)

    def run(sql: str) -> None:
        with admin.session() as s:
            s.execute(sql)

    return run


def created(ddl: Callable[[str], None], kind: str) -> tuple[str, Any]:
    """A type of ``kind`` created now by another session: (the SELECT list, the value)."""
    create, select, value = KINDS[kind]
    name = unique_name("snap")
    ddl(create.format(t=name))
    return select.format(t=name), value


def check(value: Any, expected: Any) -> None:
    if expected == "range":
        assert isinstance(value, Range) and (value.lower, value.upper) == (1, 3)
    else:
        assert value == expected


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_type_made_after_the_snapshot_decodes_in_the_transaction_and_after(
        kind, isolation, open_client, ddl):
    db = open_client()
    with db.transaction(isolation=isolation) as tx:
        assert tx.fetchval("SELECT 1") == 1  # the snapshot is taken
        select, expected = created(ddl, kind)
        check(tx.fetchval(f"SELECT {select}"), expected)
        check(tx.fetchval(f"SELECT {select}"), expected)  # and again, learned
    check(db.fetchval(f"SELECT {select}"), expected)  # multiplexed, after
    with db.session() as s:
        check(s.fetchval(f"SELECT {select}"), expected)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_pinned_path_sees_a_type_made_after_its_snapshot(kind, open_client, ddl):
    ways: dict[str, Callable[[Any, str], Any]] = {
        "fetchval": lambda s, sql: s.fetchval(sql),
        "stream": lambda s, sql: next(iter(s.stream(sql, (), batch=10)))[0],
        "pipeline": _through_a_pipeline,
    }
    for way, run in ways.items():
        db = open_client()  # (a fresh client: nothing learned yet)
        with db.session() as s:
            s.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            assert s.fetchval("SELECT 1") == 1
            select, expected = created(ddl, kind)
            check(run(s, f"SELECT {select}"), expected), way
            s.execute("COMMIT")


def _through_a_pipeline(s: Any, sql: str) -> Any:
    with s.pipeline() as p:
        handle = p.query(sql)
        p.sync()
    return handle.result().rows[0][0]


@pytest.fixture
def dbapi(pg) -> Iterator[Callable[..., Any]]:
    """dbapi() -> a pgmux.dbapi connection (its shared client closed after the test)."""
    yield from closed_after(lambda: pgmux.dbapi.connect(pg.dsn, acquire_timeout=10),
                            close_clients_of)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_dbapi_module_sees_a_type_made_after_its_snapshot(kind, dbapi, ddl):
    conn = dbapi()
    conn.isolation_level = "REPEATABLE READ"
    cur = conn.cursor()
    cur.execute("SELECT 1")  # the transaction begins, with its snapshot
    select, expected = created(ddl, kind)
    cur.execute(f"SELECT {select}")
    check(cur.fetchone()[0], expected)
    conn.commit()


def test_a_type_made_inside_the_transaction_is_found_there(open_client):
    db = open_client()
    name = unique_name("snap")
    with db.transaction(isolation="repeatable read") as tx:
        tx.execute(f"CREATE TYPE {name} AS (a int, b text)")
        assert tx.fetchval(f"SELECT '(5,z)'::{name}") == (5, "z")


def test_other_callers_go_on_while_the_lookup_runs_outside(open_client, ddl):
    db = open_client()
    with db.transaction(isolation="repeatable read") as tx:
        assert tx.fetchval("SELECT 1") == 1
        select, expected = created(ddl, "composite")
        others = [gevent.spawn(db.fetchval, "SELECT $1::int", [n]) for n in range(50)]
        check(tx.fetchval(f"SELECT {select}"), expected)
        assert [g.get(timeout=10) for g in others] == list(range(50))
