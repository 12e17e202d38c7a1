"""A server that breaks the protocol (the scripted fake server): the caller whose answer is
malformed gets a ProtocolError, the connection is replaced, nothing hangs, and every other
caller gets its own result or the failure model's error for where its unit was."""

from __future__ import annotations

import struct
import tracemalloc

import gevent
import pytest
from support.fakeserver import (
    FakeServer,
    command_complete,
    data_row,
    fatal,
    message,
    raw_header,
    row_description,
    split_at_data_rows,
    split_messages,
)
from support.mux import join_all, outcome, wait_until

from pgmux.client import Client
from pgmux.errors import IndeterminateResultError, ProtocolError
from pgmux.protocol.framing import DEFAULT_MAX_MESSAGE_SIZE

BOUND = 5.0  # seconds: nothing here may take longer (a hang fails the test)
MARKER = "culprit"
CALLERS = 12
CULPRIT_SQL = "SELECT $1::text AS c1"  # a statement of its own, prepared in the warm-up


@pytest.fixture
def fake():
    with FakeServer() as server:
        yield server


@pytest.fixture
def client(fake):
    made = []

    def make(**options) -> Client:
        options.setdefault("pipeline_size", 2)
        db = Client(fake.dsn(), connect_timeout=BOUND, **options)
        made.append(db)
        return db.start()

    yield make
    for db in made:
        db.close(timeout=0.5)


def _i16(value: int) -> bytes:
    return struct.pack("!h", value)


def _i32(value: int) -> bytes:
    return struct.pack("!i", value)


def _before_rows(answer: bytes) -> bytes:
    return split_at_data_rows(answer)[0]


def _replace_message(kind: bytes, new: bytes):
    """An answer rewriter: the first message of type ``kind`` becomes ``new``."""

    def rewrite(unit, answer: bytes) -> bytes:
        parts = split_messages(answer)
        index = next(i for i, part in enumerate(parts) if part[:1] == kind)
        parts[index] = new
        return b"".join(parts)

    return rewrite


def _then_garbage(bad: bytes):
    """The well-formed head of the answer, then ``bad`` (nothing after it makes sense)."""
    return lambda unit, answer: _before_rows(answer) + bad


# name -> (how the culprit's answer is broken, what the culprit sees)
MALFORMED = {
    "length below 4": (_then_garbage(raw_header(b"D", 3) + b"\0" * 16), ProtocolError),
    "length over the cap": (
        _then_garbage(raw_header(b"D", DEFAULT_MAX_MESSAGE_SIZE + 1) + b"\0" * 16),
        ProtocolError),
    "DataRow column length -2": (
        _replace_message(b"D", message(b"D", _i16(1) + _i32(-2))), ProtocolError),
    "DataRow column count mismatch": (
        _replace_message(b"D", data_row([b"one", b"two"])), ProtocolError),
    "DataRow column longer than the message": (
        _replace_message(b"D", message(b"D", _i16(1) + _i32(50) + b"short")), ProtocolError),
    "DataRow truncated inside a length": (
        _replace_message(b"D", message(b"D", _i16(1) + b"\0\0")), ProtocolError),
    "CommandComplete tag without NUL": (
        _replace_message(b"C", message(b"C", b"SELECT 1")), ProtocolError),
    "RowDescription name without NUL": (
        _then_garbage(message(b"T", _i16(1) + b"c1")), ProtocolError),
    "unknown message type": (_then_garbage(message(b"!", b"what")), ProtocolError),
    "CopyInResponse on a pipeline": (
        _then_garbage(message(b"G", b"\0" + _i16(0))), ProtocolError),
    "ErrorResponse field without NUL": (
        _then_garbage(message(b"E", b"SERROR\0C22012\0Mno end")), ProtocolError),
}


def _launch(db: Client, fake: FakeServer, culprit_index: int):
    """Hold the server, send CALLERS queries (one carries the marker), return the jobs once
    the server holds every unit."""
    fake.hold()
    expected = fake.units_received + CALLERS
    labels = [f"v{i}" if i != culprit_index else f"v{i}-{MARKER}" for i in range(CALLERS)]
    jobs = {label: gevent.spawn(outcome, lambda label=label: db.fetchval(
        CULPRIT_SQL if MARKER in label else "SELECT $1::text", [label])) for label in labels}
    wait_until(lambda: fake.units_received >= expected, timeout=BOUND,
               what="the server to hold every unit")
    return jobs


def _expected_by_connection(fake: FakeServer):
    """(labels answered before the culprit on its connection, labels after it, others)."""
    before, after, others = [], [], []
    for conn in fake.connections:
        labels = [unit.label for unit in conn.received if unit.label.startswith("v")]
        if any(MARKER in label for label in labels):
            cut = next(i for i, label in enumerate(labels) if MARKER in label)
            before, after = labels[:cut], labels[cut + 1 :]
        else:
            others += labels
    return before, after, others


def _warm_up(db: Client, fake: FakeServer) -> None:
    """Both statements on both connections: each is described and then run there once."""
    for sql in ("SELECT $1::text", CULPRIT_SQL):
        jobs = [gevent.spawn(db.fetchval, sql, ["warm"]) for _ in range(2)]
        join_all(jobs, timeout=BOUND)
    assert [len(conn.received) for conn in fake.connections] == [4, 4]


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_answer_fails_its_caller_and_only_breaks_its_connection(fake, client, case):
    rewrite, culprit_sees = MALFORMED[case]
    db = client()
    _warm_up(db, fake)
    fake.on(MARKER, rewrite)
    jobs = _launch(db, fake, culprit_index=CALLERS // 2)
    before, after, others = _expected_by_connection(fake)
    assert others and after, "the burst should reach both connections and queue behind"
    fake.release()
    join_all(jobs.values(), timeout=BOUND)

    seen = {label: job.value for label, job in jobs.items()}
    culprit = next(label for label in seen if MARKER in label)
    kind, value = seen.pop(culprit)
    assert kind == "error" and type(value) is culprit_sees, (case, value)
    for label in before + others:  # complete answers, read before the malformed one
        assert seen[label] == ("ok", label), (case, label, seen[label])
    for label in after:  # written, never validly answered: the failure model says so
        kind, value = seen[label]
        assert kind == "error" and isinstance(value, IndeterminateResultError), (label, value)

    _assert_replaced_and_working(db, fake)


def _assert_replaced_and_working(db: Client, fake: FakeServer) -> None:
    wait_until(lambda: db.stats()["pipeline"]["live"] == 2 and fake.accepted == 3,
               timeout=BOUND, what="the broken connection replaced")
    assert db.stats()["reconnects"] == 1
    jobs = [gevent.spawn(db.fetchval, "SELECT $1::text", [f"after{i}"]) for i in range(20)]
    join_all(jobs, timeout=BOUND)
    assert [job.value for job in jobs] == [f"after{i}" for i in range(20)]
    assert all(d["load"] == 0 for d in db.stats()["pipeline"]["drivers"])


def test_ready_for_query_in_a_transaction_poisons_the_connection(fake, client):
    """The unit itself completed (its result is whole); the connection is not trusted after."""
    db = client()
    _warm_up(db, fake)
    fake.on(MARKER, _replace_message(b"Z", message(b"Z", b"T")))
    jobs = _launch(db, fake, culprit_index=CALLERS // 2)
    before, after, others = _expected_by_connection(fake)
    fake.release()
    join_all(jobs.values(), timeout=BOUND)
    seen = {label: job.value for label, job in jobs.items()}
    culprit = next(label for label in seen if MARKER in label)
    assert seen.pop(culprit) == ("ok", culprit)
    for label in before + others:
        assert seen[label] == ("ok", label)
    for label in after:
        assert isinstance(seen[label][1], IndeterminateResultError), (label, seen[label])
    _assert_replaced_and_working(db, fake)


def test_declared_length_over_the_cap_is_refused_before_allocating(fake, client):
    db = client(pipeline_size=1)
    assert db.fetchval("SELECT $1::text", ["warm"]) == "warm"
    fake.on(MARKER, _then_garbage(raw_header(b"D", DEFAULT_MAX_MESSAGE_SIZE + 1)))
    tracemalloc.start()
    try:
        kind, value = outcome(lambda: db.fetchval("SELECT $1::text", [MARKER]))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kind == "error" and isinstance(value, ProtocolError), value
    assert peak < 16 * 1024 * 1024, f"{peak} bytes allocated for a message refused by its header"


def test_unsolicited_data_row_while_idle_replaces_the_connection(fake, client):
    db = client()
    _warm_up(db, fake)
    fake.push(data_row([b"stray"]))
    wait_until(lambda: fake.accepted == 4, timeout=BOUND, what="both connections replaced")
    wait_until(lambda: db.stats()["pipeline"]["live"] == 2, timeout=BOUND)
    assert db.fetchval("SELECT $1::text", ["fine"]) == "fine"


def test_fatal_while_idle_and_two_fatals_back_to_back(fake, client):
    db = client()
    _warm_up(db, fake)
    fake.push(fatal())
    wait_until(lambda: fake.accepted == 4 and db.stats()["pipeline"]["live"] == 2,
               timeout=BOUND, what="both connections replaced after a FATAL")
    assert db.stats()["reconnects"] == 2
    fake.push(fatal() + fatal("57P01", "second"), close=True)
    wait_until(lambda: fake.accepted == 6 and db.stats()["pipeline"]["live"] == 2,
               timeout=BOUND, what="both connections replaced after two FATALs")
    assert db.stats()["reconnects"] == 4
    jobs = [gevent.spawn(db.fetchval, "SELECT $1::text", [f"x{i}"]) for i in range(50)]
    join_all(jobs, timeout=BOUND)
    assert [job.value for job in jobs] == [f"x{i}" for i in range(50)]


def test_fatal_in_the_middle_of_an_answer(fake, client):
    """A FATAL among a unit's messages: that unit and those behind it are indeterminate."""
    db = client()
    _warm_up(db, fake)
    fake.on(MARKER, lambda unit, answer: _before_rows(answer) + fatal(), then="close")
    jobs = _launch(db, fake, culprit_index=3)
    before, after, others = _expected_by_connection(fake)
    fake.release()
    join_all(jobs.values(), timeout=BOUND)
    seen = {label: job.value for label, job in jobs.items()}
    for label in before + others:
        assert seen[label] == ("ok", label)
    for label in after + [next(label for label in seen if MARKER in label)]:
        assert isinstance(seen[label][1], IndeterminateResultError), (label, seen[label])
    _assert_replaced_and_working(db, fake)


def test_fake_server_answers_like_a_server(fake, client):
    """The harness itself: echo columns, many callers, statement reuse."""
    db = client()
    result = db.query("SELECT $1::text, $2::text", ["a", "b"])
    assert (result.columns, list(result)) == (("c1", "c2"), [("a", "b")])
    assert db.fetchval("SELECT 'no params'") == "SELECT 'no params'"
    assert row_description(["x"])[:1] == b"T" and command_complete("X")[:1] == b"C"
