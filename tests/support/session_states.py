"""The kinds of session state a borrower can leave on a pinned connection, and how the next
borrower would see each (shared by the reset tests of every path)."""

from __future__ import annotations

from collections.abc import Iterator

ROLE = "pgmux_reset_role"
OURS = "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'pgmux_%'"
PROBE = "SELECT $1::int + 1"  # a statement of pgmux's own, prepared on the connection
LEAK = "pgmux_reset_leak"  # a user function leaving a setting, a session lock, a temp table
LEFT_BY_LEAK = ("SELECT current_setting('work_mem') = '7MB' "
                "OR to_regclass('pg_temp.reset_leak_scratch') IS NOT NULL OR EXISTS (SELECT "
                "FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())")

# (what the first borrower leaves, a query, and its answer for a clean next borrower)
STATES = {
    "SET": ("SET work_mem = '7MB'", "SELECT current_setting('work_mem') = '7MB'", False),
    "set_config": ("SELECT set_config('work_mem', '7MB', false)",
                   "SELECT current_setting('work_mem') = '7MB'", False),
    "temporary table": ("CREATE TEMP TABLE reset_scratch (a int)",
                        "SELECT to_regclass('pg_temp.reset_scratch') IS NULL", True),
    "LISTEN": ("LISTEN reset_channel", "SELECT count(*) FROM pg_listening_channels()", 0),
    "advisory lock": ("SELECT pg_advisory_lock(4711)",
                      "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                      "AND pid = pg_backend_pid()", 0),
    "WITH HOLD cursor": ("DECLARE reset_cursor CURSOR WITH HOLD FOR SELECT 1",
                         "SELECT count(*) FROM pg_cursors WHERE name = 'reset_cursor'", 0),
    "SQL PREPARE": ("PREPARE reset_statement AS SELECT 1",
                    "SELECT count(*) FROM pg_prepared_statements "
                    "WHERE name = 'reset_statement'", 0),
    "SET ROLE": (f"SET ROLE {ROLE}", "SELECT current_user = session_user", True),
    "SET SESSION AUTHORIZATION": (f"SET SESSION AUTHORIZATION {ROLE}",
                                  f"SELECT session_user = '{ROLE}'", False),
    "DO block": ("DO $$ BEGIN PERFORM set_config('work_mem', '7MB', false); END $$",
                 "SELECT current_setting('work_mem') = '7MB'", False),
    "user function": (f"SELECT {LEAK}()", LEFT_BY_LEAK, False),
    "CALL": (f"CALL {LEAK}_proc()", LEFT_BY_LEAK, False),
    "nextval": (f"SELECT nextval('{LEAK}_seq')", f"SELECT {LEAK}_lastval_set()", False),
}


def session_objects(pg, dbname: str | None = None) -> Iterator[str]:
    """For a fixture: the role SET ROLE and SET SESSION AUTHORIZATION switch to, and (in
    ``dbname``) what the "user function", "CALL" and "nextval" states use."""
    pg.admin(f"DROP ROLE IF EXISTS {ROLE}; CREATE ROLE {ROLE}; "
             f"CREATE OR REPLACE FUNCTION {LEAK}() RETURNS int LANGUAGE plpgsql AS $$ BEGIN "
             "PERFORM set_config('work_mem', '7MB', false); PERFORM pg_try_advisory_lock(4712); "
             "CREATE TEMP TABLE IF NOT EXISTS reset_leak_scratch (a int); RETURN 1; END $$; "
             f"CREATE OR REPLACE PROCEDURE {LEAK}_proc() LANGUAGE plpgsql AS $$ BEGIN "
             f"PERFORM {LEAK}(); END $$; CREATE SEQUENCE IF NOT EXISTS {LEAK}_seq; "
             f"CREATE OR REPLACE FUNCTION {LEAK}_lastval_set() RETURNS bool LANGUAGE plpgsql "
             "AS $$ BEGIN PERFORM lastval(); RETURN true; EXCEPTION WHEN "
             "object_not_in_prerequisite_state THEN RETURN false; END $$", dbname=dbname)
    yield ROLE
    pg.admin(f"DROP OWNED BY {ROLE}; DROP ROLE {ROLE}; DROP PROCEDURE {LEAK}_proc(); "
             f"DROP FUNCTION {LEAK}(), {LEAK}_lastval_set(); DROP SEQUENCE {LEAK}_seq",
             dbname=dbname)
