"""One answer on every path (design.md contract 9), against PostgreSQL 15 and 18.

Each finding of the audit of every path is a test here. A *path* is one way a user runs a statement:
the multiplexed query, a prepared handle, a pinned query with and without
parameters, a transaction, an explicit pipeline, a stream. Every path runs the same
statement twice (its first and a later execution) and must return the same values.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import gevent
import pytest
from support.factory import closed_after
from support.mux import unique_name, wait_until

from pgmux import Interval
from pgmux.client import Client
from pgmux.errors import InterfaceError, OperationalError, UnsafeMultiplexError
from pgmux.types import oids

Run = Callable[[str, list[Any]], Any]  # (sql, params) -> the first row


@pytest.fixture(scope="module", params=["pg", "pg18"])
def server(request):
    return request.getfixturevalue(request.param)


def role_with(server, **settings: str) -> dict[str, str]:
    """A new login role whose session defaults are ``settings``; its connection keywords."""
    role = unique_name("path_role")
    server.admin(f"CREATE ROLE {role} LOGIN PASSWORD 'path-pw'")
    for name, value in settings.items():
        server.admin(f"ALTER ROLE {role} SET {name} = '{value}'")
    return {"user": role, "password": "path-pw"}


@pytest.fixture
def open_client(server) -> Iterator[Callable[..., Client]]:
    yield from closed_after(lambda **options: Client(
        server.dsn, **{"pipeline_size": 1, "pinned_size": 1, "acquire_timeout": 10, **options}))


def paths(db: Client) -> dict[str, Run]:
    """Every way to run one statement and get its first row."""

    def multiplexed(sql: str, params: list[Any]) -> Any:
        return db.fetchone(sql, params)

    def prepared(sql: str, params: list[Any]) -> Any:
        return db.prepare(unique_name("path"), sql).fetchone(params)

    def pinned(sql: str, params: list[Any]) -> Any:
        with db.session() as s:
            return s.fetchone(sql, params)

    def transaction(sql: str, params: list[Any]) -> Any:
        with db.transaction() as tx:
            return tx.fetchone(sql, params)

    def pipeline(sql: str, params: list[Any]) -> Any:
        with db.session() as s, s.pipeline() as p:
            op = p.query(sql, params)
            p.sync()
            return op.result()[0]

    def stream(sql: str, params: list[Any]) -> Any:
        with db.session() as s:
            return next(iter(s.stream(sql, params)))

    return {"multiplexed": multiplexed, "prepared": prepared, "pinned": pinned,
            "transaction": transaction, "pipeline": pipeline, "stream": stream}


def every_path(db: Client, sql: str, params: list[Any], *, runs: int = 2) -> dict[str, list]:
    """path -> [first row of each execution]."""
    return {name: [run(sql, params) for _ in range(runs)] for name, run in paths(db).items()}


def assert_everywhere(seen: dict[str, list], expected: Any) -> None:
    wrong = {path: rows for path, rows in seen.items() if any(row != expected for row in rows)}
    assert not wrong, f"expected {expected!r}: {wrong}"


# -- 1. a parameter's bytes match the type the server holds for it ------------------------------


def test_prepared_statements_take_floats_for_their_integer_and_numeric_parameters(open_client):
    db = open_client()
    table = unique_name("path_ints")
    with db.session() as s:
        s.execute(f"CREATE TABLE {table} (id bigint, amount numeric)")
    try:
        insert = db.prepare(unique_name("ins"), f"INSERT INTO {table} VALUES ($1, $2)")
        assert insert.execute([3.0, 2.5]) == 1
        by_id = db.prepare(unique_name("by"), f"SELECT id, amount FROM {table} WHERE id = $1")
        assert by_id.fetchone([3.0]) == (3, Decimal("2.5"))
        assert by_id.fetchone([3]) == (3, Decimal("2.5"))
        assert db.prepare(unique_name("i8"), "SELECT $1::int8").fetchval([1.0]) == 1
        typed = db.prepare(unique_name("typed"), "SELECT $1", types=["int8"])
        assert typed.fetchval([7.0]) == 7
        numeric = db.prepare(unique_name("num"), "SELECT $1::numeric")
        assert numeric.fetchval([0.1]) == Decimal("0.1")
        assert numeric.fetchval([5]) == Decimal(5)
    finally:
        with db.session() as s:
            s.execute(f"DROP TABLE {table}")


def test_a_value_the_prepared_type_cannot_hold_is_refused_before_sending(open_client):
    db = open_client()
    by_id = db.prepare(unique_name("by"), "SELECT $1::int8")
    units = db.stats()["pipeline"]["drivers"][0]["units"]
    for value in (7.5, float("nan"), Decimal("1.25"), True):
        with pytest.raises(InterfaceError, match=r"\$1: the statement takes int8"):
            by_id.fetchval([value])
    assert db.stats()["pipeline"]["drivers"][0]["units"] == units, "nothing may be sent"
    with pytest.raises(InterfaceError, match="takes 1 parameters, 2 given"):
        by_id.fetchval([1, 2])
    assert by_id.fetchval([Decimal("12")]) == 12


# -- 2. client_encoding: followed or refused, never mojibake ------------------------------------


def test_a_session_that_changes_client_encoding_is_closed_before_a_byte_is_misread(open_client):
    db = open_client(pipeline_size=0)
    table = unique_name("path_enc")
    with db.session() as s:
        s.execute(f"CREATE TABLE {table} (t text)")
    try:
        with db.session() as s:
            with pytest.raises(InterfaceError, match="client_encoding changed to 'LATIN1'"):
                s.execute("SET client_encoding TO 'LATIN1'")
            with pytest.raises(OperationalError, match="unusable"):
                s.execute(f"INSERT INTO {table} VALUES ($1)", ["café"])
        with db.session() as s:  # a fresh connection: nothing was stored wrong
            assert s.fetchval("SHOW client_encoding") == "UTF8"
            s.execute(f"INSERT INTO {table} VALUES ($1)", ["café"])
            assert s.fetchval(f"SELECT t FROM {table}") == "café"
            assert s.fetchval(f"SELECT count(*) FROM {table}") == 1
    finally:
        with db.session() as s:
            s.execute(f"DROP TABLE {table}")


def test_a_shared_connection_whose_client_encoding_changes_is_replaced(open_client):
    db = open_client(guard="off")
    with pytest.raises(InterfaceError, match="client_encoding"):
        db.fetchval("SELECT set_config('client_encoding', 'LATIN1', false)")
    wait_until(lambda: db.stats()["pipeline"]["live"] == 1, what="the connection replaced")
    assert db.fetchval("SELECT $1::text", ["café"]) == "café"
    assert db.fetchval("SHOW client_encoding") == "UTF8"
    assert db.stats()["reconnects"] == 1


# -- 3. the guard reads SQL as the server does --------------------------------------------------


def test_the_guard_follows_standard_conforming_strings_off(server, open_client):
    db = open_client(**role_with(server, standard_conforming_strings="off",
                                 escape_string_warning="off"))
    assert db.fetchval("SELECT current_setting('standard_conforming_strings')") == "off"
    assert db.fetchval("SELECT 'O\\'Brien'") == "O'Brien"
    bypass = "SELECT '\\' ', set_config('search_path', 'x', false), '\\' '"
    with pytest.raises(UnsafeMultiplexError, match="set_config"):
        db.query(bypass)
    assert db.fetchval("SELECT current_setting('search_path')") != "x"
    with db.session() as s:  # a session reads it the same way: one statement, not a script
        assert s.fetchval("SELECT 'a;\\'; b'") == "a;'; b"


# -- 4. float8 exact whatever extra_float_digits ------------------------------------------------


@pytest.mark.parametrize("digits", ["0", "-15"])
def test_float8_is_exact_on_every_path_and_every_execution(server, open_client, digits):
    db = open_client(**role_with(server, extra_float_digits=digits))
    assert db.fetchval("SELECT current_setting('extra_float_digits')") == digits
    assert_everywhere(every_path(db, "SELECT pi()", []), (math.pi,))
    assert_everywhere(every_path(db, "SELECT $1::float8 / 3", [1.0]), (1.0 / 3,))
    assert_everywhere(every_path(db, "SELECT 0.1::float4", []), (0.1,))


def test_float8_through_copy_is_exact(open_client):
    db = open_client(pipeline_size=0)
    with db.session() as s:
        s.execute("CREATE TEMP TABLE f (x float8)")
        s.copy_in("COPY f FROM STDIN", [(math.pi,), (1.0 / 3,)])
        assert [row[0] for row in s.query("SELECT x FROM f ORDER BY x")] == [1.0 / 3, math.pi]


# -- 5. registered codecs apply everywhere, at once ---------------------------------------------


def test_a_registered_binary_decoder_applies_on_every_path_from_the_moment_it_is_registered(
        open_client):
    db = open_client()
    sql = "SELECT 41 + $1::int4"
    assert_everywhere(every_path(db, sql, [1]), (42,))  # cached shapes exist on every path
    db.types.register(oids.INT4, binary_decoder=lambda data: ("int4", int.from_bytes(
        data, "big", signed=True)), text_decoder=lambda data: ("int4 text", int(data)))
    assert_everywhere(every_path(db, sql, [1]), (("int4", 42),))
    assert_everywhere(every_path(db, "SELECT 7::int4", []), (("int4", 7),))


# -- 6. DateStyle, IntervalStyle, TimeZone, bytea_output ---------------------------------------


def test_output_settings_do_not_change_values(server, open_client):
    """Role defaults (pgmux's startup packet sets DateStyle, which wins over a role's)."""
    db = open_client(**role_with(server, IntervalStyle="sql_standard",
                                 TimeZone="Asia/Kathmandu", bytea_output="escape"))
    assert db.fetchval("SELECT current_setting('TimeZone')") == "Asia/Kathmandu"
    sql = ("SELECT '2024-02-01'::date, '2024-02-01 10:00:00'::timestamp, "
           "'2024-02-01 10:00:00+00'::timestamptz, '1 year 2 days 03:04:05'::interval, "
           "'\\x00ff'::bytea, '12:30:00'::time")
    utc = dt.timezone.utc
    expected = (dt.date(2024, 2, 1), dt.datetime(2024, 2, 1, 10),
                dt.datetime(2024, 2, 1, 10, tzinfo=utc), Interval(12, 2, 11_045_000_000),
                b"\x00\xff", dt.time(12, 30))
    assert_everywhere(every_path(db, sql, []), expected)


def test_set_datestyle_in_a_session_keeps_dates_dates(open_client):
    db = open_client(pipeline_size=0)
    with db.session() as s:
        s.execute("SET DateStyle = 'SQL, DMY'")
        s.execute("SET IntervalStyle = 'iso_8601'")
        assert s.fetchval("SELECT '1 day 2 hours'::interval") == dt.timedelta(days=1, hours=2)
        with s.pipeline() as p:
            op = p.query("SELECT '2024-02-01'::date")
        assert op.result()[0][0] == dt.date(2024, 2, 1)
        assert next(iter(s.stream("SELECT '2024-02-01'::date")))[0] == dt.date(2024, 2, 1)
        assert s.fetchval("SELECT '2024-02-01'::date") == dt.date(2024, 2, 1)
        assert s.fetchval("SELECT $1::date", [dt.date(2024, 2, 1)]) == dt.date(2024, 2, 1)
        s.execute("SET DateStyle = 'ISO, MDY'")
        assert s.fetchval("SELECT '2024-02-01'::date") == dt.date(2024, 2, 1)


def test_a_script_in_a_style_text_cannot_carry_fails_clearly(open_client):
    """A script of several statements must go as a simple Query, whose results are text."""
    db = open_client(pipeline_size=0)
    with db.session() as s:
        s.execute("SET DateStyle = 'SQL, DMY'")
        assert s.query("SELECT 1; SELECT '2024-02-01'::date").rows == [(dt.date(2024, 2, 1),)]
        with pytest.raises(Exception, match="DateStyle"):
            s.query("SELECT 1; SELECT '2024-02-01 10:00+01'::timestamptz")
        assert s.fetchval("SELECT 1") == 1  # the session goes on


# -- 7. misuse is a typed error -----------------------------------------------------------------


def test_unnamed_statements_follow_a_column_type_change(server, open_client):
    """Unnamed statements (pinned without parameters, pipelines, pooler="transaction")
    keep what they learned of a statement between executions. A change of the result
    type under them shows at once, with no error, whether pgmux reads the new type in
    binary or only as text."""
    table = unique_name("path_alter")
    server.admin(f"CREATE TABLE {table} (v int4)")
    server.admin(f"INSERT INTO {table} VALUES (5)")
    db, behind_pooler = open_client(), open_client(pooler="transaction")
    plain, with_param = f"SELECT v FROM {table}", f"SELECT v FROM {table} WHERE $1::int = 1"

    def unnamed_paths() -> dict[str, list]:
        seen = every_path(db, plain, [])
        del seen["prepared"], seen["transaction"]  # named statements: not what this is about
        with behind_pooler.transaction() as tx:
            seen["pooler=transaction, transaction"] = [tx.fetchone(plain) for _ in range(2)]
        seen["pooler=transaction, multiplexed"] = [
            behind_pooler.fetchone(with_param, [1]) for _ in range(2)]
        return seen

    assert_everywhere(unnamed_paths(), (5,))
    server.admin(f"ALTER TABLE {table} ALTER v TYPE text")
    assert_everywhere(unnamed_paths(), ("5",))
    # To a type pgmux reads only as text. An unnamed statement asks for its result in
    # the format it learned (binary), so its next execution gets binary it cannot read:
    # the server gives the text of those values, and the client learns the new type.
    server.admin(f"ALTER TABLE {table} ALTER v TYPE point USING point(v::int, v::int)")
    for client, sql, params in ((db, plain, []), (behind_pooler, plain, []),
                                (behind_pooler, with_param, [1])):
        with client.transaction() as tx:
            assert tx.fetchone(sql, params) == ("(5,5)",)
    assert_everywhere(unnamed_paths(), ("(5,5)",))


def test_fetchval_of_a_row_without_columns_is_an_interface_error(open_client):
    db = open_client()
    with pytest.raises(InterfaceError, match="without columns"):
        db.fetchval("SELECT")
    with pytest.raises(InterfaceError, match="without columns"):
        db.prepare(unique_name("none"), "SELECT").fetchval()
    with db.session() as s:
        with pytest.raises(InterfaceError, match="without columns"):
            s.fetchval("SELECT")
        assert s.fetchone("SELECT") == ()
    assert db.fetchone("SELECT") == ()


def test_a_call_from_a_native_thread_is_refused_at_once(open_client):
    db = open_client()
    assert db.fetchval("SELECT 1") == 1
    pool = gevent.get_hub().threadpool
    for call in (lambda: db.fetchval("SELECT 1"), lambda: db.session().__enter__(),
                 lambda: db.transaction()):
        error = pool.apply(_raised, (call,))
        assert isinstance(error, InterfaceError) and "native thread" in str(error), error
    with db.session() as s:  # nothing was left tied to the other thread
        assert s.fetchval("SELECT 2") == 2
    assert db.fetchval("SELECT 3") == 3


def _raised(call: Callable[[], Any]) -> BaseException | None:
    try:
        call()
    except BaseException as exc:  # the test asserts on it
        return exc
    return None
