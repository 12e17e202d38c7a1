"""sql.reads and sql.session_scope.residue, sans-IO: which statements are plain reads of a
transaction (and which functions they leave to pg_proc), and what each leaves for the pinned
reset."""

from __future__ import annotations

import pytest

from pgmux.sql.facts import ends_transaction
from pgmux.sql.reads import read_check
from pgmux.sql.session_scope import (
    NO_RESIDUE,
    SEQUENCE_STATE,
    SESSION_STATE,
    USER_STATEMENTS,
    residue,
)


@pytest.mark.parametrize(("sql", "functions"), [
    ("SELECT 1", set()),
    ("select a.x from t as a where a.id = $1::integer limit 21", set()),
    ("TABLE t", set()),
    ("VALUES (1), (2)", set()),
    ("WITH x AS (SELECT n FROM t) SELECT sum(n) FROM x", {"sum"}),
    ("SELECT coalesce(lower(a), upper(b)) FROM t WHERE id IN (1, 2) AND EXISTS (SELECT 1)",
     {"lower", "upper"}),
    ("SELECT CAST(x AS varchar(10)), sum(y) OVER (PARTITION BY z) FROM t", {"sum"}),
    ("SELECT count(*) FILTER (WHERE x > 0) FROM t GROUP BY ROLLUP (a)", {"count"}),
    ("SELECT 'now() UPDATE t FOR UPDATE' -- current_timestamp\n", set()),
    ('SELECT "lower"(x) FROM t', {"lower"}),
    ("SELECT myschema.f(1)", {"f"}),
])
def test_plain_reads_and_the_functions_they_call(sql, functions):
    check = read_check(sql)
    assert check.needs is None and check.functions == frozenset(functions)


@pytest.mark.parametrize(("sql", "reason"), [
    ("INSERT INTO t VALUES (1)", "not a plain read"),
    ("update t set a = 1", "not a plain read"),
    ("WITH gone AS (DELETE FROM t RETURNING id) SELECT * FROM gone", "DELETE writes"),
    ("WITH m AS (MERGE INTO t USING s ON true WHEN MATCHED THEN DELETE) SELECT 1", "MERGE"),
    ("SELECT a INTO b FROM t", "SELECT INTO"),
    ("SELECT * FROM t FOR UPDATE", "locking"),
    ("SELECT * FROM t FOR NO KEY UPDATE", "locking"),
    ("SELECT * FROM t FOR SHARE", "locking"),
    ("SELECT * FROM t FOR KEY SHARE", "locking"),
    ("SELECT now()", "clock"),
    ("SELECT pg_catalog.transaction_timestamp()", "clock"),
    ("SELECT CURRENT_TIMESTAMP(3)", "clock"),
    ("SELECT current_date, localtime", "clock"),
    ("SELECT nextval('s')", "sequence"),
    ("SELECT currval('s'), lastval()", "sequence"),
    ("SELECT txid_current()", "id"),
    ('SELECT "MyFunc"(1)', "quoted"),
    ("SELECT 1; SELECT 2", "several"),
    ("SELECT 'never ends", "cannot be read"),
    ("", "empty"),
    ("SAVEPOINT a", "not a plain read"),
    ("SHOW work_mem", "not a plain read"),
    ("LOCK TABLE t", "not a plain read"),
])
def test_statements_that_need_the_transaction(sql, reason):
    check = read_check(sql)
    assert check.needs is not None and reason in check.needs


@pytest.mark.parametrize(("sql", "relations"), [
    ("SELECT 1", set()),
    ("SELECT a.x FROM t AS a WHERE a.id = $1", {("", "t")}),
    ("TABLE Public.V", {("public", "v")}),
    ('SELECT * FROM "S"."My""View" x, t JOIN u ON u.id = x.id, w WHERE z IN '
     "(SELECT 1 FROM q, r) ORDER BY a, b",
     {("S", 'My"View'), ("", "t"), ("", "u"), ("", "w"), ("", "q"), ("", "r")}),
    ("WITH c AS (SELECT * FROM v) SELECT * FROM c, LATERAL unnest(c.a) AS u(x)",
     {("", "v"), ("", "c")}),
    ('SELECT "t"."id" FROM "app_item" "t" INNER JOIN "app_tag" ON ("t"."id" = "app_tag"."i")',
     {("", "app_item"), ("", "app_tag")}),
    ("SELECT * FROM ONLY p, generate_series(1, 3) AS g(i) UNION SELECT * FROM db.s.b",
     {("", "p"), ("s", "b")}),
    ('SELECT * FROM U&"d\\0061t"', {("", "dat")}),
    ("SELECT extract(year FROM d) FROM n", {("", "d"), ("", "n")}),  # more, never fewer
    ("SELECT * FROM (v1 CROSS JOIN t2)", {("", "v1"), ("", "t2")}),
    ("SELECT * FROM a JOIN (b JOIN c ON b.i = c.i) ON a.i = b.i", {("", "a"), ("", "b"), ("", "c")}),
    ("SELECT * FROM ((v1))", {("", "v1")}),
    ("SELECT * FROM ((s.v1 AS x JOIN t2 USING (i))) AS j, w", {("s", "v1"), ("", "t2"), ("", "w")}),
    ("SELECT * FROM LATERAL (SELECT 1) AS x, (VALUES (1)) AS y(i)", set()),
    ("SELECT * FROM (SELECT a FROM q) AS s", {("", "q")}),
])
def test_the_relations_a_read_names(sql, relations):
    check = read_check(sql)
    assert check.needs is None and check.relations == frozenset(relations)


def test_a_relation_named_in_a_way_the_scanner_cannot_spell_pins():
    assert "U&" in (read_check('SELECT * FROM U&"D\\0061t"').needs or "")


@pytest.mark.parametrize(("sql", "commit"), [
    ("COMMIT", True), ("end", True), ("commit work;", True), ("COMMIT AND NO CHAIN", True),
    ("END TRANSACTION -- done\n", True), ("ROLLBACK", False), ("abort work", False),
    ("/* x */ rollback transaction", False),
    ("COMMIT AND CHAIN", None), ("ROLLBACK TO SAVEPOINT a", None), ("ROLLBACK TO a", None),
    ("COMMIT PREPARED 'x'", None), ("ROLLBACK PREPARED 'x'", None), ("SELECT 1", None),
    ("COMMIT; SELECT 1", None), ("'COMMIT", None),
])
def test_what_ends_the_open_transaction(sql, commit):
    assert ends_transaction(sql) is commit


def test_verdicts_are_cached_per_text():
    assert read_check("SELECT 41 + 1") is read_check("SELECT 41 + 1")
    assert residue("SET a = 1") == residue("SET a = 1")


@pytest.mark.parametrize(("sql", "level"), [
    ("SELECT 1", NO_RESIDUE),
    ("UPDATE t SET a = 1", NO_RESIDUE),
    ("SET LOCAL work_mem = '1MB'", NO_RESIDUE),
    ("PREPARE TRANSACTION 'x'", NO_RESIDUE),
    ("SET work_mem = '1MB'", SESSION_STATE),
    ("SELECT set_config('a.b', '1', false)", SESSION_STATE),
    ("CREATE TEMP TABLE x (a int)", SESSION_STATE),
    ("LISTEN ch", SESSION_STATE),
    ("SELECT pg_advisory_lock(1)", SESSION_STATE),
    ("DECLARE c CURSOR WITH HOLD FOR SELECT 1", SESSION_STATE),
    ("SET ROLE r", SESSION_STATE),
    ("DO $$ BEGIN NULL; END $$", SESSION_STATE),
    ("CALL p()", SESSION_STATE),
    ("PREPARE p AS SELECT 1", USER_STATEMENTS),
    ("SELECT 1; PREPARE p AS SELECT 1", USER_STATEMENTS),
    ("SELECT 'PREPARE p'", NO_RESIDUE),
    # a function not known to leave nothing may leave anything (set_config, a session lock)
    ("SELECT my_function()", SESSION_STATE),
    ("SELECT count(*) FROM t WHERE f(a) > 0", SESSION_STATE),
    ("SELECT app.lower(x)", SESSION_STATE),  # not pg_catalog's
    ('SELECT "MyFunction"()', SESSION_STATE),  # a name that cannot be spelled
    ("SELECT * FROM t x(a)", SESSION_STATE),  # an alias list without AS: counted as a call
    ("UPDATE t SET a = f(a)", SESSION_STATE),
    ("SELECT lower(a), count(*), now(), pg_catalog.upper(b) FROM t GROUP BY 1", NO_RESIDUE),
    ("SELECT * FROM generate_series(1, 3) AS g(i)", NO_RESIDUE),
    # currval()/lastval() for the next borrower, where the text shows a sequence function
    ("SELECT nextval('s')", SEQUENCE_STATE),
    ("SELECT pg_catalog.setval('s', 1), lower('A')", SEQUENCE_STATE),
    ("SELECT currval('s'); SELECT 1", SEQUENCE_STATE),
    ("SELECT nextval('s'), my_function()", SESSION_STATE),
    ("CREATE TABLE t (id int DEFAULT nextval('s'))", SEQUENCE_STATE),
    ("INSERT INTO t (a) VALUES (1)", NO_RESIDUE),  # a default's nextval(): not in the text
])
def test_what_each_statement_leaves_for_the_pinned_reset(sql, level):
    assert residue(sql) == level


@pytest.mark.parametrize("sql", [  # what ORMs send: no call, or only column and alias lists
    "INSERT INTO t (a, b) VALUES ($1, $2) RETURNING t.id",
    'INSERT INTO "app_item" ("name", "n") VALUES ($1, $2) RETURNING "app_item"."id"',
    'INSERT INTO "App" ("A") VALUES (1)',
    "INSERT INTO s.t AS x (a) VALUES (1) ON CONFLICT (a) DO UPDATE SET (a, b) = (1, 2)",
    "INSERT INTO t (a, b) SELECT p0::INTEGER, p1::VARCHAR(20) FROM (VALUES ($1, $2, 0)) "
    "AS imp_sen(p0, p1, sen_counter) ORDER BY sen_counter RETURNING t.id",
    "INSERT INTO t (a) SELECT * FROM unnest($1::int[])",
    "MERGE INTO t USING s ON t.id = s.id WHEN NOT MATCHED THEN INSERT (id) VALUES (s.id)",
    "UPDATE t SET balance=(t.balance + $1) WHERE t.id = $2",
    "SELECT CAST(a AS character varying(3)), b::numeric(10, 2), c::bit varying(3) FROM t",
    "COPY t (a, b) FROM STDIN",
    "CREATE TABLE t (a int, b varchar(10) REFERENCES u (id))",
])
def test_orm_statements_leave_nothing(sql):
    assert residue(sql) == NO_RESIDUE
