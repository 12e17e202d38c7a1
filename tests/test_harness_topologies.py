"""The harness for pooler and replica tests: a streaming standby, PgBouncer in both pool
modes, a black-hole host. Each test proves one piece does what the other tests rely on."""

from __future__ import annotations

from contextlib import closing

import psycopg2
import pytest
from gevent import socket
from support.pgbouncer import SESSION_DB, TRANSACTION_DB
from support.replicas import ReplicaPair


def fetchone(sql: str, **params):
    with closing(psycopg2.connect(**params)) as conn:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchone()


# the standby ------------------------------------------------------------------------------


def test_standby_replays_what_the_primary_writes(replicas: ReplicaPair):
    primary, standby = replicas.primary, replicas.standby
    primary.psql("CREATE TABLE IF NOT EXISTS harness_replay (n int); "
                 "INSERT INTO harness_replay VALUES (41), (1)")
    replicas.wait_replayed()
    assert standby.psql("SELECT pg_is_in_recovery()") == "t"
    assert primary.psql("SELECT pg_is_in_recovery()") == "f"
    assert standby.psql("SELECT sum(n) FROM harness_replay") == "42"


def test_standby_refuses_writes(replicas: ReplicaPair):
    with pytest.raises(psycopg2.errors.ReadOnlySqlTransaction):
        fetchone("CREATE TABLE harness_refused (n int)", host="127.0.0.1",
                 port=replicas.standby.port, user="postgres", dbname="postgres")


def test_primary_stops_and_starts_and_the_standby_streams_again(fresh_replicas: ReplicaPair):
    primary = fresh_replicas.primary
    primary.shut_down()
    with pytest.raises(psycopg2.OperationalError):
        fetchone("SELECT 1", host="127.0.0.1", port=primary.port, user="postgres",
                 dbname="postgres", connect_timeout=5)
    primary.start_again()
    fresh_replicas.wait_streaming()
    primary.psql("CREATE TABLE after_restart (n int)")
    fresh_replicas.wait_replayed()
    assert fresh_replicas.standby.psql("SELECT to_regclass('after_restart') IS NOT NULL") == "t"


def test_promoted_standby_accepts_writes(fresh_replicas: ReplicaPair):
    fresh_replicas.primary.shut_down()
    fresh_replicas.standby.promote()
    standby = fresh_replicas.standby
    standby.psql("CREATE TABLE promoted (n int)")
    assert standby.psql("SELECT pg_is_in_recovery()") == "f"


# PgBouncer --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_pgbouncer_answers_in_each_mode_with_its_own_backend_keys(pgbouncer, mode):
    params = pgbouncer.params(mode)
    assert params["dbname"] == {"transaction": TRANSACTION_DB, "session": SESSION_DB}[mode]
    with closing(psycopg2.connect(**params)) as conn:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid(), current_database()")
            server_pid, database = cur.fetchone()
        assert database == "pgmux_test"
        assert conn.get_backend_pid() != server_pid  # PgBouncer's BackendKeyData, not the server's


def test_pgbouncer_pools_each_database_in_its_mode(pgbouncer):
    """Two server connections in a row: the session pool keeps one, the transaction pool
    hands them out per transaction (two clients interleaving see each other's backend)."""
    with closing(psycopg2.connect(**pgbouncer.params("session"))) as a, \
            closing(psycopg2.connect(**pgbouncer.params("session"))) as b:
        a.autocommit = b.autocommit = True
        assert _pid(a) == _pid(a) != _pid(b)
    with closing(psycopg2.connect(**pgbouncer.params("transaction"))) as a, \
            closing(psycopg2.connect(**pgbouncer.params("transaction"))) as b:
        a.autocommit = b.autocommit = True
        first = _pid(a)
        assert _pid(b) == first  # the idle server connection a just used (LIFO), lent to b


def _pid(conn) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return cur.fetchone()[0]


# the black hole ---------------------------------------------------------------------------


def test_black_hole_accepts_and_never_answers(black_hole):
    with socket.create_connection(("127.0.0.1", black_hole.port), timeout=5) as sock:
        sock.sendall(b"\x00\x00\x00\x08\x04\xd2\x16\x2f")  # an SSLRequest
        sock.settimeout(0.3)
        with pytest.raises(socket.timeout):
            sock.recv(1)
    assert black_hole.attempts == 1
