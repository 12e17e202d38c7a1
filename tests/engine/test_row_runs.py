"""Engine.receive with the compiled framing's row runs: the same results, the same errors
and the same failures as the Python framing's DataRows one by one, for any stream of
replies (malformed rows, decoder errors, abandoned exchanges, rows nobody asked for)."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fakeserver import command_complete, message, ready
from support.twins import compiled_only, outcome

from pgmux.engine import Engine
from pgmux.protocol import framing
from pgmux.types import TypeRegistry, oids

pytestmark = compiled_only

PARAMETERS = {"client_encoding": "UTF8", "DateStyle": "ISO, MDY", "IntervalStyle": "postgres",
              "standard_conforming_strings": "on", "integer_datetimes": "on"}
TYPES = [oids.INT4, oids.TEXT, oids.NUMERIC, oids.BOOL, oids.FLOAT8, oids.JSONB, oids.DATE,
         123456]  # the last one unknown: decoded as str
CELLS = {oids.INT4: [b"1", b"-20", b"x", b""], oids.TEXT: [b"abc", "é".encode(), b"\xff"],
         oids.NUMERIC: [b"1.50", b"NaN", b"?"], oids.BOOL: [b"t", b"f", b"y"],
         oids.FLOAT8: [b"0.5", b"-Infinity", b"1e999", b"z"],
         oids.JSONB: [b'{"a": 1}', b"[1, 2]", b"{"], oids.DATE: [b"2024-02-29", b"infinity"],
         123456: [b"anything"]}


def row_description(types: list[int]) -> bytes:
    body = [struct.pack("!h", len(types))]
    for index, oid in enumerate(types):
        body.append(f"c{index}".encode() + b"\0" + struct.pack("!ihihih", 0, 0, oid, -1, -1, 0))
    return message(b"T", b"".join(body))


def data_row(cells: list[bytes | None], count: int | None = None) -> bytes:
    body = struct.pack("!h", len(cells) if count is None else count) + b"".join(
        b"\xff\xff\xff\xff" if c is None else struct.pack("!i", len(c)) + c for c in cells)
    return message(b"D", body)


@st.composite
def result(draw):
    """A simple query's reply: its RowDescription, rows (some odd), CommandComplete, Ready."""
    types = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=4))
    rows = []
    for _ in range(draw(st.integers(0, 12))):
        cells = [draw(st.none() | st.sampled_from(CELLS[oid])) for oid in types]
        damage = draw(st.sampled_from([None] * 10 + ["count", "cut"]))
        if damage == "count":
            rows.append(data_row(cells, len(cells) + 1))
        elif damage == "cut":
            rows.append(data_row(cells)[:-1] if cells != [None] * len(cells) else data_row(cells))
        else:
            rows.append(data_row(cells))
    head = row_description(types) if draw(st.booleans()) or not rows else b""
    return head + b"".join(rows) + command_complete(f"SELECT {len(rows)}") + ready()


REGISTRY = TypeRegistry()


def run(stream: bytes, sizes: list[int], abandoned: list[bool], frames) -> tuple:
    engine = Engine(dict(PARAMETERS), REGISTRY, shared=True)
    exchanges = [engine.script("SELECT 1") for _ in abandoned]
    for exchange, gone in zip(exchanges, abandoned, strict=True):
        exchange.wanted = not gone
        engine.fifo.append(exchange)
    failure = None
    pos = 0
    for size in sizes * len(stream):
        if pos >= len(stream):
            break
        frames.feed(stream[pos:pos + size])
        pos += size
        failure = outcome(lambda: engine.receive(frames.read_messages()))
        if failure[0] == "error":
            break
    results = [outcome(exchange.result) if exchange.wanted and exchange.done else None
               for exchange in exchanges]
    # Messages are counted as they are routed: after a failure, a run not reached is not.
    counted = engine.messages if failure is None or failure[0] == "ok" else None
    kept = [len((x.last or x.reply).rows) for x in exchanges]
    return failure, results, kept, counted


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(result(), min_size=1, max_size=4), st.lists(st.integers(1, 400), min_size=1,
                                                             max_size=5), st.data())
def test_runs_decode_as_the_rows_one_by_one(results, sizes, data):
    abandoned = data.draw(st.lists(st.booleans(), min_size=len(results), max_size=len(results)))
    stream = b"".join(results)
    if data.draw(st.booleans()):
        stream += data_row([b"1"])  # a row after the last ReadyForQuery: nobody asked
    python = run(stream, sizes, abandoned, framing.PythonFrameBuffer())
    compiled = run(stream, sizes, abandoned, framing.CompiledFrameBuffer(row_runs=True))
    assert compiled == python


def test_a_run_of_rows_reaches_the_engine_as_one_item():
    stream = row_description([oids.INT4]) + b"".join(data_row([b"%d" % i]) for i in range(50))
    frames = framing.CompiledFrameBuffer(row_runs=True)
    frames.feed(stream + command_complete("SELECT 50") + ready())
    messages = frames.read_messages()
    assert [kind for kind, _ in messages] == [ord("T"), framing.ROW_RUN, ord("C"), ord("Z")]
    engine = Engine(dict(PARAMETERS), TypeRegistry(), shared=True)
    exchange = engine.script("SELECT 1")
    engine.fifo.append(exchange)
    engine.receive(messages)
    assert list(exchange.result()) == [(i,) for i in range(50)]
    assert engine.messages == 53  # every DataRow counted
