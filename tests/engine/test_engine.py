"""The query engine byte by byte, with no socket: the requests it builds and how it reads
replies, for both connection kinds (every rule of contract 9 at the engine level)."""

from __future__ import annotations

import struct

import pytest
from support.fakeserver import (
    command_complete,
    data_row,
    error,
    fatal,
    message,
    notice,
    parameter_status,
    ready,
)

from pgmux.engine import (
    DescribeExchange,
    Descriptions,
    Engine,
    PoisonedConnection,
    PortalExchange,
    QueryExchange,
    ServerEnded,
    SettingRefused,
)
from pgmux.engine.exchanges import COPY_IN_MISUSE
from pgmux.engine.statements import CATALOG_PREFIX, statement_name
from pgmux.errors import DatabaseError, InterfaceError, PipelineAborted, ProtocolError
from pgmux.protocol import frontend
from pgmux.protocol.framing import FrameBuffer
from pgmux.types import TypeRegistry, oids

INT4, INT8, TEXT = oids.INT4, oids.INT8, oids.TEXT
PARAMETERS = {"client_encoding": "UTF8", "DateStyle": "ISO, MDY", "IntervalStyle": "postgres",
              "standard_conforming_strings": "on", "integer_datetimes": "on"}
PARSE_COMPLETE, BIND_COMPLETE, NO_DATA = message(b"1"), message(b"2"), message(b"n")


class RecordingEngine(Engine):
    """An engine that keeps what completed, in order (``done``). A subclass: the compiled
    Engine has a fixed set of fields."""

    done: list


def engine_for(*, shared: bool = True, descriptions: Descriptions | None = None,
               registry: TypeRegistry | None = None, **options) -> Engine:
    done: list = []
    engine = RecordingEngine(dict(PARAMETERS), registry or TypeRegistry(), shared=shared,
                             descriptions=descriptions, on_done=done.append, **options)
    engine.done = done
    return engine


def feed(engine: Engine, data: bytes) -> None:
    frames = FrameBuffer()
    frames.feed(data)
    engine.receive(frames.read_messages())


def send(engine: Engine, exchange) -> None:
    """What a connection does once it wrote ``exchange``."""
    engine.fifo.append(exchange)


def columns(*items: tuple[str, int]) -> bytes:
    """RowDescription of (name, type oid) columns, format codes 0 (a Describe-statement's)."""
    body = [struct.pack("!h", len(items))]
    for name, oid in items:
        body.append(name.encode() + b"\0" + struct.pack("!ihihih", 0, 0, oid, 4, -1, 0))
    return message(b"T", b"".join(body))


def param_types(*type_oids: int) -> bytes:
    return message(b"t", struct.pack(f"!h{len(type_oids)}I", len(type_oids), *type_oids))


def described(engine: Engine, sql: str, oids_: tuple[int, ...], result: bytes) -> None:
    """Run the first-execution description of (sql, oids_) through ``engine``."""
    exchange = engine.query(sql, oids_, (0,) * len(oids_), [b"1"] * len(oids_))
    assert type(exchange) is DescribeExchange
    send(engine, exchange)
    feed(engine, PARSE_COMPLETE + param_types(*oids_) + result + ready())
    assert exchange.done and exchange.error is None


# -- requests -----------------------------------------------------------------------------------


def test_a_new_statement_is_described_before_its_first_execution():
    engine = engine_for()
    sql = "SELECT $1::int AS n"
    first = engine.query(sql, (INT4,), (0,), [b"7"])
    name = statement_name(b"pgmux_s", sql, (INT4,))
    assert type(first) is DescribeExchange
    assert first.data == (frontend.parse(name, sql, (INT4,))
                          + frontend.describe_statement(name) + frontend.SYNC)
    send(engine, first)
    feed(engine, PARSE_COMPLETE + param_types(INT4) + columns(("n", INT4)) + ready())
    run = engine.query(sql, (INT4,), (0,), [b"7"])
    assert type(run) is QueryExchange
    assert run.data == (frontend.bind(b"", name, (0,), [b"7"], (1,))  # int4 comes in binary
                        + frontend.EXECUTE_SYNC)
    send(engine, run)
    feed(engine, BIND_COMPLETE + data_row([struct.pack("!i", 7)]) + command_complete("SELECT 1")
         + ready())
    assert list(run.result()) == [(7,)] and run.result().columns == ("n",)
    assert engine.done == [first, run]


def test_what_one_connection_learned_makes_another_ones_first_execution_a_single_request():
    descriptions = Descriptions()
    one, other = engine_for(descriptions=descriptions), engine_for(descriptions=descriptions)
    described(one, "SELECT $1::int", (INT4,), columns(("int4", INT4)))
    name = statement_name(b"pgmux_s", "SELECT $1::int", (INT4,))
    run = other.query("SELECT $1::int", (INT4,), (0,), [b"1"])
    assert type(run) is QueryExchange and run.parses
    assert run.data == (frontend.parse(name, "SELECT $1::int", (INT4,))
                        + frontend.bind(b"", name, (0,), [b"1"], (1,))
                        + frontend.DESCRIBE_UNNAMED_PORTAL + frontend.EXECUTE_SYNC)


def test_statement_names_stand_for_the_sql_and_its_parameter_types_in_every_process():
    name = statement_name(b"pgmux_s", "SELECT $1::int", (INT4,))
    assert name == statement_name(b"pgmux_s", "SELECT $1::int", (INT4,))
    assert name != statement_name(b"pgmux_s", "SELECT $1::int", (INT8,))
    assert name != statement_name(b"pgmux_s", "SELECT $1::int + 1", (INT4,))
    assert len(name) < 64  # NAMEDATALEN


def test_callers_of_a_statement_being_described_wait_for_that_one_description():
    engine = engine_for()
    first = engine.query("SELECT 1", (), (), [])
    send(engine, first)
    assert engine.query("SELECT 1", (), (), []) is first
    feed(engine, PARSE_COMPLETE + param_types() + columns(("x", INT4)) + ready())
    assert type(engine.query("SELECT 1", (), (), [])) is QueryExchange


def test_without_a_statement_cache_every_request_is_unnamed_and_still_described_once():
    engine = engine_for(statement_cache_size=0)
    first = engine.query("SELECT 1", (), (), [])
    assert first.data.startswith(frontend.parse(b"", "SELECT 1"))
    send(engine, first)
    feed(engine, PARSE_COMPLETE + param_types() + columns(("x", INT4)) + ready())
    run = engine.query("SELECT 1", (), (), [])
    assert run.data == (frontend.parse(b"", "SELECT 1") + frontend.bind(b"", b"", (), [], (1,))
                        + frontend.DESCRIBE_UNNAMED_PORTAL + frontend.EXECUTE_SYNC)


def test_parameters_too_big_for_any_bind_are_refused_before_the_description():
    engine = engine_for()
    with pytest.raises(InterfaceError, match="parameters; the protocol allows"):
        engine.query("SELECT 1", (0,) * 70000, (0,) * 70000, [b"x"] * 70000)
    assert len(engine.statements) == 0


def test_a_registered_decoder_applies_to_a_statement_already_described():
    registry = TypeRegistry()
    engine = engine_for(registry=registry)
    described(engine, "SELECT $1::int", (INT4,), columns(("n", INT4)))
    registry.register(INT4, text_decoder=lambda data: ("text", int(data)))  # drops binary
    run = engine.query("SELECT $1::int", (INT4,), (0,), [b"5"])
    assert run.data.endswith(frontend.format_codes(()) + frontend.EXECUTE_SYNC)  # text now
    send(engine, run)
    feed(engine, BIND_COMPLETE + data_row([b"5"]) + command_complete("SELECT 1") + ready())
    assert list(run.result()) == [(("text", 5),)]


# -- parameters for a statement's own types -----------------------------------------------------


def prepared(engine: Engine, param_type: int) -> None:
    exchange = engine.catalog_describe("by_id", "SELECT $1", (param_type,))
    send(engine, exchange)
    feed(engine, PARSE_COMPLETE + param_types(param_type) + columns(("x", param_type))
         + ready())


def test_a_float_for_a_bigint_parameter_goes_as_the_integer_it_equals():
    engine = engine_for()
    prepared(engine, INT8)
    run = engine.catalog_query("by_id", "SELECT $1", (INT8,), [7.0])
    name = statement_name(CATALOG_PREFIX, "SELECT $1", (INT8,))
    assert run.data == frontend.bind(b"", name, (0,), [b"7"], (1,)) + frontend.EXECUTE_SYNC
    for value in (7.5, float("inf"), True):
        with pytest.raises(InterfaceError, match=r"parameter \$1: the statement takes int8"):
            engine.catalog_query("by_id", "SELECT $1", (INT8,), [value])


def test_a_float_for_a_numeric_parameter_goes_as_its_shortest_text():
    engine = engine_for()
    prepared(engine, oids.NUMERIC)
    run = engine.catalog_query("by_id", "SELECT $1", (oids.NUMERIC,), [0.1])
    assert b"\x00\x00\x00\x030.1" in run.data  # length 3, text "0.1"
    with pytest.raises(InterfaceError, match="takes 1 parameters, 2 given"):
        engine.catalog_query("by_id", "SELECT $1", (oids.NUMERIC,), [1, 2])


# -- replies ------------------------------------------------------------------------------------


def test_asynchronous_messages_never_reach_an_exchange():
    notices, notes = [], []
    engine = engine_for(shared=False, on_notice=notices.append, on_notification=notes.append)
    exchange = engine.script("SELECT 1")
    send(engine, exchange)
    note = message(b"A", struct.pack("!i", 9) + b"chan\0hello\0")
    feed(engine, columns(("x", TEXT)) + notice("careful") + data_row([b"a"]) + note
         + parameter_status("application_name", "x") + data_row([b"b"])
         + command_complete("SELECT 2") + ready())
    assert list(exchange.result()) == [("a",), ("b",)]
    assert [n["M"] for n in notices] == ["careful"] and notes == [(9, "chan", "hello")]
    assert engine.settings.parameters["application_name"] == "x"


@pytest.mark.parametrize("shared", [True, False])
def test_a_new_client_encoding_is_refused_on_both_kinds(shared):
    engine = engine_for(shared=shared)
    send(engine, engine.script("SET client_encoding TO 'LATIN1'"))
    with pytest.raises(SettingRefused, match="client_encoding changed to 'LATIN1'"):
        feed(engine, parameter_status("client_encoding", "LATIN1"))
    assert isinstance(SettingRefused("x"), InterfaceError)


def test_datestyle_and_intervalstyle_are_followed():
    engine = engine_for(shared=False)
    before = engine.shapes.current()
    feed(engine, parameter_status("DateStyle", "SQL, DMY"))
    assert engine.settings.datestyle == "SQL, DMY" and not engine.settings.iso_styles
    assert engine.shapes.current() is not before  # shapes are rebuilt for the new style
    feed(engine, parameter_status("DateStyle", "ISO, MDY"))
    assert engine.settings.iso_styles


def test_standard_conforming_strings_is_followed_on_a_pinned_connection_only():
    pinned = engine_for(shared=False)
    feed(pinned, parameter_status("standard_conforming_strings", "off"))
    assert pinned.settings.standard_conforming_strings is False
    shared = engine_for(shared=True)
    with pytest.raises(SettingRefused, match="standard_conforming_strings"):
        feed(shared, parameter_status("standard_conforming_strings", "off"))


def test_a_fatal_error_ends_the_connection_with_its_sqlstate():
    engine = engine_for()
    send(engine, engine.sync())
    with pytest.raises(ServerEnded) as caught:
        feed(engine, fatal("57P01", "terminating"))
    assert caught.value.sqlstate == "57P01"
    idle = engine_for()
    with pytest.raises(ServerEnded):
        feed(idle, error("57P01", "bye"))  # any error while nothing is asked


def test_a_shared_connection_left_in_a_transaction_is_poisoned_after_its_reply():
    engine = engine_for(shared=True)
    exchange = engine.sync()
    send(engine, exchange)
    with pytest.raises(PoisonedConnection):
        feed(engine, ready(b"T"))
    assert exchange.done and engine.done == [exchange]


@pytest.mark.parametrize("data", [data_row([b"x"]), ready(), command_complete("SELECT 1")])
def test_a_reply_while_nothing_was_asked_is_a_protocol_error(data):
    with pytest.raises(ProtocolError):
        feed(engine_for(), data)


def test_a_value_a_codec_rejects_fails_that_reply_only():
    registry = TypeRegistry()
    registry.register(TEXT, text_decoder=lambda data: 1 / 0)
    engine = engine_for(registry=registry, shared=False)
    exchange = engine.script("SELECT 'x'")
    send(engine, exchange)
    feed(engine, columns(("x", TEXT)) + data_row([b"x"]) + command_complete("SELECT 1")
         + ready())
    with pytest.raises(Exception, match="could not decode a result value"):
        exchange.result()


# -- the statement lifecycle --------------------------------------------------------------------


def test_a_failed_parse_forgets_the_statement_and_its_followers_get_the_parse_error():
    engine = engine_for()
    first = engine.query("SELECT nope", (), (), [])
    send(engine, first)
    statement = first.statement  # a request built on it (the server answers 26000 then)
    follower = DescribeExchange(frontend.describe_statement(statement.name) + frontend.SYNC,
                                statement, False)
    send(engine, follower)
    feed(engine, error("42703", "column nope does not exist") + ready()
         + error("26000", "prepared statement does not exist") + ready())
    assert first.error.sqlstate == "42703"
    assert follower.error.sqlstate == "42703"  # not 26000: it relied on that Parse
    assert len(engine.statements) == 0


def test_a_statement_whose_result_type_changed_is_closed_and_described_again():
    engine = engine_for()
    described(engine, "SELECT * FROM t", (), columns(("v", INT4)))
    run = engine.query("SELECT * FROM t", (), (), [])
    send(engine, run)
    stale = (b"SERROR\0VERROR\0C0A000\0Mcached plan must not change result type\0"
             b"RRevalidateCachedQuery\0\0")
    feed(engine, message(b"E", stale) + ready())
    assert run.error.sqlstate == "0A000" and len(engine.statements) == 0
    assert engine.descriptions.get(("SELECT * FROM t", ())) is None
    again = engine.query("SELECT * FROM t", (), (), [])
    assert again.data.startswith(frontend.close_statement(run.statement.name))
    assert type(again) is DescribeExchange


def test_a_statement_a_pooler_connection_already_has_is_kept():
    engine = engine_for()
    first = engine.query("SELECT 1", (), (), [])
    send(engine, first)
    feed(engine, error("42P05", "prepared statement already exists") + ready())
    assert first.error.sqlstate == "42P05"
    assert engine.statements.get(("SELECT 1", ())) is first.statement  # retried without Parse
    retry = engine.query("SELECT 1", (), (), [])
    assert retry.data == frontend.describe_statement(first.statement.name) + frontend.SYNC


# -- open operations (explicit pipelines, streams) ---------------------------------------------


def test_an_error_aborts_the_open_operations_up_to_the_sync():
    engine = engine_for(shared=False)
    ops = [PortalExchange(b"") for _ in range(3)]
    sync = engine.sync()
    for exchange in [*ops, sync]:
        send(engine, exchange)
    feed(engine, BIND_COMPLETE + NO_DATA + command_complete("INSERT 0 1")
         + BIND_COMPLETE + error("22012", "division by zero") + ready())
    assert ops[0].error is None and ops[0].reply.command == "INSERT 0 1"
    assert isinstance(ops[1].error, DatabaseError) and ops[1].error.sqlstate == "22012"
    assert isinstance(ops[2].error, PipelineAborted) and "division by zero" in str(ops[2].error)
    assert sync.done and engine.done == [*ops, sync]


def test_a_portal_suspended_ends_a_batch_and_keeps_the_portal():
    engine = engine_for(shared=False)
    batch = PortalExchange(b"")
    send(engine, batch)
    feed(engine, BIND_COMPLETE + columns(("n", TEXT)) + data_row([b"1"]) + message(b"s"))
    assert batch.done and batch.suspended and batch.reply.rows == [("1",)]


# -- COPY nobody asked for ----------------------------------------------------------------------

COPY_IN = message(b"G", b"\0" + struct.pack("!h", 0))


def test_an_unasked_copy_in_alone_is_ended_with_copyfail_and_a_sync():
    engine = engine_for()
    exchange = QueryExchange(b"")
    send(engine, exchange)
    feed(engine, BIND_COMPLETE + COPY_IN)
    assert engine.take_outgoing() == frontend.copy_fail(COPY_IN_MISUSE) + frontend.SYNC
    feed(engine, error("57014", "COPY from stdin failed") + ready())
    assert isinstance(exchange.error, InterfaceError) and "copy_in" in str(exchange.error)


def test_an_unasked_copy_in_by_simple_query_needs_no_sync():
    engine = engine_for(shared=False)
    send(engine, engine.script("COPY t FROM STDIN"))
    feed(engine, COPY_IN)
    assert engine.take_outgoing() == frontend.copy_fail(COPY_IN_MISUSE)


def test_an_unasked_copy_in_with_requests_behind_it_ends_the_connection():
    engine = engine_for()
    send(engine, QueryExchange(b""))
    send(engine, QueryExchange(b""))
    with pytest.raises(ProtocolError, match="cannot be ended safely"):
        feed(engine, BIND_COMPLETE + COPY_IN)


def test_an_unasked_copy_in_among_open_operations_ends_by_itself():
    engine = engine_for(shared=False)
    for exchange in (PortalExchange(b""), PortalExchange(b""), engine.sync()):
        send(engine, exchange)
    feed(engine, BIND_COMPLETE + COPY_IN)
    assert engine.take_outgoing() == b""  # the next operation's Bind fails the COPY
