"""Deferred pinning against a real server: a DB-API transaction at READ COMMITTED runs its
plain reads multiplexed, pins at the first statement that needs the transaction, and looks
to the program like a real server transaction."""

from __future__ import annotations

import io
import time
import uuid

import gevent
import pytest
from support.factory import close_clients_of, closed_after
from support.mux import SLOW_READ, wait_for_slow_read
from support.pinned import record_writes

import pgmux
import pgmux.dbapi
from pgmux import errors
from pgmux.dbapi import deferral


@pytest.fixture
def connect(pg):
    """connect(**options) -> a DB-API connection on a client of this test's own."""
    name = f"defer-{uuid.uuid4().hex[:10]}"
    yield from closed_after(lambda autocommit=False, **options: pgmux.dbapi.connect(
        pg.dsn, autocommit=autocommit,
        **{"application_name": name, "acquire_timeout": 10, **options}), close_clients_of)


@pytest.fixture
def table(pg):
    """A table (id int primary key, n int) with rows (1, 10) and (2, 20), and a sequence."""
    name = f"d_{uuid.uuid4().hex[:8]}"
    pg.admin(f"CREATE TABLE {name} (id int PRIMARY KEY, n int); "
             f"INSERT INTO {name} VALUES (1, 10), (2, 20); CREATE SEQUENCE {name}_seq")
    yield name
    pg.admin(f"DROP TABLE {name}; DROP SEQUENCE {name}_seq")


def pinned(conn) -> int:
    return conn.client.stats()["pinned"]["active"]


def run(conn, sql, params=None):
    cur = conn.cursor()
    cur.execute(sql, params)
    return cur.fetchall() if cur.description else cur.rowcount


def value(conn, sql, params=None):
    return run(conn, sql, params)[0][0]


def server_connections(pg, conn) -> int:
    name = conn.client.conninfo.application_name
    return int(pg.admin(f"SELECT count(*) FROM pg_stat_activity "
                        f"WHERE application_name = '{name}'"))


# -- what pins and what does not ----------------------------------------------------------

PLAIN_READS = [
    "SELECT 1",
    "SELECT n FROM {t} WHERE id = 1",
    "TABLE {t}",
    "VALUES (1), (2)",
    "WITH x AS (SELECT n FROM {t}) SELECT sum(n) FROM x",
    "SELECT count(*), lower('A'), coalesce(NULL, 1) FROM {t} WHERE id IN (1, 2)",
    "SELECT pg_backend_pid()",  # stable: differs between statements (see the README)
    "SELECT 'UPDATE now() FOR UPDATE' AS text",  # literals are not SQL
    "SELECT {t}_stable()",  # a STABLE function of the user's (pg_proc says so)
    "SELECT id, l, c FROM {t}_plain_v",  # a view that calls no volatile function
    "SELECT * FROM public.{t}_plain_v AS v JOIN {t} ON {t}.id = v.id",
    "SELECT r FROM {t}_mat",  # a materialized view: its rows are stored
]

NEEDS_THE_TRANSACTION = [
    "INSERT INTO {t} VALUES (3, 30)",
    "UPDATE {t} SET n = n + 1 WHERE id = 1",
    "DELETE FROM {t} WHERE id = 2",
    "MERGE INTO {t} USING (VALUES (1)) v(id) ON {t}.id = v.id WHEN MATCHED THEN DO NOTHING",
    "WITH gone AS (DELETE FROM {t} WHERE id = 2 RETURNING id) SELECT count(*) FROM gone",
    "SELECT n INTO {t}_copy FROM {t}",
    "SELECT n FROM {t} WHERE id = 1 FOR UPDATE",
    "SELECT n FROM {t} WHERE id = 1 FOR NO KEY UPDATE",
    "SELECT n FROM {t} WHERE id = 1 FOR SHARE",
    "SELECT n FROM {t} WHERE id = 1 FOR KEY SHARE",
    "LOCK TABLE {t} IN SHARE MODE",
    "SELECT random()",  # volatile (pg_proc)
    "SELECT {t}_volatile()",  # a function of the user's, VOLATILE by default
    "SELECT now()",
    "SELECT current_timestamp",
    "SELECT transaction_timestamp()",
    "SELECT current_date",
    "SELECT current_time",
    "SELECT localtime",
    "SELECT localtimestamp",
    "SELECT nextval('{t}_seq')",
    "SELECT setval('{t}_seq', 5)",
    "SELECT txid_current()",
    "SELECT pg_current_xact_id()",
    "SAVEPOINT s1",
    "SET LOCAL work_mem = '9MB'",
    "SET work_mem = '9MB'",  # session state: the handle keeps its connection (conn.pinned)
    "CREATE TEMP TABLE {t}_tmp (a int)",  # session state too
    "DECLARE {t}_cursor CURSOR FOR SELECT 1",
    "DO $$ BEGIN PERFORM 1; END $$",
    "SELECT 1; SELECT 2",  # several statements
    "SHOW work_mem",  # what the guard refuses on a shared connection
    'SELECT "{t}_Quoted"()',  # a function the scanner cannot spell out
    # a view whose definition calls a volatile function, a sequence or the clock
    "SELECT x FROM {t}_volatile_v",
    "SELECT n FROM {t}_seq_v",
    "SELECT c FROM {t}_clock_v",
    "SELECT * FROM public.{t}_nested_v",  # through another view
    "SELECT 1 FROM {t}, {t}_volatile_v WHERE {t}.id = 1",  # in a FROM list
    'SELECT * FROM {t} JOIN "{t}_Quoted_v" ON true',  # a quoted name
    "SELECT 1 FROM ({t}_seq_v CROSS JOIN {t})",  # first in a parenthesised join
    "SELECT 1 FROM {t} JOIN ({t}_seq_v JOIN {t}_plain_v ON true) ON true",
    "SELECT 1 FROM (({t}_seq_v CROSS JOIN {t}))",
]


@pytest.fixture
def functions(pg, table):
    """The table's functions (stable, volatile, a quoted name) and views (plain, calling
    a volatile function, a sequence or the clock, through another view, materialized)."""
    t = table
    pg.admin(f"CREATE FUNCTION {t}_stable() RETURNS int STABLE LANGUAGE sql AS 'SELECT 1';"
             f"CREATE FUNCTION {t}_volatile() RETURNS int LANGUAGE sql AS 'SELECT 2';"
             f'CREATE FUNCTION "{t}_Quoted"() RETURNS int STABLE LANGUAGE sql '
             "AS 'SELECT 3';"
             f"CREATE VIEW {t}_plain_v AS SELECT id, lower('A') AS l, count(*) OVER () AS c "
             f"FROM {t}; CREATE MATERIALIZED VIEW {t}_mat AS SELECT random() AS r;"
             f"CREATE VIEW {t}_volatile_v AS SELECT {t}_volatile() AS x;"
             f"CREATE VIEW {t}_seq_v AS SELECT nextval('{t}_seq') AS n;"
             f"CREATE VIEW {t}_clock_v AS SELECT current_timestamp AS c;"
             f"CREATE VIEW {t}_nested_v AS SELECT * FROM {t}_plain_v, {t}_volatile_v;"
             f'CREATE VIEW "{t}_Quoted_v" AS SELECT * FROM {t}_volatile_v')
    yield t
    pg.admin(f'DROP VIEW {t}_nested_v, "{t}_Quoted_v", {t}_volatile_v, {t}_seq_v, '
             f"{t}_clock_v, {t}_plain_v; DROP MATERIALIZED VIEW {t}_mat")


@pytest.mark.parametrize("sql", PLAIN_READS)
def test_a_plain_read_runs_multiplexed(connect, functions, sql):
    conn = connect()
    run(conn, sql.format(t=functions))
    assert pinned(conn) == 0 and conn.in_transaction
    assert conn.info.transaction_status.name == "INTRANS"
    conn.rollback()
    assert not conn.in_transaction and conn.info.transaction_status.name == "IDLE"


# ... and those that then fail on the server, in the transaction (which they pinned)
PINS_AND_FAILS_THERE = [
    ("SELECT currval('{t}_seq')", errors.ObjectNotInPrerequisiteState),  # not yet defined
    ("SELECT lastval()", errors.ObjectNotInPrerequisiteState),
    ("SELECT 'never ends", errors.SqlSyntaxError),  # SQL the scanner cannot read
]


def begun_with(writes: list[bytes], sql: str) -> bool:
    """Whether the first pinned write that carries ``sql`` carries the transaction's BEGIN
    too, and no write before it did."""
    text = sql.encode()
    first = next(at for at, write in enumerate(writes) if text in write)
    return b"BEGIN" in writes[first] and not any(b"BEGIN" in w for w in writes[:first])


@pytest.mark.parametrize("sql", NEEDS_THE_TRANSACTION)
def test_a_statement_that_needs_the_transaction_pins_it(connect, functions, sql, monkeypatch):
    conn = connect()
    writes = record_writes(monkeypatch)
    run(conn, "SELECT 1")  # deferred so far
    assert pinned(conn) == 0
    sql = sql.format(t=functions)
    run(conn, sql)
    assert pinned(conn) == 1 and conn.info.backend_pid is not None
    assert begun_with(writes, sql)  # BEGIN rode with it: no round trip of its own
    pid = conn.info.backend_pid
    run(conn, "SELECT 1")  # every later statement runs on the pinned connection
    assert value(conn, "SELECT pg_backend_pid()") == pid
    conn.rollback()
    assert pinned(conn) == (1 if conn.pinned else 0)  # session state keeps it till close()


@pytest.mark.parametrize(("sql", "error"), PINS_AND_FAILS_THERE)
def test_a_statement_that_pins_and_fails_fails_the_pinned_transaction(
        connect, table, sql, error, monkeypatch):
    conn = connect()
    writes = record_writes(monkeypatch)
    run(conn, "SELECT 1")
    sql = sql.format(t=table)
    with pytest.raises(error):
        run(conn, sql)
    assert pinned(conn) == 1 and begun_with(writes, sql)
    assert conn.info.transaction_status.name == "INERROR"
    conn.rollback()
    assert pinned(conn) == 0


def test_copy_pins_with_begin_in_its_write(connect, table, monkeypatch):
    conn = connect()
    writes = record_writes(monkeypatch)
    run(conn, f"SELECT n FROM {table} WHERE id = 1")  # unpinned
    out = io.StringIO()
    sql = f"COPY {table} (id, n) TO STDOUT"
    conn.cursor().copy_expert(sql, out)
    assert out.getvalue() == "1\t10\n2\t20\n"
    assert pinned(conn) == 1 and begun_with(writes, sql)
    conn.cursor().copy_expert(f"COPY {table} (id, n) FROM STDIN", io.StringIO("3\t30\n"))
    assert value(conn, f"SELECT count(*) FROM {table}") == 3  # in the same transaction
    conn.rollback()
    assert value(conn, f"SELECT count(*) FROM {table}") == 2
    conn.rollback()


def test_a_foreign_table_pins(connect, table, pg):
    name = f"{table}_ft"
    pg.admin(f"CREATE FOREIGN DATA WRAPPER {name}_w; CREATE SERVER {name}_s FOREIGN DATA "
             f"WRAPPER {name}_w; CREATE FOREIGN TABLE {name} (a int) SERVER {name}_s")
    try:
        conn = connect()
        with pytest.raises(errors.DatabaseError, match="handler"):  # (a wrapper without one)
            run(conn, f"SELECT a FROM {name}")
        assert pinned(conn) == 1
        conn.rollback()
    finally:
        pg.admin(f"DROP FOREIGN DATA WRAPPER {name}_w CASCADE")


def test_a_view_s_writes_and_sequence_are_the_transaction_s(connect, table, pg):
    """All or nothing, and currval after nextval, through views (an audit's finding)."""
    pg.admin(f"CREATE TABLE {table}_log (a int); CREATE FUNCTION {table}_log_it() RETURNS int "
             f"LANGUAGE sql AS 'INSERT INTO {table}_log VALUES (1) RETURNING 1';"
             f"CREATE VIEW {table}_log_v AS SELECT {table}_log_it() AS x;"
             f"CREATE VIEW {table}_next_v AS SELECT nextval('{table}_seq') AS n")
    try:
        conn = connect()
        assert value(conn, f"SELECT x FROM {table}_log_v") == 1
        conn.rollback()
        assert pg.admin(f"SELECT count(*) FROM {table}_log") == "0"
        n = value(conn, f"SELECT n FROM {table}_next_v")
        assert value(conn, f"SELECT currval('{table}_seq')") == n
        conn.commit()
    finally:
        pg.admin(f"DROP VIEW {table}_log_v, {table}_next_v; DROP TABLE {table}_log")


def test_names_are_looked_up_once_per_batch_and_again_after_their_ttl(
        connect, functions, pg, monkeypatch):
    conn = connect()
    lookups: list[list] = []
    query = conn.client.query

    def counting(sql, params=(), **options):
        if sql == deferral.LOOKUP_SQL:
            lookups.append(params)
        return query(sql, params, **options)

    monkeypatch.setattr(conn.client, "query", counting)
    t = functions
    run(conn, f"SELECT {t}_stable(), l FROM {t}_plain_v, {t} AS x")
    assert len(lookups) == 1  # the function and both relations, in one query
    assert sorted(lookups[0][2]) == [t, f"{t}_plain_v"]
    run(conn, f"SELECT l FROM {t}_plain_v WHERE {t}_stable() = 1")  # known names: no query
    run(conn, f"SELECT {t}_stable(), l FROM {t}_plain_v, {t} AS x")  # known text
    assert len(lookups) == 1 and pinned(conn) == 0
    conn.rollback()
    pg.admin(f"CREATE OR REPLACE VIEW {t}_plain_v AS SELECT id, lower('A') AS l, "
             f"count(*) OVER () AS c, random() AS r FROM {t}")  # now volatile
    run(conn, f"SELECT l FROM {t}_plain_v")  # within the TTL: still known as plain
    assert pinned(conn) == 0 and len(lookups) == 1
    conn.rollback()
    later = time.monotonic() + deferral.LOOKUP_TTL + 1
    monkeypatch.setattr(deferral, "monotonic", lambda: later)
    run(conn, f"SELECT l FROM {t}_plain_v")  # due again: looked up, and it pins now
    assert pinned(conn) == 1 and len(lookups) == 2
    conn.rollback()


def test_what_was_looked_up_is_kept_in_bounded_caches(monkeypatch):
    """The names' verdicts are bounded as the texts' are; a look-up whose stores empty a
    cache still judges its statement from every one of its names."""

    class Catalog:  # every name a stable function, or a plain table
        def query(self, sql, params):
            functions, schemas, relations = params
            rows = [("f", "", name, False) for name in functions]
            rows += [("r", schema, name, False)
                     for schema, name in zip(schemas, relations, strict=True)]
            return type("Reply", (), {"rows": rows})

    monkeypatch.setattr(deferral, "CACHE_SIZE", 4)
    judge = deferral.Deferral()
    for n in range(5):
        sql = f"SELECT f{n}a(), f{n}b(), f{n}c() FROM t{n}a, t{n}b, t{n}c"
        assert judge.needs_transaction(Catalog(), sql) is None
        assert len(judge._functions) <= 4 and len(judge._relations) <= 4
    assert set(judge._functions) == {"f4a", "f4b", "f4c"}  # (emptied at f4a)
    sql = "SELECT f4a(), f4b(), f4c(), f8(), f9() FROM t4a, t4b, t4c, t8, t9"
    assert judge.needs_transaction(Catalog(), sql) is None  # f8's or f9's store empties it
    assert len(judge._functions) < 3 and len(judge._relations) < 3


def test_named_cursors_and_executemany_pin(connect, table):
    conn = connect()
    cur = conn.cursor("c1")
    cur.execute(f"SELECT n FROM {table} ORDER BY id")
    assert pinned(conn) == 1 and cur.fetchall() == [(10,), (20,)]
    conn.rollback()
    conn.cursor().executemany(f"UPDATE {table} SET n = n WHERE id = %s", [(1,), (2,)])
    assert pinned(conn) == 1
    conn.rollback()


def test_commit_and_rollback_of_a_transaction_that_never_pinned_send_nothing(
        connect, table, pg, monkeypatch):
    conn = connect(pipeline_size=1)
    sent = record_writes(monkeypatch)
    for end in (conn.commit, conn.rollback):
        assert value(conn, f"SELECT n FROM {table} WHERE id = 1") == 10
        end()
        assert not conn.in_transaction
    assert sent == []  # no pinned connection was written to
    assert server_connections(pg, conn) == 1  # the one pipelined connection, nothing pinned


def test_ending_a_pinned_transaction_costs_one_round_trip(connect, table, monkeypatch):
    conn = connect(pinned_size=1)
    writes = record_writes(monkeypatch)
    for end, word in ((conn.commit, b"COMMIT"), (conn.rollback, b"ROLLBACK")):
        run(conn, f"UPDATE {table} SET n = n WHERE id = 1")
        writes.clear()
        end()
        assert len(writes) == 1 and word in writes[0]  # and no reset after it
        assert pinned(conn) == 0


# -- what the program observes: a real READ COMMITTED transaction -------------------------

def test_its_own_uncommitted_writes_are_seen_by_it_alone(connect, table):
    conn, other = connect(), connect()
    assert value(conn, f"SELECT count(*) FROM {table}") == 2  # unpinned
    run(conn, f"INSERT INTO {table} VALUES (3, 30)")
    assert value(conn, f"SELECT count(*) FROM {table}") == 3  # its own write
    assert value(other, f"SELECT count(*) FROM {table}") == 2
    other.rollback()
    conn.commit()
    assert value(other, f"SELECT count(*) FROM {table}") == 3
    other.rollback()


def test_row_locks_are_held_to_the_end_of_the_transaction(connect, table):
    conn, other = connect(), connect()
    run(conn, f"SELECT n FROM {table} WHERE id = 1 FOR UPDATE")
    run(conn, "SELECT 1")  # a later plain read keeps the lock (it runs pinned)
    with pytest.raises(errors.LockNotAvailable):
        run(other, f"SELECT n FROM {table} WHERE id = 1 FOR UPDATE NOWAIT")
    other.rollback()
    conn.commit()
    assert run(other, f"SELECT n FROM {table} WHERE id = 1 FOR UPDATE NOWAIT") == [(10,)]
    other.rollback()


def test_all_or_nothing(connect, table):
    conn = connect()
    run(conn, f"INSERT INTO {table} VALUES (3, 30)")
    run(conn, f"UPDATE {table} SET n = 0 WHERE id = 1")
    with pytest.raises(errors.UniqueViolation):
        run(conn, f"INSERT INTO {table} VALUES (3, 31)")
    conn.rollback()
    assert run(conn, f"SELECT id, n FROM {table} ORDER BY id") == [(1, 10), (2, 20)]
    conn.rollback()


def test_currval_after_nextval_and_one_now(connect, table):
    conn = connect()
    first = value(conn, f"SELECT nextval('{table}_seq')")
    assert value(conn, f"SELECT currval('{table}_seq')") == first
    now = value(conn, "SELECT now()")
    gevent.sleep(0.01)
    assert value(conn, "SELECT now()") == now
    assert value(conn, "SELECT current_timestamp") == now
    conn.commit()


def test_one_now_when_the_clock_is_the_first_statement_that_pins(connect):
    conn = connect()
    run(conn, "SELECT 1")
    now = value(conn, "SELECT now()")
    assert value(conn, "SELECT transaction_timestamp()") == now
    conn.rollback()


@pytest.mark.parametrize("failing", [
    "SELECT n FROM no_such_table",  # a plain read, multiplexed: its error fails the transaction
    "SELECT 1 / (n - n) FROM {t}",
    "INSERT INTO {t} VALUES (1, 0)",  # pinned: the server fails the transaction
])
def test_after_an_error_every_statement_fails_until_rollback(connect, table, failing):
    conn = connect()
    run(conn, f"SELECT n FROM {table} WHERE id = 1")
    with pytest.raises(errors.DatabaseError):
        run(conn, failing.format(t=table))
    assert conn.info.transaction_status.name == "INERROR"
    for sql in ("SELECT 1", f"UPDATE {table} SET n = 0"):
        with pytest.raises(errors.InFailedSqlTransaction) as caught:
            run(conn, sql)
        assert caught.value.sqlstate == "25P02"
        assert isinstance(caught.value, pgmux.dbapi.InternalError)
    conn.rollback()
    assert conn.info.transaction_status.name == "IDLE"
    assert value(conn, f"SELECT n FROM {table} WHERE id = 1") == 10
    conn.rollback()


def test_commit_of_a_failed_unpinned_transaction_raises_as_a_pinned_one_does(connect):
    conn = connect()
    with pytest.raises(errors.UndefinedTable):
        run(conn, "SELECT * FROM no_such_table")
    with pytest.raises(errors.InFailedSqlTransaction):
        conn.commit()
    assert not conn.in_transaction and value(conn, "SELECT 1") == 1
    conn.rollback()


# -- COMMIT and ROLLBACK as SQL: what commit() and rollback() do -------------------------

@pytest.mark.parametrize("deferred", [True, False])
def test_sql_rollback_after_a_failed_read_ends_the_transaction(connect, deferred):
    conn = connect(deferred_pinning=deferred)
    with pytest.raises(errors.UndefinedTable):  # unpinned (deferred), else on the server
        run(conn, "SELECT * FROM no_such_table")
    assert conn.info.transaction_status.name == "INERROR"
    cur = conn.cursor()
    cur.execute("ROLLBACK")  # the server accepts it: so does pgmux
    assert cur.statusmessage == "ROLLBACK"
    assert conn.info.transaction_status.name == "IDLE" and not conn.in_transaction
    assert value(conn, "SELECT 1") == 1
    conn.rollback()


@pytest.mark.parametrize(("sql", "tag"), [
    ("COMMIT", "COMMIT"), ("end work", "COMMIT"), ("COMMIT AND NO CHAIN", "COMMIT"),
    ("ROLLBACK", "ROLLBACK"), ("abort transaction;", "ROLLBACK")])
@pytest.mark.parametrize("deferred", [True, False])
def test_sql_commit_or_rollback_ends_the_transaction_as_commit_and_rollback_do(
        connect, table, pg, monkeypatch, sql, tag, deferred):
    conn = connect(deferred_pinning=deferred)
    writes = record_writes(monkeypatch)
    run(conn, f"SELECT n FROM {table} WHERE id = 1")
    cur = conn.cursor()
    cur.execute(sql)
    assert cur.statusmessage == tag
    assert conn.info.transaction_status.name == "IDLE" and not conn.in_transaction
    assert (writes == []) is deferred  # a transaction that never pinned: nothing is sent
    run(conn, f"UPDATE {table} SET n = 11 WHERE id = 1")  # pins, a new transaction
    assert conn.info.transaction_status.name == "INTRANS"
    cur.execute(sql)  # sent to the server, on the pinned connection (given back)
    assert cur.statusmessage == tag and pinned(conn) == 0
    assert conn.info.transaction_status.name == "IDLE" and not conn.in_transaction
    committed = tag == "COMMIT"
    assert pg.admin(f"SELECT n FROM {table} WHERE id = 1") == ("11" if committed else "10")
    conn.commit()  # nothing left to end


def test_sql_commit_of_a_failed_unpinned_transaction_rolls_back_as_the_server_does(connect):
    conn = connect()
    with pytest.raises(errors.UndefinedTable):
        run(conn, "SELECT * FROM no_such_table")
    cur = conn.cursor()
    cur.execute("COMMIT")
    assert cur.statusmessage == "ROLLBACK" and conn.info.transaction_status.name == "IDLE"


def test_rollback_to_a_savepoint_and_commit_and_chain_keep_the_transaction(connect, table, pg):
    conn = connect()
    run(conn, "SAVEPOINT a")
    run(conn, f"UPDATE {table} SET n = 12 WHERE id = 1")
    run(conn, "ROLLBACK TO SAVEPOINT a")
    assert conn.info.transaction_status.name == "INTRANS" and pinned(conn) == 1
    run(conn, f"UPDATE {table} SET n = 13 WHERE id = 1")
    run(conn, "COMMIT AND CHAIN")  # committed; a new transaction is open at once
    assert pg.admin(f"SELECT n FROM {table} WHERE id = 1") == "13"
    assert conn.info.transaction_status.name == "INTRANS" and pinned(conn) == 1
    conn.rollback()
    assert conn.info.transaction_status.name == "IDLE" and pinned(conn) == 0


def test_settings_cannot_change_inside_an_unpinned_transaction(connect):
    conn = connect()
    run(conn, "SELECT 1")
    with pytest.raises(pgmux.dbapi.ProgrammingError, match="inside a transaction"):
        conn.autocommit = True
    conn.rollback()
    conn.autocommit = True


# -- isolation levels and the opt-out -------------------------------------------------------

@pytest.mark.parametrize("level", ["repeatable read", "serializable"])
def test_stricter_isolation_pins_at_the_first_statement(connect, level):
    conn = connect()
    conn.isolation_level = level
    assert value(conn, "SELECT current_setting('transaction_isolation')") == level
    assert pinned(conn) == 1
    conn.rollback()


def test_read_only_deferrable_pins_and_read_only_alone_defers(connect, table):
    conn = connect()
    conn.read_only, conn.deferrable = True, True
    run(conn, "SELECT 1")
    assert pinned(conn) == 1
    conn.rollback()
    conn.deferrable = False
    run(conn, "SELECT 1")
    assert pinned(conn) == 0
    with pytest.raises(errors.ReadOnlySqlTransaction):  # BEGIN READ ONLY came with it
        run(conn, f"UPDATE {table} SET n = 0")
    conn.rollback()


def test_read_committed_named_explicitly_defers(connect):
    conn = connect()
    conn.isolation_level = "READ COMMITTED"
    run(conn, "SELECT 1")
    assert pinned(conn) == 0
    assert value(conn, "SELECT now()") is not None
    assert value(conn, "SELECT current_setting('transaction_isolation')") == "read committed"
    conn.rollback()


def test_a_server_default_of_serializable_pins_at_the_first_statement(connect):
    conn = connect(options="-c default_transaction_isolation=serializable")
    run(conn, "SELECT 1")
    assert pinned(conn) == 1
    assert value(conn, "SELECT current_setting('transaction_isolation')") == "serializable"
    conn.rollback()


@pytest.mark.parametrize("off", [False, "false", "off"])
def test_deferred_pinning_can_be_switched_off_per_connection(connect, off):
    conn = connect(deferred_pinning=off)
    run(conn, "SELECT 1")
    assert pinned(conn) == 1
    conn.rollback()
    assert connect().deferred_pinning is True  # the same client, another handle
    with pytest.raises(pgmux.dbapi.ProgrammingError, match="deferred_pinning"):
        connect(deferred_pinning="maybe")


def test_two_phase_transactions_pin_at_their_first_statement(connect, pg):
    conn = connect()
    conn.tpc_begin(f"defer-{uuid.uuid4().hex[:8]}")
    run(conn, "SELECT 1")
    assert pinned(conn) == 1
    conn.tpc_rollback()
    assert pinned(conn) == 0


# -- faults --------------------------------------------------------------------------------

def test_a_greenlet_killed_while_unpinned_leaks_nothing(connect, pg):
    conn = connect(pipeline_size=1)
    job = gevent.spawn(run, conn, SLOW_READ)  # unpinned
    wait_for_slow_read(pg)
    job.kill()
    assert pinned(conn) == 0 and conn.in_transaction
    conn.rollback()
    assert value(conn, "SELECT 2") == 2  # the handle and the pipeline still work
    assert server_connections(pg, conn) == 1
    conn.rollback()


def test_a_pinned_connection_lost_after_pinning_raises_and_applies_nothing(connect, table, pg):
    conn = connect()
    run(conn, f"SELECT n FROM {table} WHERE id = 1")  # unpinned
    run(conn, f"INSERT INTO {table} VALUES (3, 30)")  # pins
    pg.admin(f"SELECT pg_terminate_backend({conn.info.backend_pid})")
    with pytest.raises(errors.OperationalError):
        run(conn, f"INSERT INTO {table} VALUES (4, 40)")
    with pytest.raises(errors.InFailedSqlTransaction):  # the transaction is gone, and its work
        run(conn, "SELECT 1")
    with pytest.raises(errors.InFailedSqlTransaction):
        conn.commit()
    assert pg.admin(f"SELECT count(*) FROM {table}") == "2"  # nothing was applied
    run(conn, f"INSERT INTO {table} VALUES (5, 50)")  # a new transaction, a new connection
    conn.commit()
    assert pg.admin(f"SELECT count(*) FROM {table}") == "3"
