"""What pgmux.dbapi gives beyond PEP 249, as psycopg does (what Django's backend relies on):
connection.info, isolation levels as enums, tuple parameters, NUL as DataError, the sizes in
description, named cursors through DECLARE ... FETCH, COPY on the cursor, timestamptz in a
cursor's zone, the on_pin hook, closing one database's shared clients."""

from __future__ import annotations

import datetime as dt
import enum
import io
import uuid

import pytest
from support.factory import close_clients_of, closed_after

import pgmux
import pgmux.dbapi


@pytest.fixture
def connect(pg):
    """connect(autocommit=False, **options) -> a handle on a client of this test's own."""
    yield from closed_after(lambda autocommit=False, **options: pgmux.dbapi.connect(
        pg.dsn, autocommit=autocommit, acquire_timeout=10,
        **{"application_name": f"parity-{uuid.uuid4().hex[:8]}", **options}),
        close_clients_of)


def rows(conn, sql, params=None):
    cur = conn.cursor()
    cur.execute(sql, params)
    return cur.fetchall()


def test_info_reports_version_settings_pid_and_status(connect):
    conn = connect()
    info = conn.info
    assert info.server_version >= 140000 and info.encoding == "utf-8"
    assert info.parameter_status("DateStyle").startswith("ISO")
    assert info.parameter_status("not_a_setting") is None
    assert info.backend_pid is None and info.transaction_status == info.transaction_status.IDLE
    rows(conn, "SELECT 1")  # opens a transaction, not pinned yet (a plain read)
    assert info.backend_pid is None and info.transaction_status.name == "INTRANS"
    pid = rows(conn, "SELECT pg_backend_pid(), txid_current()")[0][0]  # pins
    assert info.backend_pid == pid
    assert info.transaction_status.name == "INTRANS"
    with pytest.raises(pgmux.dbapi.ProgrammingError):
        rows(conn, "SELECT * FROM no_such_table")
    assert info.transaction_status.name == "INERROR"
    conn.rollback()
    assert info.backend_pid is None


def test_an_isolation_level_enum_is_taken_by_its_name(connect):
    class IsolationLevel(enum.IntEnum):  # as psycopg's (and Django's psycopg2 shim)
        REPEATABLE_READ = 3

    conn = connect()
    conn.isolation_level = IsolationLevel.REPEATABLE_READ
    assert conn.isolation_level is IsolationLevel.REPEATABLE_READ
    assert rows(conn, "SELECT current_setting('transaction_isolation')") == [
        ("repeatable read",)]
    conn.rollback()
    with pytest.raises(pgmux.dbapi.ProgrammingError, match="isolation level"):
        conn.isolation_level = 1


def test_tuples_become_parenthesised_lists_and_empty_ones_are_refused(connect):
    conn = connect(autocommit=True)
    sql = "SELECT g FROM generate_series(1, 5) g WHERE g IN %s AND (g, g) IN %s ORDER BY g"
    assert rows(conn, sql, [(1, 3, 5), ((3, 3), (5, 5))]) == [(3,), (5,)]
    with pytest.raises(pgmux.dbapi.ProgrammingError, match="empty tuple"):
        rows(conn, "SELECT 1 WHERE 1 IN %s", [()])


@pytest.mark.parametrize("autocommit", [True, False])
def test_nul_in_text_is_a_data_error_and_nothing_is_sent(connect, autocommit):
    conn = connect(autocommit=autocommit)
    with pytest.raises(pgmux.dbapi.DataError, match="NUL"):
        rows(conn, "SELECT %s", ("a\x00b",))
    cur = conn.cursor()
    with pytest.raises(pgmux.dbapi.DataError):
        cur.executemany("SELECT %s", [("ok",), (["x\x00"],)])
    assert rows(conn, "SELECT 1") == [(1,)]  # the connection is fine


def test_description_carries_sizes_precision_and_scale(connect):
    conn = connect(autocommit=True)
    cur = conn.cursor()
    cur.execute("SELECT 'a'::varchar(12) v, 'b'::char(3) c, 1.5::numeric(7,3) n, "
                "now()::timestamp(2) t, 1::int8 i, 'x'::text x, B'101'::bit(3) b")
    v, c, n, t, i, x, b = cur.description
    assert (v.display_size, v.internal_size) == (12, None)
    assert c.display_size == 3 and b.display_size == 3
    assert (n.precision, n.scale) == (7, 3) and t.precision == 2
    assert (i.internal_size, i.display_size) == (8, None)
    assert x.display_size is None and x.internal_size is None


def test_named_cursor_in_a_transaction_survives_other_statements(connect):
    conn = connect()
    cur = conn.cursor("walker")
    cur.itersize = 3
    cur.execute("SELECT g FROM generate_series(1, %s) g", (10,))
    seen = []
    while batch := cur.fetchmany(2):
        seen += [row[0] for row in batch]
        assert rows(conn, "SELECT name, is_holdable FROM pg_cursors WHERE name <> ''") == [
            ("walker", False)]
    assert seen == list(range(1, 11))
    cur.close()
    assert rows(conn, "SELECT count(*) FROM pg_cursors WHERE name <> ''") == [(0,)]
    conn.commit()


def test_named_cursor_in_autocommit_is_held_and_given_back_when_done(connect):
    conn = connect(autocommit=True)
    cur = conn.cursor("held")
    cur.itersize = 4
    cur.execute("SELECT g FROM generate_series(1, 10) g")
    assert rows(conn, "SELECT is_holdable FROM pg_cursors WHERE name = 'held'") == [(True,)]
    assert conn.client.stats()["pinned"]["active"] == 1
    assert len(cur.fetchall()) == 10
    assert conn.client.stats()["pinned"]["active"] == 0  # read to the end: given back


def test_a_cursor_gone_with_a_savepoint_is_closed_without_harm(connect):
    conn = connect()
    cur = conn.cursor()
    cur.execute("SAVEPOINT sp")
    named = conn.cursor("doomed")
    named.itersize = 2
    named.execute("SELECT g FROM generate_series(1, 10) g")
    cur.execute("ROLLBACK TO SAVEPOINT sp")  # the server closed the cursor
    named.close()
    assert rows(conn, "SELECT 1") == [(1,)]  # the transaction is not aborted
    conn.commit()


def test_copy_on_the_cursor_both_ways(connect):
    conn = connect(autocommit=True)
    cur = conn.cursor()
    cur.execute("CREATE TEMP TABLE copied (a int, b text)")
    with cur.copy("COPY copied FROM STDIN") as copy:
        copy.write_row((1, "one"))
        copy.write(b"2\ttwo\n")
    cur.copy_from(io.StringIO("3\tthree\n"), "copied")
    out = io.StringIO()
    cur.copy_to(out, "copied", sep="|")
    assert out.getvalue() == "1|one\n2|two\n3|three\n"
    with pytest.raises(ValueError), cur.copy("COPY copied FROM STDIN") as copy:
        copy.write_row((4, "four"))
        raise ValueError  # nothing is sent
    assert rows(conn, "SELECT count(*) FROM copied") == [(3,)]


def test_a_cursor_timezone_moves_timestamptz_results(connect):
    from zoneinfo import ZoneInfo

    conn = connect(autocommit=True)
    cur = conn.cursor()
    cur.timezone = ZoneInfo("Asia/Kolkata")
    cur.execute("SELECT '2024-01-01 00:00:00+00'::timestamptz, "
                "ARRAY['2024-01-01 00:00:00+00'::timestamptz], '2024-01-01'::timestamp")
    zoned, array, plain = cur.fetchone()
    assert zoned.utcoffset() == dt.timedelta(hours=5, minutes=30)
    assert array[0] == zoned and plain == dt.datetime(2024, 1, 1)
    cur.naive = True
    cur.execute("SELECT '2024-01-01 00:00:00+00'::timestamptz")
    assert cur.fetchone() == (dt.datetime(2024, 1, 1, 5, 30),)


def test_on_pin_may_refuse_session_state(connect):
    conn = connect(autocommit=True)
    reasons = []

    def refuse(reason: str) -> None:
        reasons.append(reason)
        raise pgmux.dbapi.NotSupportedError(f"not here: {reason}")

    conn.on_pin = refuse
    with pytest.raises(pgmux.dbapi.NotSupportedError, match="not here: SET"):
        rows(conn, "SET work_mem = '8MB'")
    assert conn.pinned is None and reasons == ["SET outlives the transaction"]
    assert rows(conn, "SELECT current_setting('work_mem')") != [("8MB",)]


def test_close_shared_clients_of_one_database(pg):
    a = pgmux.dbapi.connect(pg.dsn, application_name="close-a")
    b = pgmux.dbapi.connect(pg.dsn_for(dbname="postgres"), application_name="close-b")
    try:
        pgmux.dbapi.close_shared_clients(dbname="postgres")
        assert b.client.closed and not a.client.closed
    finally:
        a.client.close()
        b.client.close()


def test_error_facts_by_psycopg_names(connect):
    conn = connect(autocommit=True)
    with pytest.raises(pgmux.dbapi.ProgrammingError) as caught:
        rows(conn, "SELECT * FROM missing_table")
    error = caught.value
    assert error.pgcode == error.diag.sqlstate == "42P01"
    assert error.diag.message_primary == 'relation "missing_table" does not exist'
    assert error.diag.message_detail is None and "missing_table" in error.pgerror


def test_a_connection_keeping_its_lease_closes_cursors_as_they_end(connect):
    conn = connect(autocommit=True)
    conn.cursor().execute("SET work_mem = '8MB'")  # session state: the lease stays
    cur = conn.cursor("short")
    cur.itersize = 10
    cur.execute("SELECT g FROM generate_series(1, 3) g")  # read to the end at once
    assert rows(conn, "SELECT count(*) FROM pg_cursors WHERE name = 'short'") == [(0,)]
    assert cur.fetchall() == [(1,), (2,), (3,)]
    long = conn.cursor("long")
    long.itersize = 2
    long.execute("SELECT g FROM generate_series(1, 5) g")
    long.close()
    assert rows(conn, "SELECT count(*) FROM pg_cursors WHERE name = 'long'") == [(0,)]
    assert conn.pinned == "SET outlives the transaction"
