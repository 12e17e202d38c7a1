"""The guard through the client: rejected before anything is sent, allowed SQL runs."""

from __future__ import annotations

import socket

import pytest
from support.mux import total, unique_name

from pgmux.client import Client
from pgmux.errors import InterfaceError, UnsafeMultiplexError

REJECTED = [
    ("SET x.y = 1", "leading keyword SET"),
    ("BEGIN", "leading keyword BEGIN"),
    ("SELECT 1; SELECT 2", "multiple statements"),
    ("SELECT set_config('application_name', 'x', false)", "set_config"),
    ("SELECT pg_advisory_lock(1)", "pg_advisory_lock"),
    ("SELECT 1 INTO TEMP mux_t", "SELECT INTO"),
    ("LISTEN mux_channel", "leading keyword LISTEN"),
]


def closed_port() -> int:
    """A local TCP port with nothing listening on it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(("sql", "why"), REJECTED)
def test_rejected_sql_never_reaches_the_server(clients, sql, why):
    db = clients(pipeline_size=2)
    units = total(db, "units")
    for call in (db.query, db.fetchone, db.fetchval, db.execute):
        with pytest.raises(UnsafeMultiplexError) as caught:
            call(sql)
        assert why in str(caught.value)
        assert "db.session()" in str(caught.value)
    with pytest.raises(UnsafeMultiplexError):
        db.prepare("mux_guarded", sql)
    assert db.stats()["prepared_statements"] == 0
    assert total(db, "units") == units, "something was sent"
    assert total(db, "load") == 0


def test_rejection_needs_no_server_at_all():
    db = Client(host="127.0.0.1", port=closed_port(), user="nobody", dbname="none",
                connect_timeout=2)
    with pytest.raises(UnsafeMultiplexError, match="leading keyword SET"):
        db.query("SET x = 1")
    assert db.stats()["pipeline"]["live"] == 0
    db.close()


def test_masked_traps_pass_and_run(clients):
    db = clients(pipeline_size=1)
    assert db.fetchval("SELECT 'SET x = 1; BEGIN'") == "SET x = 1; BEGIN"
    assert db.fetchval("SELECT 1 -- BEGIN; SET x = 1") == 1
    assert db.fetchval("SELECT /* set_config( /* nested */ ; */ 2") == 2
    assert db.fetchval("SELECT $q$; SELECT set_config('a', 'b', false)$q$") == (
        "; SELECT set_config('a', 'b', false)")
    assert db.fetchval('SELECT 3 AS "set_config(; BEGIN"') == 3
    assert db.fetchval("SELECT E'it\\'s; SET'") == "it's; SET"


def test_strict_rejects_nextval_default_allows_it(pg, clients):
    sequence = unique_name("mux_seq")
    pg.admin(f"CREATE SEQUENCE {sequence}")
    try:
        default = clients(pipeline_size=1)
        strict = clients(pipeline_size=1, guard="strict")
        assert default.fetchval(f"SELECT nextval('{sequence}')") == 1
        with pytest.raises(UnsafeMultiplexError, match="strict"):
            strict.fetchval(f"SELECT nextval('{sequence}')")
        assert strict.fetchval(f"SELECT last_value FROM {sequence}") == 1
    finally:
        pg.admin(f"DROP SEQUENCE IF EXISTS {sequence}")


def test_guard_off_lets_transaction_scoped_set_config_through(clients):
    db = clients(pipeline_size=1, guard="off")
    name = db.conninfo.application_name
    # is_local = true: the setting ends with the unit's own implicit transaction
    assert db.fetchval("SELECT set_config('application_name', 'changed', true)") == "changed"
    assert db.fetchval("SELECT current_setting('application_name')") == name


def test_default_guard_rejects_even_transaction_scoped_set_config(clients):
    db = clients(pipeline_size=1)
    with pytest.raises(UnsafeMultiplexError, match="set_config"):
        db.fetchval("SELECT set_config('application_name', 'changed', true)")


def test_unknown_guard_mode_is_refused():
    with pytest.raises((ValueError, InterfaceError)):
        Client(host="127.0.0.1", guard="lenient")
