"""Two-phase commit through pgmux.dbapi (PEP 249's tpc_*) against a real server: nothing is
ever left in pg_prepared_xacts by a failure, and COMMIT/ROLLBACK PREPARED never run inside
a transaction block."""

from __future__ import annotations

import uuid

import pytest
from support.factory import close_clients_of, closed_after

import pgmux.dbapi
from pgmux import errors
from pgmux.dbapi.twophase import Xid


@pytest.fixture
def table(pg):
    name = f"tpc_{uuid.uuid4().hex[:10]}"
    if pg.admin("SELECT current_setting('max_prepared_transactions')") == "0":
        pytest.skip("the server has max_prepared_transactions = 0")
    assert prepared(pg) == []
    pg.admin(f"CREATE TABLE {name} (id int PRIMARY KEY)")
    yield name
    leftover = prepared(pg) + [""] * prepared_count(pg, "")  # ('' reads as no line)
    for gid in leftover:  # (so that DROP TABLE does not wait for their locks)
        pg.admin("ROLLBACK PREPARED " + literal(gid))
    pg.admin(f"DROP TABLE {name}")
    assert not leftover, f"left prepared: {leftover}"


@pytest.fixture
def connect(pg):
    yield from closed_after(lambda **options: pgmux.dbapi.connect(pg.dsn, **{
        "application_name": f"tpc-{uuid.uuid4().hex[:8]}", "acquire_timeout": 10, **options}),
        close_clients_of)


def prepared(pg) -> list[str]:
    """The gids prepared in the test database (these tests are the only ones preparing)."""
    found = pg.admin("SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
                     "ORDER BY prepared")
    return found.splitlines() if found else []


def literal(text: str) -> str:
    return "E'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def rows(pg, table) -> list[int]:
    return [int(x) for x in pg.admin(f"SELECT id FROM {table} ORDER BY id").split()]


def insert(conn, table, value) -> None:
    conn.cursor().execute(f"INSERT INTO {table} VALUES (%s)", (value,))


def prepare(conn, table, xid, value=1) -> None:
    """A TPC transaction named ``xid`` that inserts ``value``, prepared."""
    conn.tpc_begin(xid)
    insert(conn, table, value)
    conn.tpc_prepare()


def test_prepare_then_commit(pg, table, connect):
    conn = connect()
    xid = conn.xid(42, f"g-{table}", "b1")
    prepare(conn, table, xid)
    assert prepared(pg) == [xid.gid()]
    assert rows(pg, table) == []  # not committed yet
    assert not conn.in_transaction  # the transaction is the server's now
    assert conn.client.stats()["pinned"]["active"] == 0  # the pinned connection went back
    conn.tpc_commit()
    assert rows(pg, table) == [1] and prepared(pg) == []
    insert(conn, table, 2)  # an ordinary transaction follows
    conn.commit()
    assert rows(pg, table) == [1, 2]


def test_prepare_then_rollback(pg, table, connect):
    conn = connect(pinned_size=1)
    prepare(conn, table, f"plain-gid-{table}")
    # ROLLBACK PREPARED takes the one pinned connection: it is not held by the prepared
    # transaction, and is not inside a BEGIN (the server would refuse it)
    conn.tpc_rollback()
    assert rows(pg, table) == [] and prepared(pg) == []


def test_one_phase_commit_and_rollback_without_prepare(pg, table, connect):
    conn = connect()
    conn.tpc_begin(conn.xid(1, f"a-{table}", ""))
    insert(conn, table, 1)
    conn.tpc_commit()
    conn.tpc_begin(conn.xid(1, f"b-{table}", ""))
    insert(conn, table, 2)
    conn.tpc_rollback()
    assert rows(pg, table) == [1] and prepared(pg) == []


def test_an_empty_tpc_transaction_prepares_and_commits(pg, table, connect):
    conn = connect()
    conn.tpc_begin(f"empty-{table}")
    conn.tpc_prepare()
    assert prepared(pg) == [f"empty-{table}"]
    conn.tpc_commit()
    assert prepared(pg) == []


def test_recover_from_another_connection(pg, table, connect):
    first = connect()
    xid = first.xid(7, f"r-{table}", "branch")
    prepare(first, table, xid)
    first.close()  # a prepared transaction outlives its connection
    other = connect(autocommit=True)
    found = other.tpc_recover()
    assert found == [xid] and found[0] == (7, f"r-{table}", "branch")
    assert found[0].database == "pgmux_test" and found[0].owner == "postgres"
    assert found[0].prepared is not None
    other.tpc_commit(found[0])
    assert rows(pg, table) == [1] and prepared(pg) == []


def test_recover_a_plain_gid_and_roll_it_back(pg, table, connect):
    first = connect()
    prepare(first, table, f"plain-{table}")
    other = connect()
    other.cursor().execute("SELECT 1")  # a transaction of its own is open
    with pytest.raises(errors.ProgrammingError, match="outside a transaction"):
        other.tpc_rollback(f"plain-{table}")
    other.rollback()
    gids = [str(x) for x in other.tpc_recover()]
    assert f"plain-{table}" in gids
    assert Xid.from_string(f"plain-{table}").format_id is None
    other.tpc_rollback(f"plain-{table}")
    assert rows(pg, table) == [] and prepared(pg) == []


def test_finishing_a_transaction_another_connection_finished_fails_clearly(
        pg, table, connect):
    first = connect()
    first.tpc_begin(f"twice-{table}")
    first.tpc_prepare()
    connect().tpc_rollback(f"twice-{table}")
    with pytest.raises(errors.ProgrammingError, match="does not exist"):
        first.tpc_commit()
    assert prepared(pg) == []
    insert(first, table, 1)  # the handle is usable again
    first.commit()
    assert rows(pg, table) == [1]


def test_prepare_of_a_failed_transaction_prepares_nothing(pg, table, connect):
    conn = connect()
    conn.tpc_begin(f"failed-{table}")
    with pytest.raises(errors.DataError):
        conn.cursor().execute("SELECT 1/0")
    with pytest.raises(errors.InternalError, match="nothing was prepared"):
        conn.tpc_prepare()
    assert prepared(pg) == []
    conn.tpc_rollback()
    insert(conn, table, 1)
    conn.commit()
    assert rows(pg, table) == [1]


def test_prepare_the_server_refuses_prepares_nothing(pg, table, connect):
    conn = connect()
    conn.tpc_begin(f"temp-{table}")
    conn.cursor().execute("CREATE TEMP TABLE scratch (x int)")
    with pytest.raises(errors.NotSupportedError, match="temporary"):
        conn.tpc_prepare()  # 0A000: a transaction that touched temporary objects
    conn.tpc_rollback()
    assert prepared(pg) == []
    assert not conn.in_transaction


def test_misuse_is_refused(pg, table, connect):
    auto = connect(autocommit=True)
    with pytest.raises(errors.ProgrammingError, match="autocommit"):
        auto.tpc_begin("x")
    conn = connect()
    conn.cursor().execute("SELECT 1")
    with pytest.raises(errors.ProgrammingError, match="outside a transaction"):
        conn.tpc_begin("x")
    conn.rollback()
    with pytest.raises(errors.ProgrammingError, match="tpc_begin"):
        conn.tpc_prepare()
    conn.tpc_begin(f"misuse-{table}")
    with pytest.raises(errors.ProgrammingError, match="two-phase"):
        conn.commit()
    with pytest.raises(errors.ProgrammingError, match="two-phase"):
        conn.rollback()
    with pytest.raises(errors.ProgrammingError, match="autocommit"):
        conn.autocommit = True
    insert(conn, table, 1)
    conn.tpc_prepare()
    with pytest.raises(errors.ProgrammingError, match="prepared"):
        insert(conn, table, 2)
    with pytest.raises(errors.ProgrammingError, match="already"):
        conn.tpc_prepare()
    conn.tpc_rollback()
    assert rows(pg, table) == [] and prepared(pg) == []
    with pytest.raises(errors.ProgrammingError, match="NUL"):
        conn.tpc_begin("a\x00b")


def test_xid_names_as_psycopg2_writes_them():
    xid = Xid(42, "gtrid", "bqual")
    assert xid.gid() == "42_Z3RyaWQ=_YnF1YWw=" and str(xid) == xid.gid()
    assert Xid.from_string("42_Z3RyaWQ=_YnF1YWw=") == xid == (42, "gtrid", "bqual")
    assert tuple(xid) == (42, "gtrid", "bqual") and xid[1] == "gtrid" and len(xid) == 3
    plain = Xid.from_string("_sa_0123abcd")
    assert (plain.format_id, plain.gtrid, plain.bqual) == (None, "_sa_0123abcd", None)
    assert plain.gid() == "_sa_0123abcd"
    assert Xid.from_string("1_not*base64_x").format_id is None
    with pytest.raises(errors.ProgrammingError, match="64 bytes"):
        Xid(1, "x" * 65, "")


def test_gids_with_quotes_and_backslashes(pg, table, connect):
    conn = connect()
    gid = f"it's a \\ gid {table}"
    prepare(conn, table, gid)
    assert [str(x) for x in conn.tpc_recover()] == [gid]
    conn.tpc_commit()
    assert rows(pg, table) == [1] and prepared(pg) == []


def prepared_count(pg, gid: str) -> int:
    """How many prepared transactions are named ``gid`` (the empty gid reads as no line in
    ``prepared``'s output)."""
    return int(pg.admin("SELECT count(*) FROM pg_prepared_xacts WHERE gid = "
                        + literal(gid)))


@pytest.mark.parametrize("gid", ["", "x" * 199], ids=["empty", "199 bytes"])
def test_any_gid_the_server_takes_round_trips(pg, table, connect, gid):
    conn = connect()
    prepare(conn, table, gid)
    conn.close()
    assert prepared_count(pg, gid) == 1
    other = connect()
    (found,) = [x for x in other.tpc_recover() if x.gtrid == gid]
    assert (found.format_id, found.gtrid, found.bqual) == (None, gid, None)
    other.tpc_rollback(found)
    assert prepared_count(pg, gid) == 0 and rows(pg, table) == []


def test_a_gid_the_server_refuses_prepares_nothing(pg, table, connect):
    conn = connect()
    conn.tpc_begin("x" * 200)  # PostgreSQL's limit is 199 bytes: the server says so
    insert(conn, table, 1)
    with pytest.raises(errors.DataError, match="too long") as refused:
        conn.tpc_prepare()
    assert refused.value.sqlstate == "22023"
    conn.tpc_rollback()
    assert prepared(pg) == [] and rows(pg, table) == []
    insert(conn, table, 2)  # the handle is usable again
    conn.commit()
    assert rows(pg, table) == [2]
