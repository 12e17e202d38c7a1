"""What a pgmux.psycopg2 connection is underneath: a cheap handle on the shared client,
multiplexed until it must pin; and where it differs from libpq's connection, what it does
(backend pid, cancel, fileno, notices)."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import gevent
import gevent.select
import pytest

from pgmux import psycopg2
from pgmux.psycopg2 import extensions, pool


def _server_connections(conn, name):
    cur = conn.cursor()
    cur.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,))
    count = cur.fetchone()[0]
    conn.rollback()
    return count


def test_many_connections_share_a_few_server_connections(connect, real):
    first = connect(pipeline_size=2, pinned_size=2)
    name = first.info.dsn_parameters["application_name"]

    def request(i):
        conn = connect(pipeline_size=2, pinned_size=2)
        cur = conn.cursor()
        cur.execute("SELECT %s + 1, pg_sleep(0.01)", (i,))
        assert cur.fetchone()[0] == i + 1
        conn.commit()
        conn.close()

    gevent.joinall([gevent.spawn(request, i) for i in range(100)], raise_error=True)
    assert 0 < _server_connections(real(), name) <= 4


def test_session_state_pins_the_handle_until_close(connect):
    conn, other = connect(), connect()
    cur = conn.cursor()
    cur.execute("SET application_name = 'pinned-by-set'")
    conn.commit()
    for _ in range(3):
        cur.execute("SHOW application_name")
        assert cur.fetchone() == ("pinned-by-set",)
        conn.commit()
    other_cur = other.cursor()
    other_cur.execute("SHOW application_name")
    assert other_cur.fetchone() != ("pinned-by-set",)


def test_backend_pid_pins_the_handle_to_that_server_process(connect):
    conn = connect()
    conn.autocommit = True
    pid = conn.get_backend_pid()
    assert pid == conn.info.backend_pid > 0
    cur = conn.cursor()
    for _ in range(3):
        cur.execute("SELECT pg_backend_pid()")
        assert cur.fetchone() == (pid,)


def test_cancel_of_a_pinned_statement_cancels_it_on_the_server(connect):
    conn = connect()
    cur = conn.cursor()
    cur.execute("SELECT txid_current()")  # the transaction pins
    gevent.spawn_later(0.3, conn.cancel)
    started = time.monotonic()
    with pytest.raises(extensions.QueryCanceledError) as caught:
        cur.execute("SELECT pg_sleep(30)")
    assert caught.value.pgcode == "57014"
    assert time.monotonic() - started < 10
    conn.rollback()
    cur.execute("SELECT 1")
    assert cur.fetchone() == (1,)


def test_cancel_of_a_multiplexed_statement_stops_the_wait(connect):
    conn = connect()
    conn.autocommit = True
    cur = conn.cursor()
    gevent.spawn_later(0.3, conn.cancel)
    started = time.monotonic()
    with pytest.raises(extensions.QueryCanceledError):
        cur.execute("SELECT pg_sleep(2)")
    assert time.monotonic() - started < 1.5
    cur.execute("SELECT 1")
    assert cur.fetchone() == (1,)


def test_listen_select_on_fileno_and_poll(connect):
    listener, sender = connect(), connect()
    listener.autocommit = sender.autocommit = True
    listener.cursor().execute("LISTEN pgmux_channel")
    gevent.spawn_later(0.2, sender.cursor().execute, "NOTIFY pgmux_channel, 'hello'")
    readable, _, _ = gevent.select.select([listener], [], [], 10)  # (as patched select)
    assert readable == [listener]
    assert listener.poll() == extensions.POLL_OK
    assert [(n.channel, n.payload) for n in listener.notifies] == [("pgmux_channel", "hello")]
    assert listener.notifies[0].pid == sender.get_backend_pid() or sender.autocommit


def test_notices_reach_the_connection_that_ran_the_statement(connect, caplog):
    conn = connect()
    cur = conn.cursor()
    cur.execute("SET client_min_messages = notice")  # session state: the handle pins
    cur.execute("DO $$ BEGIN RAISE NOTICE 'from the pinned handle'; END $$")
    assert conn.notices == ["NOTICE:  from the pinned handle\n"]


def test_with_commits_or_rolls_back_and_does_not_close(connect):
    conn = connect()
    cur = conn.cursor()
    cur.execute("CREATE TEMP TABLE w (x int)")
    conn.commit()
    with conn:
        cur.execute("INSERT INTO w VALUES (1)")
    with pytest.raises(ZeroDivisionError), conn:
        cur.execute("INSERT INTO w VALUES (2)")
        raise ZeroDivisionError
    assert not conn.closed
    cur.execute("SELECT x FROM w")
    assert cur.fetchall() == [(1,)]


def test_with_on_an_autocommit_connection_is_a_transaction(connect):
    conn = connect()
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("CREATE TEMP TABLE wa (x int)")
    with pytest.raises(RuntimeError), conn:
        cur.execute("INSERT INTO wa VALUES (1)")
        assert conn.status == extensions.STATUS_BEGIN
        raise RuntimeError
    assert conn.autocommit
    cur.execute("SELECT count(*) FROM wa")
    assert cur.fetchone() == (0,)


def test_the_dsn_hides_the_password(pg):
    conn = psycopg2.connect(pg.dsn, password="hunter2", application_name="hide")
    try:
        assert "hunter2" not in conn.dsn and "password=xxx" in conn.dsn
        assert "hunter2" not in repr(conn)
    finally:
        conn.pgmux_handle.client.close()


def test_the_pool_keeps_its_bound(pg):
    bounded = pool.ThreadedConnectionPool(1, 2, pg.dsn, application_name="bounded")
    try:
        a, b = bounded.getconn(), bounded.getconn()
        with pytest.raises(pool.PoolError):
            bounded.getconn()
        bounded.putconn(a)
        c = bounded.getconn()
        cur = c.cursor()
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)
        bounded.putconn(b)
        bounded.putconn(c)
    finally:
        client = bounded._pool[0].pgmux_handle.client if bounded._pool else None
        bounded.closeall()
        if client is not None:
            client.close()


def test_multiplexed_notices_go_to_the_logger(connect, caplog):
    conn = connect()
    conn.autocommit = True
    cur = conn.cursor()
    with caplog.at_level(logging.INFO, logger="pgmux"):
        cur.execute("SELECT 1")
    assert conn.notices == []


REGISTER = """
import sys
import pgmux.psycopg2
pgmux.psycopg2.register()
pgmux.psycopg2.register()  # idempotent
import psycopg2, psycopg2.extras, psycopg2.extensions, psycopg2.errors, psycopg2.sql
from psycopg2 import pool, tz, errorcodes, _psycopg, _range, _json
assert psycopg2 is pgmux.psycopg2 and psycopg2.extras is sys.modules["pgmux.psycopg2.extras"]
assert psycopg2.extensions.connection is pgmux.psycopg2.extensions.connection
print("ok")
"""

REAL_FIRST = """
import psycopg2
import pgmux.psycopg2
try:
    pgmux.psycopg2.register()
except ImportError as error:
    print("refused:", error)
"""


def test_register_resolves_psycopg2_and_its_submodules():
    done = subprocess.run([sys.executable, "-c", REGISTER], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == "ok", done.stderr


def test_register_refuses_when_the_real_psycopg2_is_loaded():
    done = subprocess.run([sys.executable, "-c", REAL_FIRST], capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.startswith("refused: the real psycopg2 is imported already"), (
        done.stdout + done.stderr)


def test_what_cannot_exist_here_says_why(connect):
    conn = connect()
    for call in (conn.lobject, lambda: psycopg2.connect("dbname=x", async_=True),
                 conn.get_native_connection):
        with pytest.raises(psycopg2.NotSupportedError) as caught:
            call()
        assert "not supported" in str(caught.value) or "no libpq" in str(caught.value)
    from pgmux.psycopg2 import extras

    with pytest.raises(psycopg2.NotSupportedError, match="replication"):
        extras.LogicalReplicationConnection("dbname=x")


BACKSLASH = "a\\b'c"  # a\b'c


def test_literals_follow_standard_conforming_strings_as_the_server_reports_it(connect, real):
    """mogrify() and the spliced literals follow the server's current setting, as libpq's
    escaping does: from the connection string, and after a SET on a pinned handle."""
    value = extensions.QuotedString(BACKSLASH)  # an adapter: always a spliced literal
    for setting in ("on", "off"):
        options = f"-c standard_conforming_strings={setting}"
        mine, theirs = connect(options=options), real(options=options)
        assert mine.pgmux_standard_strings == (setting == "on")
        expected = theirs.cursor().mogrify("%s", (BACKSLASH,))
        assert mine.cursor().mogrify("%s", (BACKSLASH,)) == expected
        assert expected == (b"'a\\b''c'" if setting == "on" else b"E'a\\\\b''c'")
        cur = mine.cursor()
        cur.execute("SELECT %s", (value,))
        assert cur.fetchone() == (BACKSLASH,)
        mine.rollback()
    conn = connect()
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SET standard_conforming_strings = off")  # session state: pins the handle
    assert not conn.pgmux_standard_strings
    assert cur.mogrify("%s", (BACKSLASH,)) == b"E'a\\\\b''c'"
    cur.execute("SELECT %s", (value,))
    assert cur.fetchone() == (BACKSLASH,)
    cur.execute("SET standard_conforming_strings = on")
    assert conn.pgmux_standard_strings and cur.mogrify("%s", (BACKSLASH,)) == b"'a\\b''c'"
    assert connect().pgmux_standard_strings  # the others' are the server's default


def test_a_script_in_autocommit_is_one_atomic_unit(connect, real):
    """Several DML statements in one text, autocommit: one implicit transaction, as
    psycopg2's simple query is, sent multiplexed (no pinned connection: there are none)."""
    setup = real()
    setup.autocommit = True
    table = f"script_{int(time.time() * 1000) % 10**9}"
    setup.cursor().execute(f"CREATE TABLE {table} (id int PRIMARY KEY, note text)")
    try:
        conn = connect(pinned_size=0)
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute(f"INSERT INTO {table} VALUES (%s, %s); INSERT INTO {table} VALUES (2, 'a;b');"
                    f" UPDATE {table} SET note = 'c' WHERE id <= 2", (1, "x"))
        assert (cur.statusmessage, cur.rowcount) == ("UPDATE 2", 2)  # the last statement's
        with pytest.raises(psycopg2.errors.UniqueViolation):
            cur.execute(f"INSERT INTO {table} VALUES (3, 'new'); INSERT INTO {table} "
                        "VALUES (1, 'again')")
        cur.execute(f"SELECT id, note FROM {table} ORDER BY id; SELECT count(*) FROM {table}")
        assert cur.fetchall() == [(2,)]  # all or nothing: 3 was not kept
        theirs = setup.cursor()
        theirs.execute(f"SELECT id, note FROM {table} ORDER BY id; SELECT count(*) FROM {table}")
        assert theirs.fetchall() == [(2,)] and theirs.statusmessage == cur.statusmessage
        cur.execute(f"UPDATE {table} SET note = %(n)s WHERE id = %(a)s; UPDATE {table} "
                    "SET note = %(n)s || '!' WHERE id = %(b)s", {"n": "d", "a": 1, "b": 2})
        cur.execute(f"SELECT note FROM {table} ORDER BY id")
        assert cur.fetchall() == [("d",), ("d!",)]
        with pytest.raises(IndexError):  # psycopg2's error for too few values
            cur.execute(f"DELETE FROM {table} WHERE id = %s; DELETE FROM {table} "
                        "WHERE id = %s", (1,))
        assert conn.pgmux_handle.lease is None
    finally:
        setup.cursor().execute(f"DROP TABLE {table}")
