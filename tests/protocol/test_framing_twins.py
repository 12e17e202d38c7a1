"""The compiled FrameBuffer against the Python reference: the same random and malformed
streams, cut anywhere, read any way, give the same messages, the same state and the same
errors; row runs (row_runs=True) hold exactly the DataRows they replace."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.framing import reads
from support.twins import compiled_only

from pgmux.errors import ProtocolError
from pgmux.protocol import backend as be
from pgmux.protocol import framing
from pgmux.protocol.framing import LARGE_MESSAGE, ROW_RUN

pytestmark = compiled_only

KNOWN = sorted(be.KNOWN_TYPES)
UNKNOWN = sorted(set(range(256)) - be.KNOWN_TYPES)
CAP = 3 * LARGE_MESSAGE


def frame(kind: int, payload: bytes) -> bytes:
    return bytes([kind]) + struct.pack("!i", len(payload) + 4) + payload


_CYCLE = bytes(range(251))


def payload_of(size: int, seed: int) -> bytes:
    """The bytes (seed + i) % 251 for i < size (sliced from repeats of one cycle: a large
    message costs no Python loop)."""
    start = seed % 251
    return (_CYCLE * (size // 251 + 2))[start:start + size]


good_message = st.builds(
    lambda kind, size, seed: frame(kind, payload_of(size, seed)),
    st.sampled_from(KNOWN + [be.DATA_ROW] * 8),
    st.one_of(st.integers(0, 40), st.sampled_from([LARGE_MESSAGE - 1, LARGE_MESSAGE + 1,
                                                   LARGE_MESSAGE + 700])),
    st.integers(0, 250))
bad_header = st.one_of(
    st.builds(lambda kind, length: bytes([kind]) + struct.pack("!i", length),
              st.sampled_from(KNOWN), st.sampled_from([-(2**31), -1, 0, 3, CAP + 1, 2**31 - 1])),
    st.builds(lambda kind: bytes([kind]) + struct.pack("!i", 4), st.sampled_from(UNKNOWN)),
)
streams = st.builds(
    lambda good, bad, tail: b"".join(good) + (bad or b"") + tail,
    st.lists(good_message, max_size=30), st.none() | bad_header, st.binary(max_size=6))
cuts = st.lists(st.integers(1, 70_000), min_size=1, max_size=12)
modes = st.sampled_from(["read_messages", "next_message"])
twin_settings = settings(max_examples=300, deadline=None,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def expand(messages) -> list[tuple[int, bytes]]:
    """Messages as (type, bytes), each row run replaced by the DataRows it holds."""
    out = []
    for kind, payload in messages:
        if kind == ROW_RUN:
            rows = list(payload)
            assert len(rows) == len(payload) >= 2
            assert payload.data[payload.start:payload.end] == b"".join(
                frame(be.DATA_ROW, row) for row in rows)
            out.extend((be.DATA_ROW, row) for row in rows)
        else:
            out.append((kind, bytes(payload)))
    return out


def drive(buffer, stream: bytes, sizes: list[int], mode: str) -> list:
    """Everything observable while a reader takes ``stream`` in reads of ``sizes``."""
    seen: list = []
    for _ in reads(buffer, stream, sizes):
        try:
            if mode == "read_messages":
                seen.append(expand(buffer.read_messages()))
            else:
                while (message := buffer.next_message()) is not None:
                    seen.append(expand([message]))
        except ProtocolError as exc:
            seen.append(("error", str(exc)))
            break
        seen.append((buffer.buffered, buffer.capacity, buffer.failed,
                     buffer.recv_target() is None))
    return seen


@twin_settings
@given(streams, cuts, modes, st.booleans())
def test_same_messages_state_and_errors(stream, sizes, mode, runs):
    python = drive(framing.PythonFrameBuffer(CAP), stream, sizes, mode)
    compiled = drive(framing.CompiledFrameBuffer(CAP, row_runs=runs), stream, sizes, mode)
    assert compiled == python


@twin_settings
@given(st.lists(good_message, min_size=1, max_size=30), cuts)
def test_row_runs_are_maximal_and_in_order(messages, sizes):
    buffer = framing.CompiledFrameBuffer(CAP, row_runs=True)
    for _ in reads(buffer, b"".join(messages), sizes):
        kinds = [kind for kind, _ in buffer.read_messages()]
        for before, after in itertools.pairwise(kinds):  # no two row items side by side
            assert not ({before, after} <= {be.DATA_ROW, ROW_RUN})


def test_a_run_holds_the_chunk_not_a_copy():
    rows = b"".join(frame(be.DATA_ROW, b"\x00\x01\x00\x00\x00\x01" + bytes([i])) for i in range(5))
    chunk = frame(be.BIND_COMPLETE, b"") + rows + frame(be.READY_FOR_QUERY, b"I")
    buffer = framing.CompiledFrameBuffer(row_runs=True)
    buffer.feed(chunk)
    (bind, _), (kind, run), (ready, _) = buffer.read_messages()
    assert (bind, kind, ready) == (be.BIND_COMPLETE, ROW_RUN, be.READY_FOR_QUERY)
    assert run.data is chunk and (run.start, run.end, run.count, len(run)) == (5, 5 + len(rows),
                                                                             5, 5)
    assert buffer.capacity == 0  # the buffer let go of the chunk; the run keeps it alive


def test_one_data_row_alone_is_a_plain_message():
    buffer = framing.CompiledFrameBuffer(row_runs=True)
    buffer.feed(frame(be.DATA_ROW, b"\x00\x00") + frame(be.READY_FOR_QUERY, b"I"))
    assert buffer.read_messages() == [(be.DATA_ROW, b"\x00\x00"), (be.READY_FOR_QUERY, b"I")]


@pytest.mark.parametrize("cls", ["PythonFrameBuffer", "CompiledFrameBuffer"])
def test_advance_is_bounded_by_the_receive_target(cls):
    buffer = getattr(framing, cls)()
    with pytest.raises(AssertionError):
        buffer.advance(1)
    buffer.feed(frame(be.DATA_ROW, bytes(LARGE_MESSAGE + 10))[:100])
    assert buffer.read_messages() == []
    room = len(buffer.recv_target())
    for count in (-1, room + 1):
        with pytest.raises(ValueError, match="past the end of the receive target"):
            buffer.advance(count)
    buffer.advance(room)
    ((kind, payload),) = buffer.read_messages()
    assert kind == be.DATA_ROW and len(payload) == LARGE_MESSAGE + 10


def test_the_reference_raises_for_both():
    for buffer in (framing.PythonFrameBuffer(), framing.CompiledFrameBuffer()):
        buffer.feed(b"Z\x00\x00\x00\x02")
        with pytest.raises(ProtocolError, match=r"backend message 'Z' declares length 2 < 4"):
            buffer.read_messages()
