"""Bad input from the caller: a clear typed error or a byte-exact round trip, never a broken
connection. After each case the same client keeps working and ``stats()`` shows no
reconnect."""

from __future__ import annotations

import pytest
from support.mux import Clients, driver_stats, total, unique_name

from pgmux.client import Client
from pgmux.errors import (
    DatabaseError,
    Error,
    InterfaceError,
    InvalidTextRepresentation,
    NumericValueOutOfRange,
)
from pgmux.protocol import frontend


@pytest.fixture(scope="module")
def module_clients(pg):
    with Clients(pg) as make:
        yield make


@pytest.fixture(scope="module")
def db(module_clients) -> Client:
    return module_clients(pipeline_size=2)


@pytest.fixture(autouse=True)
def still_healthy(request):
    """After every case: the shared client answers correctly and never reconnected."""
    yield
    if "db" not in request.fixturenames:
        return
    client = request.getfixturevalue("db")
    assert client.fetchval("SELECT $1::int + 1", [41]) == 42
    stats = client.stats()
    assert stats["reconnects"] == 0 and stats["pipeline"]["live"] == 2, stats
    assert total(client, "load") == 0


# -- parameter counts ------------------------------------------------------------------------

@pytest.mark.parametrize(("sql", "params"), [
    ("SELECT $1::int, $2::int", [1]),
    ("SELECT $1::int", []),
])
def test_too_few_parameters_is_the_servers_error(db, sql, params):
    with pytest.raises(DatabaseError) as caught:
        db.query(sql, params)
    assert caught.value.sqlstate == "08P01", caught.value  # bind message supplies N ...
    assert "parameter" in caught.value.message


@pytest.mark.parametrize(("sql", "params"), [
    ("SELECT $1::int", [1, 2]),
    ("SELECT 1", [1]),
    ("SELECT $1::text", ["a", "b"]),
    ("SELECT '$2', $1::int", [1, 2]),  # a $2 inside a literal is no placeholder
])
def test_surplus_parameters_are_an_error_not_silently_dropped(db, sql, params):
    """Typed surplus parameters are accepted by the server (declared, never used), so the
    caller's mistake would pass unnoticed: pgmux must count placeholders itself."""
    with pytest.raises(Error) as caught:
        db.query(sql, params)
    assert "parameter" in str(caught.value)


def test_wrong_parameter_count_then_the_right_one_on_the_same_statement(db):
    with pytest.raises(DatabaseError):
        db.query("SELECT $1::int * 2, $2::text", [3])
    assert db.fetchone("SELECT $1::int * 2, $2::text", [3, "x"]) == (6, "x")


# -- values the client cannot send ---------------------------------------------------------

class Opaque:
    pass


@pytest.mark.parametrize("value", [object(), Opaque(), {"a": 1}, {1, 2}, 1 + 2j, ...],
                         ids=["object", "class", "dict", "set", "complex", "ellipsis"])
def test_unencodable_value_is_an_interface_error_before_sending(db, value):
    units = total(db, "units")
    with pytest.raises(InterfaceError):
        db.query("SELECT $1", [value])
    assert total(db, "units") == units, "nothing may reach the server"


@pytest.mark.parametrize("value", ["a\x00b", ["ok", "a\x00b"]], ids=["text", "array element"])
def test_nul_in_text_is_an_interface_error(db, value):
    with pytest.raises(InterfaceError, match="NUL"):
        db.query("SELECT $1::text", [value])


def test_nul_in_sql_text_is_an_interface_error(db):
    with pytest.raises(InterfaceError, match="NUL"):
        db.query("SELECT 'a\x00b'")


@pytest.mark.parametrize("text", ["\udc80", "ok \ud800 surrogate"], ids=["lone low", "lone high"])
def test_text_that_is_not_valid_unicode_is_an_interface_error(db, text):
    with pytest.raises(InterfaceError):
        db.query("SELECT $1::text", [text])
    with pytest.raises(InterfaceError):
        db.query(f"SELECT '{text}'")


def test_invalid_utf8_bytes_travel_as_bytea_byte_exact(db):
    raw = b"\xff\xfe\x00\xc3(\x80"
    assert db.fetchval("SELECT $1::bytea", [raw]) == raw
    assert db.fetchval("SELECT $1", [raw]) == raw
    assert db.fetchval("SELECT $1::text", [raw]) == "\\x" + raw.hex()  # bytea's text form
    with pytest.raises(DatabaseError) as caught:  # the server refuses to call them text
        db.fetchval("SELECT convert_from($1, 'UTF8')", [raw])
    assert caught.value.sqlstate == "22021"


@pytest.mark.parametrize(("sql", "value", "error"), [
    ("SELECT $1::int", "abc", InvalidTextRepresentation),
    ("SELECT $1::int", 2**40, NumericValueOutOfRange),
    ("SELECT $1::bigint", 10**30, NumericValueOutOfRange),
    ("SELECT $1::date", "2024-02-30", DatabaseError),
])
def test_values_the_server_rejects_fail_only_that_call(db, sql, value, error):
    with pytest.raises(error):
        db.fetchval(sql, [value])


# -- limits -------------------------------------------------------------------------------

def test_65536_parameters_is_an_interface_error(db):
    sql = "SELECT " + ",".join(f"${i}::int" for i in range(1, 65537))
    with pytest.raises(InterfaceError, match="65535"):
        db.query(sql, list(range(65536)))


def test_65535_parameters_work(db):
    sql = "SELECT array_length(ARRAY[" + ",".join(
        f"${i}::int" for i in range(1, 65536)) + "], 1)"
    assert db.fetchval(sql, list(range(65535))) == 65535


@pytest.fixture(scope="module")
def single(module_clients) -> Client:
    """One connection, so "the next call" runs where the refused one would have."""
    return module_clients(pipeline_size=1)


@pytest.mark.parametrize("cached", [False, True], ids=["first call", "cached statement"])
def test_message_over_the_size_cap_is_refused_before_sending(single, monkeypatch, cached):
    db = single
    sql = f"SELECT length($1::text) AS {unique_name('cap')}"
    if cached:
        assert db.fetchval(sql, ["x"]) == 1
    monkeypatch.setattr(frontend, "MAX_MESSAGE_SIZE", 64 * 1024)
    units = total(db, "units")
    with pytest.raises(InterfaceError, match="exceeds"):
        db.fetchval(sql, ["y" * 100_000])
    assert total(db, "units") == units, "nothing may reach the server"
    monkeypatch.undo()
    # The statement is usable at once, with no stale-statement retry behind the scenes: one
    # unit, after the description a first execution needs.
    assert db.fetchval(sql, ["z" * 10]) == 10
    assert total(db, "units") == units + (1 if cached else 2)


def test_message_over_the_cap_for_a_prepared_statement(single, monkeypatch):
    db = single
    stmt = db.prepare(unique_name("cap"), "SELECT length($1::text)")
    monkeypatch.setattr(frontend, "MAX_MESSAGE_SIZE", 64 * 1024)
    units = total(db, "units")
    with pytest.raises(InterfaceError, match="exceeds"):
        stmt.fetchval(["y" * 100_000])
    monkeypatch.undo()
    assert stmt.fetchval(["z" * 10]) == 10
    assert total(db, "units") == units + 1, "a stale-statement retry was needed"
    assert db.stats()["reconnects"] == 0


def test_refused_message_does_not_leak_server_statements(module_clients, monkeypatch):
    """A statement evicted from the cache is closed on the server even when the unit that
    evicted it was refused by the encoder."""
    db = module_clients(pipeline_size=1, statement_cache_size=2)
    db.fetchval("SELECT 1 + $1::int", [1])
    db.fetchval("SELECT 2 + $1::int", [1])
    monkeypatch.setattr(frontend, "MAX_MESSAGE_SIZE", 64 * 1024)
    with pytest.raises(InterfaceError):
        db.fetchval("SELECT length($1::text)", ["y" * 100_000])  # evicts the first
    monkeypatch.undo()
    for i in range(3, 8):
        db.fetchval(f"SELECT {i} + $1::int", [1])
    count = db.fetchval("SELECT count(*) FROM pg_prepared_statements WHERE $1::int = 1", [1])
    assert count <= 2, f"{count} statements prepared on a connection caching 2"


# -- injection attempts through parameters -------------------------------------------------

HOSTILE = [
    "'; DROP TABLE {table}; --",
    "' OR '1'='1",
    "\\'; DROP TABLE {table}; --",
    "\\",
    "\\\\x00",
    "--",
    "/* */",
    "$1",
    "$$; DROP TABLE {table}; $$",
    "1; DELETE FROM {table}",
    "E'\\n'",
    "O'Reilly",
    "\u02bc\u2019 unicode quotes \uff07",
    "\x7f\x01 control",
    "%s %d {0}",
]
NUMBERS = [-1, -2147483648, 2147483647, -9223372036854775808, 0, -0.0, -1.5]


@pytest.fixture(scope="module")
def victim(pg):
    table = unique_name("mux_victim")
    pg.admin(f"CREATE TABLE {table} (name text); INSERT INTO {table} VALUES ('only')")
    return table


@pytest.mark.parametrize("template", HOSTILE)
def test_injection_attempt_in_text_round_trips_byte_exact(db, victim, template):
    text = template.replace("{table}", victim)
    assert db.fetchval("SELECT $1::text", [text]) == text
    assert db.fetchval("SELECT $1", [text]) == text
    assert db.fetchval(f"SELECT count(*) FROM {victim} WHERE name = $1", [text]) == 0
    assert db.fetchval(f"SELECT name FROM {victim} WHERE name <> $1", [text]) == "only"
    assert db.fetchval(f"SELECT count(*) FROM {victim}") == 1, "the table was touched"


@pytest.mark.parametrize("number", NUMBERS)
def test_negative_numbers_are_values_not_syntax(db, number):
    assert db.fetchval("SELECT $1", [number]) == number
    # "1 - -1", never "1--1" (a comment) as textual substitution would make it
    assert db.fetchval("SELECT 1 - $1::numeric", [number]) == 1 - number
    assert db.fetchval("SELECT -$1::numeric", [number]) == -number


def test_every_hostile_value_in_one_statement(db, victim):
    values = [t.replace("{table}", victim) for t in HOSTILE]
    sql = "SELECT " + ", ".join(f"${i + 1}::text" for i in range(len(values)))
    assert list(db.fetchone(sql, values)) == values


def test_bad_input_never_touched_a_connection(db):
    """Every case above ran on this client: not one reconnect, every driver idle."""
    assert all(d["reconnects"] == 0 and d["load"] == 0 for d in driver_stats(db))
    assert issubclass(InterfaceError, Error)
