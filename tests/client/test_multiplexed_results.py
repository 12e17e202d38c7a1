"""The multiplexed path's results: columns, command tags, row counts, NULLs, big values, notices."""

from __future__ import annotations

import gevent
import pytest
from support.mux import join_all, outcome, unique_name

from pgmux.engine.result import DecodeError
from pgmux.errors import UndefinedTable
from pgmux.types import default_registry


@pytest.fixture
def table(pg):
    name = unique_name()
    pg.admin(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
    yield name
    pg.admin(f"DROP TABLE IF EXISTS {name}")


def test_select_has_columns_command_and_rowcount(clients):
    db = clients(pipeline_size=2)
    res = db.query("SELECT $1::int AS id, $2::text AS name", [42, "x"])
    assert res.columns == ("id", "name")
    assert res[0] == (42, "x")
    assert list(res) == [(42, "x")]
    assert len(res) == 1
    assert res.command == "SELECT 1"
    assert res.rowcount == 1


def test_insert_update_delete_tags_and_rowcounts(clients, table):
    db = clients(pipeline_size=2)
    inserted = db.query(f"INSERT INTO {table} SELECT g, 'v' || g FROM generate_series(1, 3) g")
    assert inserted.command == "INSERT 0 3"
    assert inserted.rowcount == 3
    assert inserted.columns == ()
    assert list(inserted) == []
    assert db.execute(f"UPDATE {table} SET v = v || '!' WHERE id >= $1", [2]) == 2
    returned = db.query(f"INSERT INTO {table} VALUES ($1, $2) RETURNING id, v", [10, "ten"])
    assert returned.columns == ("id", "v")
    assert list(returned) == [(10, "ten")]
    assert returned.command == "INSERT 0 1"
    assert returned.rowcount == 1
    deleted = db.query(f"DELETE FROM {table} WHERE id IN (1, 10)")
    assert (deleted.command, deleted.rowcount) == ("DELETE 2", 2)
    rows = db.query(f"SELECT id, v FROM {table} ORDER BY id")
    assert list(rows) == [(2, "v2!"), (3, "v3!")]
    assert db.execute(f"DELETE FROM {table} WHERE id = $1", [99]) == 0


def test_empty_result_keeps_its_columns(clients):
    db = clients(pipeline_size=1)
    res = db.query("SELECT g AS n, 'x'::text AS s FROM generate_series(1, 0) g")
    assert res.columns == ("n", "s")
    assert len(res) == 0
    assert res.command == "SELECT 0"
    assert res.rowcount == 0


def test_nulls_come_back_as_none(clients):
    db = clients(pipeline_size=1)
    row = db.fetchone("SELECT NULL::int, NULL::text, $1::int, $2::text", [None, None])
    assert row == (None, None, None, None)
    assert db.fetchval("SELECT NULL::int") is None


def test_fetchone_and_fetchval_return_none_without_rows(clients):
    db = clients(pipeline_size=1)
    nothing = "SELECT 1 WHERE false"
    assert db.fetchone(nothing) is None
    assert db.fetchval(nothing) is None
    assert db.fetchone("SELECT 1, 2") == (1, 2)
    assert db.fetchval("SELECT 7, 8") == 7


def test_empty_query_has_no_rows_and_no_rowcount(clients):
    db = clients(pipeline_size=1, guard="off")  # the default guard rejects empty SQL
    for sql in ("", "-- nothing"):
        res = db.query(sql)
        assert (list(res), res.columns, res.command, res.rowcount) == ([], (), "", -1)
    assert db.execute("") == -1


def test_many_rows(clients):
    db = clients(pipeline_size=2)
    res = db.query("SELECT g, 'row ' || g FROM generate_series(1, $1::int) g", [10_000])
    assert len(res) == 10_000
    assert res.rowcount == 10_000
    assert res[0] == (1, "row 1")
    assert res[-1] == (10_000, "row 10000")
    assert [row[0] for row in res] == list(range(1, 10_001))


def test_five_mebibyte_text_value_round_trips(clients):
    db = clients(pipeline_size=1)
    big = "pgmux-" * (5 * 1024 * 1024 // 6 + 1)
    assert db.fetchval("SELECT length($1::text)", [big]) == len(big)
    assert db.fetchval("SELECT $1::text", [big]) == big
    assert db.fetchval("SELECT repeat('ab', $1::int)", [5 * 512 * 1024]) == "ab" * (5 * 512 * 1024)
    assert db.fetchval("SELECT 1") == 1  # the connection is fine afterwards


def test_big_result_among_concurrent_small_ones(clients):
    db = clients(pipeline_size=1)  # one connection: the big result sits between small ones
    jobs = [gevent.spawn(db.fetchval, "SELECT $1::int", [i]) for i in range(50)]
    large = gevent.spawn(db.query, "SELECT repeat('z', 3000000)")
    jobs += [gevent.spawn(db.fetchval, "SELECT $1::int", [i]) for i in range(50, 100)]
    join_all(jobs + [large])
    assert [job.value for job in jobs] == list(range(100))
    assert large.value[0][0] == "z" * 3_000_000


def test_server_error_names_the_problem_and_the_connection_stays_usable(clients):
    db = clients(pipeline_size=1)
    with pytest.raises(UndefinedTable) as caught:
        db.query("SELECT * FROM mux_no_such_table")
    assert caught.value.sqlstate == "42P01"
    assert db.fetchval("SELECT 2") == 2


def test_notices_go_to_the_handler_not_into_results(pg, clients):
    pg.admin(
        "CREATE OR REPLACE FUNCTION mux_notice(n int) RETURNS int LANGUAGE plpgsql AS $$"
        " BEGIN RAISE NOTICE 'mux notice %', n; RAISE WARNING 'mux warning %', n;"
        " RETURN n; END $$"
    )
    notices: list[dict[str, str]] = []
    db = clients(pipeline_size=2, notice_handler=notices.append)
    jobs = [gevent.spawn(db.query, "SELECT mux_notice($1) AS n", [i]) for i in range(50)]
    join_all(jobs)
    for i, job in enumerate(jobs):
        assert job.value.columns == ("n",)
        assert list(job.value) == [(i,)]
    messages = sorted(n["M"] for n in notices)
    assert messages == sorted([f"mux notice {i}" for i in range(50)]
                              + [f"mux warning {i}" for i in range(50)])
    assert {n["V"] for n in notices} == {"NOTICE", "WARNING"}


def test_a_failing_notice_handler_does_not_break_the_connection(pg, clients):
    pg.admin(
        "CREATE OR REPLACE FUNCTION mux_notice_once() RETURNS int LANGUAGE plpgsql AS $$"
        " BEGIN RAISE NOTICE 'boom'; RETURN 1; END $$"
    )

    def handler(fields):
        raise RuntimeError("handler bug")

    db = clients(pipeline_size=1, notice_handler=handler)
    assert db.fetchval("SELECT mux_notice_once()") == 1
    assert db.fetchval("SELECT 2") == 2


def test_a_value_that_fails_to_decode_fails_only_its_own_caller(clients):
    def decode_point(data):
        text = bytes(data).decode()
        if text.startswith("(13,"):
            raise ValueError("unlucky point")
        return text

    types = default_registry.copy()
    types.register(600, text_decoder=decode_point)  # point
    db = clients(pipeline_size=1, types=types)
    jobs = [gevent.spawn(outcome, lambda i=i: db.query(
        "SELECT point($1::float8, 0) FROM generate_series(1, 3)", [i])) for i in range(30)]
    join_all(jobs)
    for i, job in enumerate(jobs):
        kind, value = job.value
        if i == 13:
            assert kind == "error" and isinstance(value, DecodeError), value
            assert "unlucky point" in str(value)
        else:
            assert (kind, list(value)) == ("ok", [(f"({i},0)",)] * 3)
    assert db.fetchval("SELECT 'fine'") == "fine"
