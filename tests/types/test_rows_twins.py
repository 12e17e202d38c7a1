"""The compiled row decoder against the Python reference: random shapes of every built-in
decoder (and others), random values (well formed, unusual, garbage), random malformed rows:
the same tuple or the same error, for one row and for a run of rows."""

from __future__ import annotations

import datetime as dt
import gc
import json
import struct
import uuid
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.twins import compiled_only, exact, outcome

from pgmux.engine.rowshape import RowShape, decode_rows
from pgmux.types import binary, default_registry, oids, text
from pgmux.types.rows import compiled_row_decoder, decode_row_checked, python_row_decoder

pytestmark = compiled_only
REG = default_registry

i16, i32, i64, f64 = (struct.Struct(f"!{c}").pack for c in "hiqd")
USECS_PER_DAY = 86_400_000_000
DAY_RANGE = (-730119, 2921939)  # the days since 2000-01-01 that datetime.date can hold


def near(values: list[int], bits: int = 64) -> st.SearchStrategy[int]:
    """Integers at and around the given edges, within a signed integer of ``bits``."""
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return st.sampled_from(values).flatmap(
        lambda v: st.integers(max(v - 2, low), min(v + 2, high)))


days = st.one_of(st.integers(-(2**31), 2**31 - 1), near([*DAY_RANGE, 0, 2**31 - 1, -(2**31)], 32))
micros = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    days.map(lambda d: d * USECS_PER_DAY),
    st.builds(lambda d, c: d * USECS_PER_DAY + c, days, st.integers(0, USECS_PER_DAY - 1)),
    near([2**63 - 1, -(2**63), 0, USECS_PER_DAY])).map(lambda v: max(min(v, 2**63 - 1), -(2**63)))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6)
int_text = st.one_of(st.integers().map(lambda v: str(v).encode()),
                     st.sampled_from([b"", b"-", b"007", b" 1", b"+1", b"1_0", b"9" * 19,
                                      b"-" + b"9" * 18, b"1.0", b"\xff"]))
float_text = st.one_of(
    st.floats().map(lambda v: repr(v).encode()),
    st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-0", b"1.", b".5", b"1e",
                     b"1e+5", b"1E-5", b" 1", b"1_0", b"0x10", b"", b"-", b"9" * 70]))
numeric_text = st.one_of(st.decimals(allow_nan=False).map(lambda v: str(v).encode()),
                         st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e5", b"x", b"",
                                          b"\xc3\xa9"]))
utf8ish = st.one_of(st.text().map(str.encode), st.binary(max_size=8))


def jsonb(value) -> bytes:
    return b"\x01" + json.dumps(value).encode()


# Each decoder kind with what its column may hold: its own binary form, unusual values, and
# bytes of any length (wrong widths, garbage).
BINARY = {
    "int2": (REG.binary_decoder(oids.INT2), st.integers(-(2**15), 2**15 - 1).map(i16)),
    "int4": (REG.binary_decoder(oids.INT4), st.integers(-(2**31), 2**31 - 1).map(i32)),
    "int8": (REG.binary_decoder(oids.INT8), st.integers(-(2**63), 2**63 - 1).map(i64)),
    "oid": (REG.binary_decoder(oids.OID), st.integers(0, 2**32 - 1).map(struct.Struct("!I").pack)),
    "xid8": (REG.binary_decoder(oids.XID8), st.integers(0, 2**64 - 1).map(struct.Struct("!Q").pack)),
    "float8": (REG.binary_decoder(oids.FLOAT8), st.floats().map(f64)),
    "bool": (REG.binary_decoder(oids.BOOL), st.sampled_from([b"\x00", b"\x01", b"\x02"])),
    "uuid": (REG.binary_decoder(oids.UUID), st.uuids().map(lambda u: u.bytes)),
    "date": (REG.binary_decoder(oids.DATE), days.map(i32)),
    "time": (REG.binary_decoder(oids.TIME),
             st.one_of(st.integers(0, USECS_PER_DAY), near([0, USECS_PER_DAY])).map(i64)),
    "timestamp": (REG.binary_decoder(oids.TIMESTAMP), micros.map(i64)),
    "timestamptz": (REG.binary_decoder(oids.TIMESTAMPTZ), micros.map(i64)),
    "bytea": (REG.binary_decoder(oids.BYTEA), st.binary(max_size=20)),
    "text": (REG.binary_decoder(oids.TEXT), utf8ish),
    "jsonb": (REG.binary_decoder(oids.JSONB), st.one_of(
        json_values.map(jsonb), st.binary(max_size=10),
        st.sampled_from([b"", b"\x02{}", b"\x01", b"\x01{} x", b"\x01 {}", b'\x01"\xed\xa0\x80"',
                         b"\x01\xff", b"\x01NaN", b"\x011e999", b'\x01{"a":1,"a":2}']))),
    "float4": (REG.binary_decoder(oids.FLOAT4), st.floats(width=32).map(struct.Struct("!f").pack)),
    "interval": (REG.binary_decoder(oids.INTERVAL), st.binary(min_size=16, max_size=16)),
    "int4[]": (REG.binary_decoder(oids.INT4_ARRAY), st.binary(max_size=30)),
}
TEXT = {
    "numeric": (REG.text_decoder(oids.NUMERIC), numeric_text),
    "int text": (REG.text_decoder(oids.INT8), int_text),
    "float text": (REG.text_decoder(oids.FLOAT8), float_text),
    "bool text": (REG.text_decoder(oids.BOOL), st.sampled_from([b"t", b"f", b"x", b"", b"tt"])),
    "str text": (REG.text_decoder(oids.TEXT), utf8ish),
    "date text": (REG.text_decoder(oids.DATE), st.sampled_from([b"2024-01-02", b"infinity", b"x"])),
    "user": (lambda data: ("user", bytes(data)), st.binary(max_size=5)),
    "failing": (lambda data: 1 // len(data), st.binary(max_size=2)),
}
KINDS = {**BINARY, **TEXT}
NAMES = sorted(KINDS)


@st.composite
def columns(draw, names=NAMES, max_size=10):
    """(decoders, column bytes or None), each column's value from its kind or any bytes."""
    chosen = draw(st.lists(st.sampled_from(names), max_size=max_size))
    values = [draw(st.none() | KINDS[name][1] | st.binary(max_size=17)) for name in chosen]
    return [KINDS[name][0] for name in chosen], values


def data_row(values: list[bytes | None]) -> bytes:
    cells = b"".join(b"\xff\xff\xff\xff" if v is None else i32(len(v)) + v for v in values)
    return i16(len(values)) + cells


def damaged(draw, payload: bytes) -> bytes:
    """The payload as is, or cut, extended, or with its count or a length changed."""
    how = draw(st.sampled_from(["as is"] * 4 + ["cut", "extend", "count", "length"]))
    if how == "cut":
        return payload[:draw(st.integers(0, max(len(payload) - 1, 0)))]
    if how == "extend":
        return payload + draw(st.binary(min_size=1, max_size=4))
    if how == "count":
        return i16(draw(st.integers(-(2**15), 2**15 - 1))) + payload[2:]
    if how == "length" and len(payload) >= 6:
        at = draw(st.integers(2, len(payload) - 4))
        return payload[:at] + i32(draw(st.sampled_from([-2, -(2**31), 2**31 - 1, 0, 3]))) + \
            payload[at + 4:]
    return payload


@st.composite
def rows(draw):
    decoders, values = draw(columns())
    return decoders, damaged(draw, data_row(values))


twin_settings = settings(max_examples=400, deadline=None,
                         suppress_health_check=[HealthCheck.too_slow])


@twin_settings
@given(rows())
def test_one_row_same_tuple_or_same_error(case):
    decoders, payload = case
    expected = outcome(lambda: decode_row_checked(payload, decoders))
    assert outcome(lambda: python_row_decoder(decoders)(payload)) == expected
    assert outcome(lambda: compiled_row_decoder(decoders)(payload)) == expected


@twin_settings
@given(st.lists(rows(), min_size=1, max_size=6), st.integers(1, 3))
def test_a_run_gives_what_each_row_alone_gives(cases, shapes):
    """decode_rows over DataRows back to back against the engine's per-message path: each row
    decoded or handed to the slow path (which records a decode error or raises)."""
    decoders = cases[0][0]
    payloads = [payload for _, payload in cases] * shapes
    run = Run(payloads)
    assert rows_and_error(decoders, lambda shape, out, slow: decode_rows(run, shape, out, slow)) \
        == rows_and_error(decoders, lambda shape, out, slow: per_message(payloads, shape, out, slow))


class Run:
    """What the compiled framing hands out for DataRows back to back."""

    def __init__(self, payloads: list[bytes]):
        self.data = b"junk" + b"".join(b"D" + i32(len(p) + 4) + p for p in payloads) + b"more"
        self.start, self.end = 4, len(self.data) - 4
        self.payloads = payloads

    def __iter__(self):
        return iter(self.payloads)

    def __len__(self):
        return len(self.payloads)


def per_message(payloads, shape, out, slow):
    for payload in payloads:  # Engine.receive's DataRow branch
        try:
            out.append(shape.decode(payload))
        except Exception:
            slow(payload)


def rows_and_error(decoders, decode) -> tuple:
    from pgmux.engine.exchanges import Reply

    shape = RowShape((), decoders)
    reply = Reply(shape)
    raised = outcome(lambda: decode(shape, reply.rows, reply.add_row))
    error = reply.error and (type(reply.error), str(reply.error))
    return exact(reply.rows), error, raised


json_documents = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(-(10**19), 10**19)
    | st.floats(allow_nan=False) | st.text() | st.sampled_from(["é", "\x00", "\"", "\\", "\u2028"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner,
                                                               max_size=4),
    max_leaves=12)
json_texts = st.one_of(
    st.builds(lambda v, a, sep: json.dumps(v, ensure_ascii=a, separators=sep), json_documents,
              st.booleans(), st.sampled_from([(", ", ": "), (",", ":"), (" , ", " : ")])),
    st.sampled_from(["[" * 40 + "]" * 40, "[" * 31 + "]" * 31, '{"a": 1, "a": 2}', "01", "-",
                     "1.", ".5", "1e", "1E+2", "-0", "-0.0", "1e999", "NaN", "-Infinity",
                     "[1,]", "{,}", '{"a" 1}', "tru", "nulls", " 1", "1 ", "[1 ,2 ]",
                     '"\t"', '"a\u00e9"', "\t[]", "[\n1\r]", "12345678901234567890",
                     "123456789012345678", "-123456789012345678", "1" * 70 + ".5"]))


@st.composite
def jsonb_payloads(draw):
    data = b"\x01" + draw(json_texts).encode("utf-8", "surrogatepass")
    how = draw(st.sampled_from(["as is"] * 6 + ["cut", "insert", "replace"]))
    if how == "cut":
        return data[:draw(st.integers(1, len(data)))]
    at = draw(st.integers(1, len(data)))
    extra = draw(st.sampled_from([b"\xff", b"\xc3", b"\x00", b",", b"]", b"}", b'"', b" "]))
    return data[:at] + extra + data[at + (how == "replace"):]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jsonb_payloads())
def test_jsonb_values_are_the_json_modules(data):
    decoder = REG.binary_decoder(oids.JSONB)
    payload = data_row([data])
    assert outcome(lambda: compiled_row_decoder([decoder])(payload)) == \
        outcome(lambda: decode_row_checked(payload, [decoder]))


def test_every_built_in_decoder_of_the_list_has_its_kind():
    from pgmux.types import rows as rows_module

    kinds = compiled_row_decoder([decoder for decoder, _ in rows_module._KIND_NAMES]).kinds
    assert 0 not in kinds and len(set(kinds)) == len(kinds)
    assert compiled_row_decoder([binary.decode_float4, lambda d: d, text.decode_date]).kinds \
        == b"\x00\x00\x00"


def test_values_and_types_of_the_common_case():
    decoders = [REG.binary_decoder(o) for o in (oids.INT4, oids.TEXT, oids.TIMESTAMPTZ,
                                                 oids.FLOAT8, oids.BOOL, oids.UUID, oids.JSONB,
                                                 oids.DATE, oids.TIMESTAMP, oids.TIME)]
    decoders.append(REG.text_decoder(oids.NUMERIC))
    value = uuid.UUID("03b264c5-9540-3666-634a-c75d828439bc")
    payload = data_row([i32(-5), "é".encode(), i64(-1), f64(0.5), b"\x01", value.bytes,
                        b'\x01{"a": [1, 2.5, null]}', i32(-730119), i64(10**15 + 1),
                        i64(USECS_PER_DAY - 1), b"-12.50"])
    row = compiled_row_decoder(decoders)(payload)
    assert exact(row) == exact((
        -5, "é", dt.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc), 0.5,
        True, value, {"a": [1, 2.5, None]}, dt.date(1, 1, 1),
        dt.datetime(2031, 9, 9, 1, 46, 40, 1), dt.time(23, 59, 59, 999999), Decimal("-12.50")))
    assert row[5].is_safe is uuid.SafeUUID.unknown and row[5] == value and hash(row[5])
    with pytest.raises(TypeError):
        row[5].int = 1  # a real, immutable UUID


def test_a_run_pauses_the_collector_and_restores_it():
    decoder = compiled_row_decoder([REG.binary_decoder(oids.JSONB)])
    payload = data_row([b"\x01[[], [], []]"])
    data = (b"D" + i32(len(payload) + 4) + payload) * 2000  # 8,000 tracked objects
    collections: list[str] = []
    gc.callbacks.append(lambda phase, info: collections.append(phase))
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            out: list = []
            collections.clear()
            stop = decoder.decode_run(data, 0, len(data), out)
            during = len(collections)
            assert during == 0 and stop == len(data) and len(out) == 2000
            assert gc.isenabled() is enabled
    finally:
        gc.callbacks.pop()
        gc.enable()


@pytest.mark.parametrize(("start", "end"), [(-1, 0), (5, 4), (0, 10**6)])
def test_decode_run_refuses_offsets_outside_the_data(start, end):
    with pytest.raises(ValueError, match="outside the data"):
        compiled_row_decoder([]).decode_run(b"D\x00\x00\x00\x06\x00\x00", start, end, [])


def test_decode_run_stops_at_what_is_not_a_data_row():
    decoder = compiled_row_decoder([REG.binary_decoder(oids.INT4)])
    good = b"D" + i32(14) + data_row([i32(7)])
    for tail in (b"C" + i32(4), b"D" + i32(3), b"D" + i32(100) + b"\x00", b"D\x00"):
        out: list = []
        data = good + tail
        assert decoder.decode_run(data, 0, len(data), out) == len(good)
        assert out == [(7,)]
