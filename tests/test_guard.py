"""The multiplexing guard: the SQL scanner's masking, the rules of each mode, the verdict cache."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pgmux import guard as guard_module
from pgmux.errors import InterfaceError, UnsafeMultiplexError
from pgmux.guard import Guard, reject_reason
from pgmux.sql import scanner
from pgmux.sql.scanner import UnterminatedSQLError, mask_sql

OK = None
LEADING = "leading keyword"
MULTI = "multiple statements"
INTO = "SELECT INTO creates a table"
SETTINGS = "pg_settings"
STRICT = "rejected by the strict guard"


def session_fn(name: str) -> str:
    return f"session-level function {name}()"


# (sql, expected under "default"[, expected under "strict" when it differs]): OK passes,
# else a fragment of the rejection reason. "off" passes everything.
ROWS = [
    # plain statements that may be multiplexed
    ("SELECT 1", OK),
    ("select $1::int AS id, now() AS at", OK),
    ("  (SELECT 1) UNION (SELECT 2)", OK),
    ("((VALUES (1), (2)))", OK),
    ("TABLE accounts", OK),
    ("INSERT INTO t (a) VALUES ($1) RETURNING id", OK),
    ("insert\ninto t select * from u", OK),
    ("INSERT /* c */ INTO t DEFAULT VALUES", OK),
    ("UPDATE t SET a = a + 1 WHERE id = $1", OK),
    ("DELETE FROM t WHERE id = $1", OK),
    ("MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE", OK),
    ("WITH moved AS (DELETE FROM a RETURNING *) INSERT INTO b SELECT * FROM moved", OK),
    ("SELECT * FROM t FOR UPDATE SKIP LOCKED", OK),
    ("SELECT pg_advisory_xact_lock(1)", OK),
    ("SELECT pg_try_advisory_xact_lock_shared(1)", OK),
    ("SELECT lo_create(0), lo_unlink(1), lo_get(2)", OK),
    ("SELECT pg_notify('c', 'x')", OK),
    ("SELECT current_setting('work_mem')", OK),
    ("SELECT 1 FROM pg_settings WHERE name = 'x'", OK),
    ("SELECT nextval('s')", OK, STRICT),
    ("INSERT INTO t VALUES (setval('s', 1))", OK, STRICT),
    ("SELECT pg_export_snapshot()", OK, STRICT),
    # masking traps that must pass
    ("SELECT 'SET x'", OK),
    ("SELECT 1 -- BEGIN", OK),
    ("SELECT 1 -- ; SET x = 1", OK),
    ("SELECT $$ ; DROP TABLE x $$", OK),
    ("SELECT $tag$ set_config( $tag$", OK),
    ("SELECT $a$ $b$ ; $b$ $a$", OK),
    ("SELECT E'it\\'s; BEGIN'", OK),
    ("SELECT e'\\\\'", OK),
    ("SELECT 'a'';SET x'", OK),
    ("SELECT U&'d\\0061t;a'", OK),
    ("SELECT X'1F', B'1;0'", OK),
    ("SELECT /* nested /* ; */ still comment ; */ 1", OK),
    ("SELECT 1;", OK),
    ("SELECT 1; -- trailing comment", OK),
    ("SELECT 1 ; /* trailing */  \n", OK),
    ("SELECT col_set_config FROM t", OK),
    ("SELECT lastval_x()", OK),
    ("SELECT my$set_config(1)", OK),
    ('SELECT "SET_CONFIG"(1)', OK),
    ('SELECT 1 AS "into", 2 AS "select"', OK),
    ("SELECT 'into' AS x", OK),
    ("SELECT set_config FROM t", OK),
    ("SELECT abc$$ FROM t", OK),
    ("SELECT $1 || $2", OK),
    # leading keyword
    ("SET x = 1", LEADING + " SET"),
    ("set local x = 1", LEADING + " SET"),
    ("  /* c */ BEGIN", LEADING + " BEGIN"),
    ("-- c\nSTART TRANSACTION", LEADING + " START"),
    ("LISTEN c", LEADING + " LISTEN"),
    ("DO $$ BEGIN PERFORM 1; END $$", LEADING + " DO"),
    ("CALL p()", LEADING + " CALL"),
    ("COPY t FROM STDIN", LEADING + " COPY"),
    ("VACUUM", LEADING + " VACUUM"),
    ("SHOW work_mem", LEADING + " SHOW"),
    ("PREPARE s AS SELECT 1", LEADING + " PREPARE"),
    ("DECLARE c CURSOR FOR SELECT 1", LEADING + " DECLARE"),
    ("CREATE TEMP TABLE t (a int)", LEADING + " CREATE"),
    ("DISCARD ALL", LEADING + " DISCARD"),
    ("RESET ALL", LEADING + " RESET"),
    ("LOCK TABLE t", LEADING + " LOCK"),
    ("EXPLAIN SELECT 1", LEADING + " EXPLAIN"),
    ("(COMMIT)", LEADING + " COMMIT"),
    ("'SELECT'", "does not start with a keyword"),
    ("", "empty"),
    ("  -- nothing\n /* here */ ;", "empty"),
    # multiple statements
    ("select 1; select 2", MULTI),
    ("(SELECT 1) ; COMMIT", MULTI),
    ("SELECT 1;;", MULTI),
    ("SELECT 'x'; SET y = 1", MULTI),
    ("SELECT 1; /* c */ x", MULTI),
    # session-level functions
    ("SELECT set_config('a', 'b', false)", session_fn("set_config")),
    ("SELECT pg_catalog.set_config ('a', 'b', false)", session_fn("set_config")),
    ("SELECT PG_CATALOG . SET_CONFIG /* x */ (1)", session_fn("set_config")),
    ('SELECT "set_config"(1)', session_fn("set_config")),
    ('SELECT "pg_catalog"."set_config"(1)', session_fn("set_config")),
    ('SELECT U&"set\\005fconfig"(1)', session_fn("set_config")),
    ("SELECT * FROM t WHERE setseed(0.5) IS NULL", session_fn("setseed")),
    ("SELECT currval('s')", session_fn("currval")),
    ("SELECT lastval()", session_fn("lastval")),
    ("SELECT pg_advisory_lock(1)", session_fn("pg_advisory_lock")),
    ("SELECT pg_try_advisory_lock_shared(1, 2)", session_fn("pg_try_advisory_lock_shared")),
    ("SELECT pg_advisory_unlock_all()", session_fn("pg_advisory_unlock_all")),
    ("SELECT dblink_connect('c', 'dbname=x')", session_fn("dblink_connect")),
    ("SELECT lo_open(1, 262144)", session_fn("lo_open")),
    ("SELECT loread(0, 10)", session_fn("loread")),
    ("UPDATE t SET a = lastval()", session_fn("lastval")),
    # SELECT INTO and pg_settings
    ("SELECT * INTO TEMP t FROM x", INTO),
    ("SELECT 1 AS a INTO UNLOGGED t", INTO),
    ("select * into t from x", INTO),
    ("WITH x AS (SELECT 1) SELECT * INTO t FROM x", INTO),
    ("UPDATE pg_settings SET setting = '1' WHERE name = 'x'", SETTINGS),
    ("update only pg_catalog.pg_settings set setting = '1'", SETTINGS),
    ('UPDATE "pg_settings" SET setting = 1', SETTINGS),
    ("WITH u AS (UPDATE pg_settings SET setting = 1 RETURNING 1) SELECT 1", SETTINGS),
    # text that cannot be masked
    ("SELECT 'abc", "unterminated quoted string"),
    ("SELECT E'abc\\'", "unterminated E'' string"),
    ('SELECT "abc', "unterminated quoted identifier"),
    ("SELECT /* a /* b */", "unterminated /* comment"),
    ("SELECT $x$ abc $y$", "unterminated dollar-quoted string"),
]

CASES = [(row[0], row[1], row[-1]) for row in ROWS]


def test_the_table_is_large_and_mixed():
    assert len(CASES) >= 60
    assert sum(d is None for _, d, _ in CASES) >= 20
    assert sum(d is not None for _, d, _ in CASES) >= 30


@pytest.mark.parametrize(("sql", "default", "strict"), CASES)
@pytest.mark.parametrize("mode", ["default", "strict", "off"])
def test_rules(sql, default, strict, mode):
    expected = {"default": default, "strict": strict, "off": None}[mode]
    guard = Guard(mode)
    if expected is None:
        guard.check(sql)
        assert reject_reason(sql, mode) is None
    else:
        with pytest.raises(UnsafeMultiplexError) as info:
            guard.check(sql)
        assert expected in str(info.value)
        assert reject_reason(sql, mode) == str(info.value)


def test_reason_messages_name_the_way_out():
    assert reject_reason("SET x = 1") == "leading keyword SET; use db.session()"
    assert reject_reason("select 1; select 2") == (
        "multiple statements; use db.session() or separate calls"
    )
    assert reject_reason("SELECT set_config('a','b',false)") == (
        "session-level function set_config(); use db.session()"
    )
    assert reject_reason("SELECT 1 INTO t") == "SELECT INTO creates a table; use db.session()"


def test_rejection_is_an_interface_error_and_hides_literals():
    with pytest.raises(InterfaceError) as info:
        Guard().check("SET password_encryption = 'secret-value'")
    assert "secret-value" not in str(info.value)


def test_bad_mode():
    with pytest.raises(ValueError, match="strict"):
        Guard("paranoid")
    with pytest.raises(ValueError):
        reject_reason("SELECT 1", "paranoid")


# ---------------------------------------------------------------------------
# mask_sql


@pytest.mark.parametrize(
    ("sql", "masked"),
    [
        ("SELECT 'a;b'", "SELECT '   '"),
        ("SELECT 'it''s'", "SELECT '     '"),
        ("SELECT E'a\\'b'", "SELECT E'    '"),
        ("SELECT U&'\\0041'", "SELECT U&'     '"),
        ('SELECT "we""ird"', 'SELECT "       "'),
        ("SELECT $$x$$, $t$y$t$", "SELECT $   $, $     $"),
        ("SELECT $1, $2", "SELECT $1, $2"),
        ("SELECT 1 -- c\nFROM t", "SELECT 1     \nFROM t"),
        ("SELECT 1 -- c\rFROM t", "SELECT 1     \rFROM t"),
        ("SELECT /* a\n/* b */ */ 1", "SELECT     \n           1"),
        ("SELECT 'a\nb'", "SELECT ' \n '"),
        ("SELECT abc$d$ FROM t", "SELECT abc$d$ FROM t"),  # $ inside an identifier
        ("SELECT xe'\\' ", "SELECT xe' ' "),  # xe is an identifier: a plain string follows
        ("SELECT /*/ 1 */ 2", "SELECT          2"),
        ("SELECT 1.5$$;$$", "SELECT 1.5$   $"),  # a number ends where a dollar quote starts
        ("SELECT $1$$;$$", "SELECT $1$   $"),  # so does a parameter
        ("SELECT a1$$, 2$$;$$", "SELECT a1$$, 2$   $"),  # an identifier does not end at $
        ("", ""),
    ],
)
def test_mask_sql(sql, masked):
    assert mask_sql(sql) == masked
    assert len(mask_sql(sql)) == len(sql)


@pytest.mark.parametrize(
    "sql", ["SELECT 'a", "SELECT E'a\\", 'SELECT "a', "SELECT /* /* */", "SELECT $q$ a $Q$"]
)
def test_mask_sql_unterminated(sql):
    with pytest.raises(UnterminatedSQLError, match="unterminated"):
        mask_sql(sql)
    assert issubclass(UnterminatedSQLError, ValueError)


def _assert_structure_kept(sql: str, masked: str) -> None:
    assert len(masked) == len(sql)
    for original, char in zip(sql, masked, strict=True):
        assert char == original or char == " "
        if original in "\n\r":
            assert char == original


SQLISH = st.text(alphabet=st.sampled_from(list("'\"$-/*;\\ \n\rEeUu&xa1(")) | st.characters())


@given(SQLISH)
def test_mask_sql_random_text(sql):
    try:
        masked = mask_sql(sql)
    except UnterminatedSQLError as exc:
        assert "unterminated" in str(exc)
        return
    _assert_structure_kept(sql, masked)


@given(st.text())
def test_string_literal_contents_always_pass(content):
    sql = "SELECT '" + content.replace("'", "''") + "'"
    masked = mask_sql(sql)
    assert masked == "SELECT '" + masked[8:-1] + "'"
    assert masked[8:-1].strip(" \n\r") == ""
    assert reject_reason(sql) is None
    assert reject_reason(sql, "strict") is None


@given(st.text())
def test_dollar_quoted_contents_always_pass(content):
    assume((content + "$body$").find("$body$") == len(content))  # the quote ends where we end it
    sql = f"SELECT $body${content}$body$"
    assert reject_reason(sql, "strict") is None


# ---------------------------------------------------------------------------
# the verdict cache


def test_second_check_is_a_cache_hit(monkeypatch):
    guard = Guard()
    guard.check("SELECT 1")
    with pytest.raises(UnsafeMultiplexError):
        guard.check("SET x = 1")
    assert guard.misses == 2

    def must_not_run(sql, mode="default"):
        raise AssertionError("verdict recomputed")

    monkeypatch.setattr(guard_module, "reject_reason", must_not_run)
    guard.check("SELECT 1")
    with pytest.raises(UnsafeMultiplexError, match="leading keyword SET"):
        guard.check("SET x = 1")
    assert guard.misses == 2
    assert guard._cache == {"SELECT 1": None, "SET x = 1": "leading keyword SET; use db.session()"}


def test_cache_is_bounded():
    guard = Guard(cache_size=3)
    for i in range(10):
        guard.check(f"SELECT {i}")
        assert len(guard._cache) <= 3
    assert guard.misses == 10
    guard.check("SELECT 9")
    assert guard.misses == 10


def test_cache_is_per_mode():
    default, strict = Guard("default"), Guard("strict")
    default.check("SELECT nextval('s')")
    with pytest.raises(UnsafeMultiplexError):
        strict.check("SELECT nextval('s')")


def test_off_never_judges():
    guard = Guard("off")
    guard.check("SET x = 1; BEGIN")
    guard.check("SELECT 'unterminated")
    assert guard.misses == 0 and guard._cache == {}


def test_very_long_statements_are_not_cached():
    guard = Guard()
    sql = "SELECT " + "1 + " * 20000 + "1"
    guard.check(sql)
    guard.check(sql)
    assert guard.misses == 2 and guard._cache == {}


@pytest.mark.parametrize("count", [100, 1000])
def test_masking_is_linear_on_identifiers_full_of_dollars(monkeypatch, count):
    # Each $ looks back over its identifier run; the walk must not restart from its start.
    steps = 0
    real = scanner._is_ident_char

    def counting(char):
        nonlocal steps
        steps += 1
        return real(char)

    monkeypatch.setattr(scanner, "_is_ident_char", counting)
    sql = "SELECT a" + "$a" * count
    assert mask_sql(sql) == sql
    assert steps <= 4 * len(sql)
