"""The compiled bind_statement and parse_command_complete against the Python reference:
the same Bind bytes (and the tail after them) for the common case, and for anything unusual (other types, odd format
codes, too many parameters, oversized values) the reference's own answer or error; the
same tag, or the same error, from any CommandComplete payload."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.twins import compiled_only, outcome

from pgmux.protocol import backend, frontend

pytestmark = compiled_only

prefixes = st.one_of(st.builds(lambda name: b"\x00" + name + b"\x00", st.binary(max_size=12)),
                     st.binary(max_size=5), st.just("\x00s\x00"))
codes = st.one_of(st.sampled_from([0, 1]), st.sampled_from([2, -1, 70000, True, 1.0, None]))
formats = st.one_of(st.lists(st.sampled_from([0, 1]), max_size=6).map(tuple),
                    st.lists(codes, max_size=4).map(tuple), st.just([0, 1]))
values = st.one_of(st.binary(max_size=30), st.none(),
                   st.sampled_from([bytearray(b"ab"), memoryview(b"cd"), "text", 5]))
params = st.one_of(st.lists(st.one_of(st.binary(max_size=30), st.none()), max_size=8),
                   st.lists(values, max_size=4), st.lists(values, max_size=3).map(tuple),
                   st.just(iter([b"x"])))
result_codes = st.one_of(st.sampled_from([b"\x00\x00", b"\x00\x01\x00\x01"]),
                         st.binary(max_size=6), st.just(bytearray(b"\x00\x00")))
tails = st.one_of(st.just(()), st.sampled_from([(frontend.EXECUTE_SYNC,), (b"",), (None,),
                                                (bytearray(b"S"),)]),
                  st.binary(max_size=9).map(lambda tail: (tail,)))


@settings(max_examples=500, deadline=None)
@given(prefixes, formats, params, result_codes, tails)
def test_same_bytes_or_same_error(prefix, param_formats, values_, codes_, tail):
    materialised = list(values_) if not isinstance(values_, (list, tuple)) else values_
    python = outcome(lambda: frontend.python_bind_statement(prefix, param_formats,
                                                            materialised, codes_, *tail))
    compiled = outcome(lambda: frontend.bind_statement(prefix, param_formats, materialised,
                                                       codes_, *tail))
    assert compiled == python


def test_too_many_parameters_is_the_references_error():
    prefix, codes = b"\x00s\x00", b"\x00\x00"
    for call in (frontend.python_bind_statement, frontend.bind_statement):
        too_many = outcome(lambda call=call: call(prefix, (), [None] * 65536, codes))
        assert too_many == ("error", frontend.InterfaceError,
                            "65536 parameters; the protocol allows at most 65535")
    assert frontend.bind_statement is not frontend.python_bind_statement


def test_the_size_cap_is_read_at_each_call_as_the_reference_reads_it(monkeypatch):
    monkeypatch.setattr(frontend, "MAX_MESSAGE_SIZE", 64)
    args = (b"\x00s\x00", (0,), [b"x" * 50], b"\x00\x00")  # 3 + 4 + 6 + 54 + 2 bytes
    assert outcome(lambda: frontend.bind_statement(*args)) == \
        outcome(lambda: frontend.python_bind_statement(*args)) == \
        ("error", frontend.InterfaceError,
         "message of 69 bytes exceeds PostgreSQL's limit of 64 bytes")


tags = st.one_of(st.text().map(lambda t: t.encode() + b"\x00"), st.binary(max_size=12),
                 st.sampled_from([b"", b"\x00", b"SELECT 1", b"a\x00b\x00", b"\xff\x00",
                                  b"INSERT 0 1\x00\x00", bytearray(b"OK\x00")]))


@settings(max_examples=500, deadline=None)
@given(tags)
def test_same_command_tag_or_same_error(payload):
    assert outcome(lambda: backend.parse_command_complete(payload)) == \
        outcome(lambda: backend.python_parse_command_complete(payload))
    assert backend.parse_command_complete is not backend.python_parse_command_complete
