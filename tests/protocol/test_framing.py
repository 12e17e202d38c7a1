"""Tests of FrameBuffer: any split of a recorded backend stream yields the same messages."""

from __future__ import annotations

import itertools
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.framing import reads

from pgmux.errors import ProtocolError
from pgmux.protocol import backend as be
from pgmux.protocol.framing import LARGE_MESSAGE, FrameBuffer


def frame(kind: str, payload: bytes) -> bytes:
    return kind.encode() + struct.pack("!i", len(payload) + 4) + payload


def data_row(*values: bytes | None) -> bytes:
    cells = b"".join(
        b"\xff\xff\xff\xff" if v is None else struct.pack("!i", len(v)) + v for v in values
    )
    return struct.pack("!h", len(values)) + cells


def _column(name: str, type_oid: int, size: int) -> bytes:
    return name.encode() + b"\x00" + struct.pack("!IhIhih", 16384, 1, type_oid, size, -1, 0)


BIG_VALUE = bytes(range(256)) * 800  # 200 KiB, well over LARGE_MESSAGE

RECORDED: list[tuple[str, bytes]] = [
    ("R", b"\x00\x00\x00\x00"),
    ("S", b"client_encoding\x00UTF8\x00"),
    ("S", b"server_version\x0017.2\x00"),
    ("S", b"TimeZone\x00UTC\x00"),
    ("K", b"\x00\x00\x30\x39\xde\xad\xbe\xef"),
    ("Z", b"I"),
    ("1", b""),
    ("2", b""),
    ("T", b"\x00\x02" + _column("id", 23, 4) + _column("name", 25, -1)),
    *[("D", data_row(str(i).encode(), None if i % 7 == 0 else b"row %d" % i)) for i in range(50)],
    ("C", b"SELECT 50\x00"),
    ("Z", b"I"),
    ("E", b"SERROR\x00VERROR\x00C22012\x00Mdivision by zero\x00\x00"),
    ("Z", b"I"),
    ("N", b"SWARNING\x00VWARNING\x00C01000\x00Mbe careful\x00\x00"),
    ("A", b"\x00\x00\x30\x39jobs\x00job 17 ready\x00"),
    ("H", b"\x00\x00\x02\x00\x00\x00\x00"),
    ("d", b"1\tone\n"),
    ("d", b"2\ttwo\n"),
    ("d", b"3\tthree\n"),
    ("c", b""),
    ("C", b"COPY 3\x00"),
    ("Z", b"I"),
    ("D", data_row(BIG_VALUE)),
    ("C", b"SELECT 1\x00"),
    ("Z", b"I"),
]
EXPECTED = [(ord(kind), payload) for kind, payload in RECORDED]
STREAM = b"".join(frame(kind, payload) for kind, payload in RECORDED)


def as_bytes(messages) -> list[tuple[int, bytes]]:
    return [(kind, bytes(payload)) for kind, payload in messages]


def split(data: bytes, points) -> list[bytes]:
    cuts = [0, *sorted(set(points)), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(cuts)]


def read_all(chunks) -> tuple[list[tuple[int, bytes]], FrameBuffer]:
    buffer = FrameBuffer()
    out = []
    for chunk in chunks:
        buffer.feed(chunk)
        out.extend(buffer.read_messages())
    return as_bytes(out), buffer


def read_one_by_one(chunks) -> tuple[list[tuple[int, bytes]], FrameBuffer]:
    buffer = FrameBuffer()
    out = []
    for chunk in chunks:
        buffer.feed(chunk)
        while (message := buffer.next_message()) is not None:
            out.append(message)
    return as_bytes(out), buffer


def read_with_recv_into(data: bytes, sizes) -> tuple[list[tuple[int, bytes]], int, FrameBuffer]:
    """Mimic a reader that receives straight into ``recv_target()`` when it is offered."""
    buffer = FrameBuffer()
    out = []
    into_target = 0
    for count in reads(buffer, data, list(sizes)):
        into_target += count
        out.extend(buffer.read_messages())
    return as_bytes(out), into_target, buffer


def assert_drained(buffer: FrameBuffer) -> None:
    assert buffer.buffered == 0
    assert buffer.recv_target() is None
    assert buffer.next_message() is None


# -- the recorded stream --------------------------------------------------------------------


def test_stream_is_realistic():
    assert len(EXPECTED) == 75
    assert len(BIG_VALUE) > 3 * LARGE_MESSAGE
    for kind, payload in EXPECTED:  # every payload decodes with its own decoder
        if kind == be.DATA_ROW:
            be.parse_data_row(payload)
        elif kind == be.READY_FOR_QUERY:
            assert be.parse_ready_for_query(payload) == "I"
    assert be.parse_data_row(EXPECTED[-3][1]) == [BIG_VALUE]


def test_whole_stream_at_once():
    messages, buffer = read_all([STREAM])
    assert messages == EXPECTED
    assert_drained(buffer)


def test_whole_stream_at_once_next_message():
    messages, buffer = read_one_by_one([STREAM])
    assert messages == EXPECTED
    assert_drained(buffer)


def test_one_byte_at_a_time():
    chunks = [STREAM[i : i + 1] for i in range(len(STREAM))]
    messages, buffer = read_all(chunks)
    assert messages == EXPECTED
    assert_drained(buffer)


def test_one_byte_at_a_time_next_message():
    chunks = [STREAM[i : i + 1] for i in range(len(STREAM))]
    messages, buffer = read_one_by_one(chunks)
    assert messages == EXPECTED
    assert_drained(buffer)


def test_recv_into_path_takes_the_large_message():
    messages, into_target, buffer = read_with_recv_into(STREAM, [4096])
    assert messages == EXPECTED
    # All of the big row but the part that arrived in the chunk with its header.
    assert into_target >= len(EXPECTED[-3][1]) - 4096
    assert_drained(buffer)


def test_large_message_payload_is_exact_buffer():
    head = frame("D", data_row(BIG_VALUE))
    buffer = FrameBuffer()
    buffer.feed(head[:1000])
    assert buffer.read_messages() == []
    target = buffer.recv_target()
    assert target is not None
    assert len(target) == len(head) - 1000  # exactly what is missing, no slack
    target[:] = head[1000:]
    buffer.advance(len(target))
    del target
    ((kind, payload),) = buffer.read_messages()
    assert kind == be.DATA_ROW
    assert be.parse_data_row(payload) == [BIG_VALUE]
    assert_drained(buffer)


split_points = st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=80)
property_settings = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@property_settings
@given(split_points)
def test_any_chunking_read_messages(points):
    messages, buffer = read_all(split(STREAM, points))
    assert messages == EXPECTED
    assert_drained(buffer)


@property_settings
@given(split_points)
def test_any_chunking_next_message(points):
    messages, buffer = read_one_by_one(split(STREAM, points))
    assert messages == EXPECTED
    assert_drained(buffer)


@property_settings
@given(st.lists(st.integers(min_value=1, max_value=300_000), min_size=1, max_size=20))
def test_any_chunking_recv_into(sizes):
    messages, _, buffer = read_with_recv_into(STREAM, sizes)
    assert messages == EXPECTED
    assert_drained(buffer)


@property_settings
@given(st.binary(max_size=40), st.integers(min_value=1, max_value=64))
def test_small_copy_data_any_size(payload, chunk):
    data = frame("d", payload) * 3
    messages, _ = read_all([data[i : i + chunk] for i in range(0, len(data), chunk)])
    assert messages == [(be.COPY_DATA, payload)] * 3


# -- buffered and capacity ------------------------------------------------------------------


def test_buffered_counts_pending_bytes():
    buffer = FrameBuffer()
    buffer.feed(b"Z\x00\x00")
    assert buffer.buffered == 3
    assert buffer.read_messages() == []
    buffer.feed(b"\x00\x05IZ\x00")
    assert buffer.read_messages() == [(be.READY_FOR_QUERY, b"I")]
    assert buffer.buffered == 2


@pytest.mark.parametrize(
    "read",
    [
        lambda: read_all([STREAM])[1],
        lambda: read_one_by_one([STREAM])[1],
        lambda: read_all([STREAM[i : i + 1000] for i in range(0, len(STREAM), 1000)])[1],
        lambda: read_with_recv_into(STREAM, [4096])[2],
    ],
    ids=["whole", "whole-next-message", "1000-byte-chunks", "recv-into"],
)
def test_nothing_retained_after_stream_consumed(read):
    buffer = read()
    assert buffer.buffered == 0
    assert buffer.capacity == 0, "the buffer still holds the last chunk after it was all read"


def test_capacity_shrinks_after_large_message():
    big = frame("D", data_row(BIG_VALUE))
    buffer = FrameBuffer()
    buffer.feed(big[:5000])
    buffer.read_messages()
    assert buffer.capacity >= len(BIG_VALUE)
    buffer.feed(big[5000:] + frame("Z", b"I"))
    assert as_bytes(buffer.read_messages()) == [(be.DATA_ROW, big[5:]), (be.READY_FOR_QUERY, b"I")]
    assert_drained(buffer)
    assert buffer.capacity < 1024  # the large buffer was handed out, not kept


# -- malformed frames -----------------------------------------------------------------------


def _both_readers():
    return [lambda b: b.read_messages(), lambda b: b.next_message()]


@pytest.mark.parametrize("read", _both_readers(), ids=["read_messages", "next_message"])
@pytest.mark.parametrize("length", [0, 3, -1, -(2**31)])
def test_length_below_4_is_refused(read, length):
    buffer = FrameBuffer()
    buffer.feed(b"Z" + struct.pack("!i", length) + b"I")
    with pytest.raises(ProtocolError):
        read(buffer)


@pytest.mark.parametrize("read", _both_readers(), ids=["read_messages", "next_message"])
@pytest.mark.parametrize("kind", [b"Q", b"P", b"X", b"\x00", b"\xff"])
def test_unknown_type_is_refused(read, kind):
    buffer = FrameBuffer()
    buffer.feed(kind + b"\x00\x00\x00\x04")
    with pytest.raises(ProtocolError):
        read(buffer)


@pytest.mark.parametrize("read", _both_readers(), ids=["read_messages", "next_message"])
def test_bad_frame_after_good_ones_is_refused(read):
    buffer = FrameBuffer()
    buffer.feed(frame("Z", b"I") + b"?\x00\x00\x00\x04")
    with pytest.raises(ProtocolError):
        for _ in range(2):
            read(buffer)


def _peak_while_refusing(buffer: FrameBuffer, read, header: bytes) -> int:
    tracemalloc.start()
    try:
        buffer.feed(header)
        with pytest.raises(ProtocolError):
            read(buffer)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("read", _both_readers(), ids=["read_messages", "next_message"])
def test_oversized_length_refused_before_allocation(read):
    buffer = FrameBuffer(max_message_size=1 << 20)
    peak = _peak_while_refusing(buffer, read, b"D" + struct.pack("!i", 2**30) + b"\x00\x01")
    assert peak < 256 * 1024


@pytest.mark.parametrize("read", _both_readers(), ids=["read_messages", "next_message"])
def test_default_cap_refuses_beyond_postgres_limit(read):
    buffer = FrameBuffer()
    peak = _peak_while_refusing(buffer, read, b"D" + struct.pack("!i", 2**31 - 1))
    assert peak < 256 * 1024


def test_cap_boundary():
    cap = LARGE_MESSAGE * 2
    at_cap = FrameBuffer(max_message_size=cap)
    at_cap.feed(b"D" + struct.pack("!i", cap))
    assert at_cap.read_messages() == []
    target = at_cap.recv_target()
    assert target is not None and len(target) == cap - 4
    over_cap = FrameBuffer(max_message_size=cap)
    over_cap.feed(b"D" + struct.pack("!i", cap + 1))
    with pytest.raises(ProtocolError):
        over_cap.read_messages()
