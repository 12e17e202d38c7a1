"""pgmux behind a stock PgBouncer 1.18 (Debian's), transaction and session pool modes."""

from __future__ import annotations

import logging
from contextlib import closing, contextmanager

import psycopg2
import pytest
from support.mux import PATIENCE, drivers, unique_name

from pgmux.client import Client
from pgmux.errors import DivisionByZero, InterfaceError, OperationalError
from pgmux.io.connect import BASE_STARTUP_PARAMS

MODES = ["transaction", "session"]


@pytest.fixture
def bounced(pgbouncer):
    """bounced(mode, **options) -> a started Client through PgBouncer, closed after the test."""
    made: list[Client] = []

    def make(mode: str = "transaction", **options) -> Client:
        db = Client(**pgbouncer.params(mode), **options)
        made.append(db)
        return db.start() if db.pipeline_size else db

    yield make
    for db in made:
        db.close()


# connecting -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_connects_with_default_options(bounced, mode):
    db = bounced(mode, pipeline_size=2)
    assert db.fetchval("SELECT $1::int + 1", [41]) == 42
    assert [d.conn.protocol for d in drivers(db)] == ["3.0", "3.0"]


def test_startup_parameters_are_ones_pgbouncer_tracks():
    """PgBouncer refuses any other startup parameter unless ignore_startup_parameters says."""
    tracked = {"client_encoding", "datestyle", "timezone", "standard_conforming_strings",
               "application_name"}
    assert {name.lower() for name in BASE_STARTUP_PARAMS} <= tracked


def test_protocol_3_2_opt_in_is_refused_by_pgbouncer_1_18_with_a_hint(pgbouncer):
    db = Client(**pgbouncer.params("session"), pipeline_size=1, max_protocol_version="3.2")
    with pytest.raises(OperationalError, match="max_protocol_version=3.0") as caught:
        db.start()
    assert caught.value.sqlstate == "08P01"
    assert pgbouncer.password not in str(caught.value)


# pooler= ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "session", "transaction"])
def test_pooler_option_is_kept_for_the_engine(value):
    assert Client("host=localhost", pooler=value).pooler == value


def test_pooler_option_is_validated():
    with pytest.raises(InterfaceError, match="pooler must be None, 'session' or 'transaction'"):
        Client("host=localhost", pooler="statement")


def test_session_setting_is_refused_under_transaction_pooling():
    with pytest.raises(InterfaceError, match="idle_transaction_timeout"):
        Client("host=localhost", pooler="transaction", idle_in_transaction_timeout=5)


def test_session_is_refused_under_pooler_transaction_saying_why(bounced):
    db = bounced("transaction", pooler="transaction", pipeline_size=1)
    with pytest.raises(InterfaceError, match="pooler='transaction'.*session state"):
        db.session()
    assert db.stats()["pinned"]["active"] == 0


def test_listen_is_refused_in_a_transaction_under_pooler_transaction(bounced):
    db = bounced("transaction", pooler="transaction", pipeline_size=1)
    with db.transaction() as tx:
        with pytest.raises(InterfaceError, match="LISTEN .*notifications would never arrive"):
            tx.session.listen("pgmux_channel")
        assert tx.fetchval("SELECT 1") == 1


def test_transactions_commit_and_roll_back_under_pooler_transaction(bounced, pg_admin):
    table = unique_name("bounced")
    pg_admin(f"CREATE TABLE {table} (n int); GRANT ALL ON {table} TO scram_user")
    db = bounced("transaction", pooler="transaction", pipeline_size=1)
    for n in range(5):
        with db.transaction() as tx:
            tx.execute(f"INSERT INTO {table} VALUES ({n})")
    with pytest.raises(DivisionByZero), db.transaction() as tx:
        tx.execute(f"INSERT INTO {table} VALUES (100)")
        tx.execute("SELECT 1 / 0")
    assert pg_admin(f"SELECT sum(n) FROM {table}") == "10"
    assert db.stats()["pinned"]["active"] == 0


@contextmanager
def statement_left_on_the_single_server_connection(pgbouncer):
    """A psycopg2 client's ``PREPARE``, left on the one server connection of the "single"
    pool; yields a function that executes it there."""
    name = unique_name("keep")
    with closing(psycopg2.connect(**pgbouncer.params("single"))) as conn:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"PREPARE {name} AS SELECT 7")

            def execute() -> int:
                cur.execute(f"EXECUTE {name}")
                return cur.fetchone()[0]

            try:
                yield execute
            finally:
                cur.execute("DEALLOCATE ALL")


def test_pooler_transaction_resets_without_discard_all(pgbouncer, bounced):
    """The pinned reset must not DISCARD ALL on whatever server connection the pooler lends
    next: here there is one, shared with a psycopg2 client whose PREPARE survives."""
    with statement_left_on_the_single_server_connection(pgbouncer) as execute_other:
        db = bounced("single", pooler="transaction", pipeline_size=0)
        with db.transaction() as tx:
            tx.execute("SELECT 1")
        assert db.stats()["pinned"] == {"size": 2, "active": 0, "free": 2, "waiting": 0}
        assert execute_other() == 7


def test_without_pooler_option_the_reset_discards_on_a_shared_server_connection(
        pgbouncer, bounced):
    """What pooler='transaction' avoids: pgmux's DISCARD ALL wipes another client's state."""
    with statement_left_on_the_single_server_connection(pgbouncer) as execute_other:
        db = bounced("single", pipeline_size=0)
        with db.transaction() as tx:
            tx.execute("SELECT 1")
        with pytest.raises(psycopg2.errors.InvalidSqlStatementName):
            execute_other()


# noticing a pooler -----------------------------------------------------------------------


def test_pooler_is_noticed_and_sessions_refused_until_told(bounced, caplog):
    db = bounced("transaction", pipeline_size=1)
    assert db.pooler_detected is None
    with caplog.at_level(logging.WARNING, logger="pgmux"), db.transaction() as tx:
        assert tx.fetchval("SELECT 1") == 1
    assert db.pooler_detected is True
    assert [r for r in caplog.records if "connection pooler" in r.getMessage()]
    with pytest.raises(InterfaceError, match="pooler='session' if it pools sessions"):
        db.session()


def test_first_session_is_refused_once_its_connection_notices_the_pooler(bounced):
    db = bounced("transaction", pipeline_size=1)
    session = db.session()  # nothing opened yet: the check happens on the first connection
    with pytest.raises(InterfaceError, match="connection pooler"):
        session.__enter__()
    assert db.stats()["pinned"] == {"size": 2, "active": 0, "free": 2, "waiting": 0}
    with db.transaction() as tx:  # the connection went back clean and is lent again
        assert tx.fetchval("SELECT 2") == 2


def test_direct_connection_is_not_mistaken_for_a_pooler(clients):
    db = clients(pipeline_size=1)
    with db.session() as s:
        assert s.fetchval("SELECT pg_backend_pid()") == s.pid
    assert db.pooler_detected is False


def test_pooler_session_gives_sessions_with_their_state_and_listen(bounced):
    db = bounced("session", pooler="session", pipeline_size=1)
    assert db.pooler_detected is None  # told, so not checked
    with db.session() as s:
        s.execute("SET work_mem = '7MB'")
        assert s.fetchval("SHOW work_mem") == "7MB"
        s.listen("pgmux_bounced")
        db.fetchval("SELECT pg_notify('pgmux_bounced', 'hi')")
        note = s.wait_notify(timeout=PATIENCE)
        assert note is not None and note.payload == "hi"
    with db.session() as s:
        assert s.fetchval("SHOW work_mem") != "7MB"  # DISCARD ALL ran on its own connection
