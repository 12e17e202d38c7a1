"""The pinned connection on its own, against the scripted server: what it writes for each
kind of statement, the deferred BEGIN riding with the next request, a stale statement
prepared again only where nothing ran, and a stalled server ending in a clean timeout."""

from __future__ import annotations

import pytest
from support.fakeserver import FakeServer, error, ready

from pgmux.errors import OperationalError, QueryTimeout
from pgmux.io.connect import connect
from pgmux.io.conninfo import make_conninfo
from pgmux.io.pinned import PinnedConnection
from pgmux.types import TypeRegistry

BOUND = 5.0


@pytest.fixture
def fake():
    with FakeServer() as server:
        yield server


@pytest.fixture
def pinned(fake):
    made: list[PinnedConnection] = []

    def make(**options) -> PinnedConnection:
        conn = connect(make_conninfo(fake.dsn(), connect_timeout=BOUND))
        made.append(p := PinnedConnection(conn, TypeRegistry(), **options))
        return p

    yield make
    for p in made:
        p.close()


def kinds(unit) -> bytes:
    return b"".join(kind for kind, _ in unit.messages)


def test_a_statement_with_parameters_is_described_then_executed(fake, pinned):
    conn = pinned()
    assert conn.query("SELECT $1::text", ["x"]).rows == [("x",)]
    assert conn.query("SELECT $1::text", ["y"]).rows == [("y",)]
    described, first, second = fake.live[0].received
    assert kinds(described) == b"PDS"  # Parse, Describe statement, Sync
    assert kinds(first) == kinds(second) == b"BES"  # then Bind, Execute, Sync only


def test_a_script_without_parameters_goes_as_a_simple_query(fake, pinned):
    conn = pinned()
    assert conn.query("SELECT 1; SELECT 2").rows == [("SELECT 1; SELECT 2",)]
    (unit,) = fake.live[0].received
    assert kinds(unit) == b"Q"


def test_a_deferred_begin_is_written_with_the_next_request(fake, pinned):
    conn = pinned()
    conn.defer("BEGIN", "tag")
    assert conn.in_transaction and fake.units_received == 0  # nothing sent yet
    conn.command("SELECT 'in the transaction'")
    received = fake.live[0].received
    assert [unit.sql for unit in received] == ["BEGIN", "SELECT 'in the transaction'"]
    assert fake.units_received == 2 and conn.clean


def test_a_stale_statement_is_prepared_again_when_nothing_ran(fake, pinned):
    conn = pinned()
    conn.query("SELECT $1::text", ["warm"])
    fake.on("stale", error("26000", 'prepared statement "x" does not exist') + ready())
    assert conn.query("SELECT $1::text", ["stale"]).rows == [("stale",)]
    labels = [unit.label for unit in fake.live[0].received]
    assert labels.count("stale") == 2 and kinds(fake.live[0].received[-1])[:1] == b"P"


def test_a_stale_statement_in_a_transaction_block_is_not_retried(fake, pinned):
    conn = pinned()
    conn.query("SELECT $1::text", ["warm"])
    fake.on("stale", error("26000", "gone") + ready(b"E"))
    conn.defer("BEGIN", "tag")
    with pytest.raises(Exception) as caught:
        conn.query("SELECT $1::text", ["stale"])
    assert caught.value.sqlstate == "26000" and conn.status == "E"
    assert [unit.label for unit in fake.live[0].received].count("stale") == 1


def test_a_stalled_server_ends_in_a_timeout_and_a_closed_connection(fake, pinned):
    conn = pinned(cancel_grace=0.3)
    fake.on("stall", b"", then="stall")
    with pytest.raises(QueryTimeout):
        conn.query("SELECT $1::text", ["stall"], timeout=0.2)
    assert conn.broken is not None  # the cancel was never answered: retired
    assert len(fake.cancel_requests) == 1
    with pytest.raises(OperationalError):
        conn.query("SELECT 1")


def test_the_server_closing_breaks_the_connection(fake, pinned):
    conn = pinned()
    conn.query("SELECT 1")
    fake.on("last words", b"", then="close")
    with pytest.raises(OperationalError):
        conn.query("SELECT 'last words'")
    assert conn.broken is not None and not conn.clean
