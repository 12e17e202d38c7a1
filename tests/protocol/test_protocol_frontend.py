"""Byte-exact tests of the frontend message encoders (protocol-message-formats.html)."""

from __future__ import annotations

import pytest

from pgmux.errors import InterfaceError
from pgmux.protocol import frontend as fe

# -- startup-phase messages (no type byte) -------------------------------------------------


def test_startup_protocol_3_0():
    # Int32 length, Int32 196608 (3.0), name\0value\0 pairs, a final \0.
    assert fe.PROTOCOL_3_0 == 196608
    expected = (
        b"\x00\x00\x00\x20"  # 32 bytes in all
        b"\x00\x03\x00\x00"
        b"user\x00alice\x00"
        b"database\x00db\x00"
        b"\x00"
    )
    assert fe.startup({"user": "alice", "database": "db"}) == expected


def test_startup_protocol_3_2():
    assert fe.PROTOCOL_3_2 == 196610
    expected = b"\x00\x00\x00\x10\x00\x03\x00\x02user\x00u\x00\x00"
    assert fe.startup({"user": "u"}, version=fe.PROTOCOL_3_2) == expected


def test_startup_encodes_utf8():
    expected = b"\x00\x00\x00\x12\x00\x03\x00\x00user\x00j\xc3\xb6\x00\x00"
    assert fe.startup({"user": "jö"}) == expected


def test_ssl_request():
    # Int32 8, Int32 80877103 (1234 << 16 | 5679).
    assert fe.ssl_request() == b"\x00\x00\x00\x08\x04\xd2\x16\x2f"


def test_cancel_request_with_4_byte_key():
    # Int32 16, Int32 80877102 (1234 << 16 | 5678), Int32 pid, the key.
    expected = b"\x00\x00\x00\x10\x04\xd2\x16\x2e\x00\x00\x04\xd2\x01\x02\x03\x04"
    assert fe.cancel_request(1234, b"\x01\x02\x03\x04") == expected


def test_cancel_request_with_32_byte_key():
    key = bytes(range(32))
    expected = b"\x00\x00\x00\x2c\x04\xd2\x16\x2e\x00\x01\x00\x00" + key
    assert fe.cancel_request(65536, key) == expected


def test_cancel_request_accepts_256_byte_key():
    key = b"\xab" * 256
    assert fe.cancel_request(1, key) == b"\x00\x00\x01\x0c\x04\xd2\x16\x2e\x00\x00\x00\x01" + key


@pytest.mark.parametrize("size", [0, 3, 257])
def test_cancel_request_refuses_key_size(size):
    with pytest.raises(InterfaceError):
        fe.cancel_request(1234, b"k" * size)


# -- authentication ------------------------------------------------------------------------


def test_password_cleartext():
    assert fe.password(b"secret") == b"p\x00\x00\x00\x0bsecret\x00"


def test_password_md5_digest():
    digest = b"md5" + b"0123456789abcdef" * 2
    assert fe.password(digest) == b"p\x00\x00\x00\x28" + digest + b"\x00"


def test_password_refuses_nul_without_echoing_it():
    with pytest.raises(InterfaceError) as info:
        fe.password(b"hunter2\x00tail")
    assert "hunter2" not in str(info.value)


def test_sasl_initial_response():
    # String mechanism, Int32 length of the client-first-message, the message.
    expected = b"p\x00\x00\x00\x21SCRAM-SHA-256\x00\x00\x00\x00\x0bn,,n=,r=abc"
    assert fe.sasl_initial_response("SCRAM-SHA-256", b"n,,n=,r=abc") == expected


def test_sasl_initial_response_with_empty_data():
    expected = b"p\x00\x00\x00\x16SCRAM-SHA-256\x00\x00\x00\x00\x00"
    assert fe.sasl_initial_response("SCRAM-SHA-256", b"") == expected


def test_sasl_response():
    data = b"c=biws,r=abc,p=xyz"
    assert fe.sasl_response(data) == b"p\x00\x00\x00\x16" + data


# -- simple and extended query -------------------------------------------------------------


def test_query():
    assert fe.query("SELECT 1") == b"Q\x00\x00\x00\x0dSELECT 1\x00"


def test_query_encodes_utf8():
    assert fe.query("SELECT 'é'") == b"Q\x00\x00\x00\x10SELECT '\xc3\xa9'\x00"


def test_parse_unnamed_without_param_oids():
    assert fe.parse(b"", "SELECT 1") == b"P\x00\x00\x00\x10\x00SELECT 1\x00\x00\x00"


def test_parse_named_with_param_oids():
    expected = (
        b"P\x00\x00\x00\x1f"
        b"s1\x00"
        b"SELECT $1, $2\x00"
        b"\x00\x02"
        b"\x00\x00\x00\x17"  # int4
        b"\x00\x00\x00\x19"  # text
    )
    assert fe.parse(b"s1", "SELECT $1, $2", [23, 25]) == expected


def test_parse_packs_oids_as_unsigned():
    assert fe.parse(b"", b"x", [3_000_000_000]).endswith(b"\x00\x01\xb2\xd0\x5e\x00")


def test_parse_accepts_65535_param_oids():
    n = 65535
    msg = fe.parse(b"", "x", [25] * n)
    assert msg[:5] == b"P" + (4 + 1 + 2 + 2 + 4 * n).to_bytes(4, "big")
    assert msg[5:10] == b"\x00x\x00\xff\xff"
    assert msg[10:] == b"\x00\x00\x00\x19" * n


class _HugeSequence:
    """Claims a length but explodes if anyone looks at the elements."""

    def __init__(self, length: int):
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index):
        raise AssertionError("the encoder read elements before checking the count")

    def __iter__(self):
        raise AssertionError("the encoder iterated before checking the count")


def test_parse_refuses_65536_param_oids_before_building():
    with pytest.raises(InterfaceError):
        fe.parse(b"", "x", _HugeSequence(65536))


def test_bind_text_param_unnamed():
    expected = (
        b"B\x00\x00\x00\x12"
        b"\x00\x00"  # portal, statement
        b"\x00\x00"  # no parameter format codes: all text
        b"\x00\x01\x00\x00\x00\x0242"
        b"\x00\x00"  # no result format codes: all text
    )
    assert fe.bind(b"", b"", [], [b"42"]) == expected


def test_bind_text_and_binary_params():
    expected = (
        b"B\x00\x00\x00\x25"
        b"p1\x00s1\x00"
        b"\x00\x02\x00\x00\x00\x01"
        b"\x00\x02"
        b"\x00\x00\x00\x03abc"
        b"\x00\x00\x00\x04\x00\x00\x00\x07"
        b"\x00\x01\x00\x01"
    )
    params = [b"abc", b"\x00\x00\x00\x07"]
    assert fe.bind(b"p1", b"s1", [0, 1], params, [1]) == expected


def test_bind_null_is_minus_one_and_empty_is_zero_length():
    expected = b"B\x00\x00\x00\x15\x00s\x00\x00\x00\x00\x02\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00"
    assert fe.bind(b"", b"s", [], [None, b""]) == expected


@pytest.mark.parametrize(
    ("codes", "encoded"),
    [
        ([], b"\x00\x00"),
        ([0], b"\x00\x01\x00\x00"),
        ([1], b"\x00\x01\x00\x01"),
        ([0, 1, 1], b"\x00\x03\x00\x00\x00\x01\x00\x01"),
    ],
)
def test_bind_format_code_lists(codes, encoded):
    head = b"\x00\x00"  # unnamed portal and statement
    no_params = b"\x00\x00"
    as_result = fe.bind(b"", b"", [], [], codes)
    body = head + b"\x00\x00" + no_params + encoded
    assert as_result == b"B" + (4 + len(body)).to_bytes(4, "big") + body
    as_params = fe.bind(b"", b"", codes, [b"1"] * len(codes))
    values = b"\x00\x00\x00\x011" * len(codes)
    body = head + encoded + len(codes).to_bytes(2, "big") + values + b"\x00\x00"
    assert as_params == b"B" + (4 + len(body)).to_bytes(4, "big") + body


def test_bind_accepts_65535_params():
    n = 65535
    msg = fe.bind(b"", b"", [], [None] * n)
    assert msg[:5] == b"B" + (4 + 2 + 2 + 2 + 4 * n + 2).to_bytes(4, "big")
    assert msg[5:11] == b"\x00\x00\x00\x00\xff\xff"
    assert msg[11:-2] == b"\xff\xff\xff\xff" * n


def test_bind_refuses_65536_params_before_building():
    with pytest.raises(InterfaceError):
        fe.bind(b"", b"", [], _HugeSequence(65536))


def test_describe_statement():
    assert fe.describe_statement(b"s1") == b"D\x00\x00\x00\x08Ss1\x00"


def test_describe_portal():
    assert fe.describe_portal(b"p1") == b"D\x00\x00\x00\x08Pp1\x00"
    assert fe.describe_portal() == b"D\x00\x00\x00\x06P\x00" == fe.DESCRIBE_UNNAMED_PORTAL


def test_execute_unnamed_without_limit():
    assert fe.execute() == b"E\x00\x00\x00\x09\x00\x00\x00\x00\x00" == fe.EXECUTE_UNNAMED


def test_execute_with_row_limit():
    assert fe.execute(b"p1", 100) == b"E\x00\x00\x00\x0bp1\x00\x00\x00\x00\x64"


def test_close_statement_and_portal():
    assert fe.close_statement(b"s1") == b"C\x00\x00\x00\x08Ss1\x00"
    assert fe.close_statement(b"") == b"C\x00\x00\x00\x06S\x00"
    assert fe.close_portal(b"p1") == b"C\x00\x00\x00\x08Pp1\x00"


# -- COPY and the fixed messages -----------------------------------------------------------


def test_copy_data():
    assert fe.copy_data(b"1\tfoo\n") == b"d\x00\x00\x00\x0a1\tfoo\n"


def test_copy_done():
    assert fe.COPY_DONE == b"c\x00\x00\x00\x04"


def test_copy_fail():
    assert fe.copy_fail("bad input") == b"f\x00\x00\x00\x0ebad input\x00"


def test_copy_fail_drops_nul_from_reason():
    assert fe.copy_fail("a\x00b") == b"f\x00\x00\x00\x07ab\x00"


def test_fixed_messages():
    assert fe.SYNC == b"S\x00\x00\x00\x04"
    assert fe.FLUSH == b"H\x00\x00\x00\x04"
    assert fe.TERMINATE == b"X\x00\x00\x00\x04"
    assert fe.NULL_PARAM == b"\xff\xff\xff\xff"


def test_execute_sync_tail():
    assert fe.EXECUTE_SYNC == b"E\x00\x00\x00\x09\x00\x00\x00\x00\x00S\x00\x00\x00\x04"


# -- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "encode",
    [
        lambda: fe.query("SELECT 1\x00; DROP TABLE t"),
        lambda: fe.parse(b"", "SELECT\x001"),
        lambda: fe.parse(b"", b"SELECT\x001"),
        lambda: fe.startup({"user\x00": "u"}),
        lambda: fe.startup({"user": "u\x00x"}),
        lambda: fe.sasl_initial_response("SCRAM\x00", b""),
    ],
    ids=["query", "parse-sql-str", "parse-sql-bytes", "startup-key", "startup-value", "sasl"],
)
def test_nul_inside_a_string_is_refused(encode):
    with pytest.raises(InterfaceError):
        encode()


@pytest.mark.parametrize(
    "encode",
    [
        lambda: fe.parse(b"s\x001", "SELECT 1"),
        lambda: fe.bind(b"p\x00", b"", [], []),
        lambda: fe.bind(b"", b"s\x00", [], []),
        lambda: fe.describe_statement(b"s\x00"),
        lambda: fe.describe_portal(b"p\x00"),
        lambda: fe.execute(b"p\x00"),
        lambda: fe.close_statement(b"s\x00"),
        lambda: fe.close_portal(b"p\x00"),
    ],
    ids=[
        "parse",
        "bind-portal",
        "bind-stmt",
        "describe-s",
        "describe-p",
        "execute",
        "close-s",
        "close-p",
    ],
)
def test_nul_inside_a_name_is_refused(encode):
    # A NUL in a statement or portal name would end the name early and shift every later field.
    with pytest.raises(InterfaceError):
        encode()


def test_max_message_size_is_postgres_limit():
    assert fe.MAX_MESSAGE_SIZE == 2**30 - 1


def test_message_over_max_size_is_refused(monkeypatch):
    monkeypatch.setattr(fe, "MAX_MESSAGE_SIZE", 64)
    # Query: length = 4 + len(sql) + 1.
    assert len(fe.query("x" * 59)) == 65  # exactly at the limit: accepted
    with pytest.raises(InterfaceError):
        fe.query("x" * 60)
    with pytest.raises(InterfaceError):
        fe.copy_data(b"\x00" * 61)
    with pytest.raises(InterfaceError):
        fe.bind(b"", b"", [], [b"v" * 64])


def test_oversize_refusal_does_not_echo_content(monkeypatch):
    monkeypatch.setattr(fe, "MAX_MESSAGE_SIZE", 16)
    with pytest.raises(InterfaceError) as info:
        fe.password(b"correct horse battery staple")
    assert "horse" not in str(info.value)
