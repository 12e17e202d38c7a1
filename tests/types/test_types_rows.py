"""make_row_decoder: the compiled DataRow decoder gives what the checked loop gives."""

from __future__ import annotations

import datetime as dt
import struct
import uuid
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgmux.errors import ProtocolError
from pgmux.types import default_registry, oids
from pgmux.types.rows import (
    VIEW_THRESHOLD,
    decode_row_checked,
    make_row_decoder,
    python_row_decoder,
)

REG = default_registry


def column(data: bytes | None) -> bytes:
    return b"\xff\xff\xff\xff" if data is None else struct.pack("!i", len(data)) + data


def data_row(*columns: bytes | None) -> bytes:
    return struct.pack("!h", len(columns)) + b"".join(map(column, columns))


# One column kind per decoder path of the generated code: (decoder, column bytes).
KINDS = {
    "int2": (REG.binary_decoder(oids.INT2), struct.pack("!h", -7)),
    "int4": (REG.binary_decoder(oids.INT4), struct.pack("!i", 2**31 - 1)),
    "int8": (REG.binary_decoder(oids.INT8), struct.pack("!q", -(2**63))),
    "oid": (REG.binary_decoder(oids.OID), struct.pack("!I", 2**32 - 1)),
    "float8": (REG.binary_decoder(oids.FLOAT8), struct.pack("!d", -0.5)),
    "bool": (REG.binary_decoder(oids.BOOL), b"\x01"),
    "date": (REG.binary_decoder(oids.DATE), struct.pack("!i", 9000)),
    "date+inf": (REG.binary_decoder(oids.DATE), struct.pack("!i", 2**31 - 1)),
    "timestamp": (REG.binary_decoder(oids.TIMESTAMP), struct.pack("!q", 10**15)),
    "timestamptz": (REG.binary_decoder(oids.TIMESTAMPTZ), struct.pack("!q", -(10**12))),
    "timestamptz BC": (REG.binary_decoder(oids.TIMESTAMPTZ), struct.pack("!q", -(2**62))),
    "text": (REG.binary_decoder(oids.TEXT), "é✓".encode()),
    "numeric text": (REG.text_decoder(oids.NUMERIC), b"12345.67"),
    "uuid": (REG.binary_decoder(oids.UUID), uuid.UUID(int=5).bytes),
    "jsonb": (REG.binary_decoder(oids.JSONB), b'\x01{"a": [1]}'),
    "int4 text": (REG.text_decoder(oids.INT4), b"-42"),
    "user": (lambda data: ("user", bytes(data)), b"xyz"),
}
NAMES = sorted(KINDS)


def outcome(call):
    try:
        return "ok", call()
    except ProtocolError as exc:
        return "protocol", str(exc)
    except Exception as exc:  # a decoder's own error: its type must match
        return "error", type(exc)


@given(st.lists(st.tuples(st.sampled_from(NAMES), st.booleans()), max_size=12))
def test_same_tuples_as_the_checked_loop_checked(columns):
    decoders = [KINDS[name][0] for name, _ in columns]
    payload = data_row(*[None if null else KINDS[name][1] for name, null in columns])
    expected = decode_row_checked(payload, decoders)
    assert make_row_decoder(decoders)(payload) == expected
    assert make_row_decoder(decoders)(bytearray(payload)) == expected  # the large-message path


@pytest.mark.parametrize("name", NAMES)
def test_each_kind_first_middle_last_and_null(name):
    decoder, data = KINDS[name]
    decoders = [decoder, KINDS["int4"][0], decoder, KINDS["text"][0], decoder]
    for columns in [(data, b"\x00\x00\x00\x01", data, b"t", data),
                    (None, b"\x00\x00\x00\x01", None, None, None),
                    (data, None, data, b"", None)]:  # a NULL last column: a short fused read
        payload = data_row(*columns)
        assert make_row_decoder(decoders)(payload) == decode_row_checked(payload, decoders)


def test_values_of_a_realistic_row():
    names = ["int4", "text", "timestamptz", "numeric text", "float8", "bool", "uuid", "jsonb"]
    decode = make_row_decoder([KINDS[name][0] for name in names])
    assert decode(data_row(*[KINDS[name][1] for name in names])) == (
        2**31 - 1, "é✓", dt.datetime(1999, 12, 20, 10, 13, 20, tzinfo=dt.timezone.utc),
        Decimal("12345.67"), -0.5, True, uuid.UUID(int=5), {"a": [1]})


def test_zero_columns():
    assert make_row_decoder([])(b"\x00\x00") == ()
    with pytest.raises(ProtocolError, match="DataRow has 1 columns, RowDescription announced 0"):
        make_row_decoder([])(data_row(b"x"))


MALFORMED = [
    (data_row(b"1", b"2"), "DataRow has 2 columns, RowDescription announced 3"),
    (data_row(b"1", b"2", b"3", b"4"), "DataRow has 4 columns, RowDescription announced 3"),
    (data_row(b"\x00\x00\x00\x01", b"t", b"x") + b"!", "DataRow length does not match"),
    (b"\x00\x03" + column(struct.pack("!i", 1)) + b"\xff\xff\xff\xfb", "column with length -5"),
    (b"\x00\x03" + column(struct.pack("!i", 1)) + column(b"abc") + b"\x00\x00", "truncated"),
    (b"\x00\x03" + column(struct.pack("!i", 1)) + column(b"abc") + b"\x00\x00\x00\x09ab",
     "runs past the end"),
    (b"\x00\x03" + column(struct.pack("!i", 1)) + column(b"ab"), "truncated"),
    (b"\x00\x03" + b"\x00\x00\x00\x04\x00", "runs past the end"),  # a truncated fused int4
    (b"\x00", "truncated"),
    (b"", "truncated"),
]


@pytest.mark.parametrize(("payload", "message"), MALFORMED)
def test_malformed_rows_raise_protocol_error(payload, message):
    decoders = [KINDS["int4"][0], KINDS["text"][0], KINDS["user"][0]]
    for shape in (payload, bytearray(payload)):
        with pytest.raises(ProtocolError, match=message):
            make_row_decoder(decoders)(shape)
        with pytest.raises(ProtocolError, match=message):
            decode_row_checked(shape, decoders)


@pytest.mark.parametrize(("name", "data"), [
    ("int4", b"\x00\x00\x01"), ("int8", b"\x00" * 4), ("bool", b"\x02"), ("float8", b"\x00"),
    ("timestamptz", b"\x00" * 9), ("uuid", b"\x00" * 3), ("jsonb", b"\x02{}"),
    ("numeric text", b"12x"),
])  # fmt: skip
def test_a_decoder_error_propagates_as_in_decode_row_checked(name, data):
    decoders = [KINDS["text"][0], KINDS[name][0], KINDS["int4"][0]]
    payload = data_row(b"a", data, struct.pack("!i", 1))
    assert outcome(lambda: make_row_decoder(decoders)(payload)) == \
        outcome(lambda: decode_row_checked(payload, decoders))
    assert outcome(lambda: make_row_decoder(decoders)(payload))[0] == "error"


def test_a_column_past_the_end_is_malformed_before_any_decoder_sees_it():
    def refuses_short(data):
        raise ValueError(f"short: {bytes(data)!r}")

    payload = b"\x00\x01" + struct.pack("!i", 2**31 - 1) + b"ab"
    for decode in (make_row_decoder([refuses_short]), python_row_decoder([refuses_short])):
        with pytest.raises(ProtocolError, match="runs past the end"):
            decode(payload)


def test_a_bool_byte_other_than_0_or_1_is_decode_bools_own_error():
    payload = data_row(b"\x02")
    for decode in (make_row_decoder([KINDS["bool"][0]]), python_row_decoder([KINDS["bool"][0]])):
        with pytest.raises(KeyError) as raised:
            decode(payload)
        assert raised.value.args == (b"\x02",)
    array = struct.pack("!iiiii", 1, 0, oids.BOOL, 2, 1) + column(b"\x01") + column(b"\x02")
    with pytest.raises(KeyError) as raised:
        REG.binary_decoder(oids.BOOL_ARRAY)(array)
    assert raised.value.args == (b"\x02",)


def test_large_message_columns_over_64k_are_memoryviews():
    seen = []

    def spy(data):
        seen.append(type(data))
        return len(data)

    big, small = b"x" * (VIEW_THRESHOLD + 1), b"y" * VIEW_THRESHOLD
    payload = bytearray(data_row(big, small, None))
    assert make_row_decoder([spy, spy, spy])(payload) == (len(big), len(small), None)
    assert seen == [memoryview, bytes]
    seen.clear()
    assert make_row_decoder([spy, spy, spy])(bytes(payload)) == (len(big), len(small), None)
    assert seen == [bytes, bytes]  # a bytes payload: slices, as the checked loop gives


def test_unhashable_decoders_and_a_copied_list():
    class Unhashable:
        __hash__ = None

        def __call__(self, data):
            return bytes(data).upper()

    decoders = [Unhashable(), KINDS["int4"][0]]
    decode = make_row_decoder(decoders)
    decoders[0] = KINDS["text"][0]  # later changes to the list are not seen
    assert decode(data_row(b"ab", struct.pack("!i", 3))) == (b"AB", 3)


def test_same_shape_different_decoders():
    first = make_row_decoder([lambda data: "first", KINDS["int4"][0]])
    second = make_row_decoder([lambda data: "second", KINDS["int4"][0]])
    payload = data_row(b"x", struct.pack("!i", 1))
    assert (first(payload), second(payload)) == (("first", 1), ("second", 1))
