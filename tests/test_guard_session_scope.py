"""sql.session_scope: which SQL leaves state that outlives its transaction (pgmux.dbapi
pins a DB-API connection to one server connection from such a statement on)."""

from __future__ import annotations

import pytest

from pgmux.sql.session_scope import session_scope


@pytest.mark.parametrize(
    "sql",
    [
        "SET search_path = app",
        "set application_name to 'x'",
        "SET SESSION statement_timeout = 5",
        "SET ROLE reader",
        "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
        "RESET ALL",
        "LISTEN jobs",
        "PREPARE p AS SELECT 1",
        "DISCARD PLANS",
        "LOAD 'auto_explain'",
        "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
        "CREATE TEMP TABLE t (a int)",
        "create temporary table t (a int)",
        "CREATE GLOBAL TEMPORARY TABLE t (a int)",
        "CREATE OR REPLACE TEMP VIEW v AS SELECT 1",
        "CREATE TEMPORARY SEQUENCE s",
        "SELECT 1 INTO TEMP t",
        "CREATE TABLE pg_temp.t (a int)",
        "SELECT pg_advisory_lock(1)",
        "SELECT pg_try_advisory_lock_shared(1, 2)",
        "SELECT set_config('search_path', 'x', false)",
        'SELECT "set_config"(\'a\', \'b\', false)',
        "SELECT setseed(0.5)",
        "UPDATE pg_settings SET setting = 'x' WHERE name = 'search_path'",
        "SELECT 1; SET search_path = x",
        "  (SET x = 1",
    ],
)
def test_session_scoped(sql):
    assert session_scope(sql) is not None


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1",
        "SET LOCAL search_path = app",
        "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        "SET CONSTRAINTS ALL DEFERRED",
        "DECLARE c CURSOR FOR SELECT 1",
        "SELECT pg_advisory_xact_lock(1)",
        "UPDATE t SET a = 1",
        "CREATE TABLE temp (a int)",
        "SELECT temp FROM t",
        "SELECT 'SET x = 1', 'CREATE TEMP TABLE t'",
        "SELECT 1 -- SET x = 1",
        'SELECT "pg_temp" FROM t',
        "SHOW search_path",
        "BEGIN",
        "PREPARE TRANSACTION 'tx-1'",
        "prepare  transaction 'tx-2'",
        "COMMIT PREPARED 'tx-1'",
        "CREATE FUNCTION f() RETURNS void AS $$ SET x = 1 $$ LANGUAGE sql",
        "SELECT 'unterminated",
    ],
)
def test_not_session_scoped(sql):
    assert session_scope(sql) is None


def test_verdicts_name_the_reason_and_are_cached():
    assert session_scope("LISTEN a") == "LISTEN outlives the transaction"
    assert "pg_advisory_lock()" in session_scope("SELECT pg_advisory_lock(7)")
    assert session_scope("LISTEN a") is session_scope("LISTEN a")
