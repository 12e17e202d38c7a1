"""Tests of the backend message decoders on hand-built payloads, good and malformed."""

from __future__ import annotations

import pytest

from pgmux.engine.result import rowcount_from_tag
from pgmux.errors import ProtocolError
from pgmux.protocol import backend as be

# -- constants ------------------------------------------------------------------------------

TYPE_BYTES = {
    "AUTHENTICATION": "R",
    "BACKEND_KEY_DATA": "K",
    "BIND_COMPLETE": "2",
    "CLOSE_COMPLETE": "3",
    "COMMAND_COMPLETE": "C",
    "COPY_DATA": "d",
    "COPY_DONE": "c",
    "COPY_IN_RESPONSE": "G",
    "COPY_OUT_RESPONSE": "H",
    "COPY_BOTH_RESPONSE": "W",
    "DATA_ROW": "D",
    "EMPTY_QUERY_RESPONSE": "I",
    "ERROR_RESPONSE": "E",
    "FUNCTION_CALL_RESPONSE": "V",
    "NEGOTIATE_PROTOCOL_VERSION": "v",
    "NO_DATA": "n",
    "NOTICE_RESPONSE": "N",
    "NOTIFICATION_RESPONSE": "A",
    "PARAMETER_DESCRIPTION": "t",
    "PARAMETER_STATUS": "S",
    "PARSE_COMPLETE": "1",
    "PORTAL_SUSPENDED": "s",
    "READY_FOR_QUERY": "Z",
    "ROW_DESCRIPTION": "T",
}

AUTH_CODES = {
    "AUTH_OK": 0,
    "AUTH_KERBEROS_V5": 2,
    "AUTH_CLEARTEXT": 3,
    "AUTH_MD5": 5,
    "AUTH_GSS": 7,
    "AUTH_GSS_CONTINUE": 8,
    "AUTH_SSPI": 9,
    "AUTH_SASL": 10,
    "AUTH_SASL_CONTINUE": 11,
    "AUTH_SASL_FINAL": 12,
}


@pytest.mark.parametrize(("name", "letter"), TYPE_BYTES.items())
def test_type_byte_constants(name, letter):
    assert getattr(be, name) == ord(letter)


def test_known_types_are_exactly_the_backend_messages():
    assert frozenset(map(ord, TYPE_BYTES.values())) == be.KNOWN_TYPES


@pytest.mark.parametrize(("name", "code"), AUTH_CODES.items())
def test_auth_codes(name, code):
    assert getattr(be, name) == code


# -- authentication and startup -------------------------------------------------------------


def test_authentication_ok():
    assert be.parse_authentication(b"\x00\x00\x00\x00") == (be.AUTH_OK, b"")


def test_authentication_md5_carries_salt():
    assert be.parse_authentication(b"\x00\x00\x00\x05\x01\x02\x03\x04") == (
        be.AUTH_MD5,
        b"\x01\x02\x03\x04",
    )


def test_authentication_sasl_mechanisms():
    payload = b"\x00\x00\x00\x0aSCRAM-SHA-256-PLUS\x00SCRAM-SHA-256\x00\x00"
    code, rest = be.parse_authentication(payload)
    assert code == be.AUTH_SASL
    assert be.parse_sasl_mechanisms(rest) == ["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"]


def test_authentication_sasl_continue_data():
    assert be.parse_authentication(b"\x00\x00\x00\x0br=abc,s=xyz,i=4096") == (
        be.AUTH_SASL_CONTINUE,
        b"r=abc,s=xyz,i=4096",
    )


def test_authentication_truncated():
    with pytest.raises(ProtocolError):
        be.parse_authentication(b"\x00\x00\x00")


@pytest.mark.parametrize(
    "data",
    [b"SCRAM-SHA-256\x00", b"SCRAM-SHA-256", b"", b"A\x00\x00X"],
    ids=["no-empty-terminator", "unterminated", "empty", "trailing"],
)
def test_sasl_mechanisms_malformed(data):
    with pytest.raises(ProtocolError):
        be.parse_sasl_mechanisms(data)


def test_backend_key_data_4_byte_key():
    assert be.parse_backend_key_data(b"\x00\x00\x04\xd2\x01\x02\x03\x04") == (
        1234,
        b"\x01\x02\x03\x04",
    )


def test_backend_key_data_long_keys():
    key = bytes(range(32))
    assert be.parse_backend_key_data(b"\x00\x00\x04\xd2" + key) == (1234, key)
    assert be.parse_backend_key_data(b"\x00\x00\x00\x01" + b"k" * 256)[1] == b"k" * 256


@pytest.mark.parametrize("size", [0, 4, 7, 261])
def test_backend_key_data_bad_size(size):
    with pytest.raises(ProtocolError):
        be.parse_backend_key_data(b"\x01" * size)


def test_negotiate_protocol_version():
    payload = b"\x00\x00\x00\x00\x00\x00\x00\x02_pq_.a\x00_pq_.b\x00"
    assert be.parse_negotiate_protocol_version(payload) == (0, ["_pq_.a", "_pq_.b"])
    assert be.parse_negotiate_protocol_version(b"\x00\x00\x00\x01\x00\x00\x00\x00") == (1, [])


@pytest.mark.parametrize(
    "payload",
    [
        b"\x00\x00\x00",
        b"\x00\x00\x00\x00\x00\x00\x00\x02_pq_.a\x00",
        b"\x00\x00\x00\x00\x00\x00\x00\x01_pq_.a",
        b"\x00\x00\x00\x00\x00\x00\x00\x00X",
        b"\x00\x00\x00\x00\xff\xff\xff\xff",
    ],
    ids=["truncated", "fewer-options", "unterminated", "trailing", "negative-count"],
)
def test_negotiate_protocol_version_malformed(payload):
    with pytest.raises(ProtocolError):
        be.parse_negotiate_protocol_version(payload)


def test_parameter_status():
    assert be.parse_parameter_status(b"client_encoding\x00UTF8\x00") == (
        "client_encoding",
        "UTF8",
    )
    assert be.parse_parameter_status(b"application_name\x00\x00") == ("application_name", "")


@pytest.mark.parametrize(
    "payload",
    [b"client_encoding\x00UTF8", b"client_encoding", b"a\x00b\x00c", b"\xff\x00v\x00"],
    ids=["unterminated-value", "unterminated-name", "trailing", "bad-utf8"],
)
def test_parameter_status_malformed(payload):
    with pytest.raises(ProtocolError):
        be.parse_parameter_status(payload)


@pytest.mark.parametrize("status", ["I", "T", "E"])
def test_ready_for_query(status):
    assert be.parse_ready_for_query(status.encode()) == status


@pytest.mark.parametrize("payload", [b"", b"X", b"i", b"II", b"\x00"])
def test_ready_for_query_bad_status(payload):
    with pytest.raises(ProtocolError):
        be.parse_ready_for_query(payload)


# -- results --------------------------------------------------------------------------------

# "id" int4 from table 16384 column 1, typmod -1, text format.
COL_ID = b"id\x00\x00\x00\x40\x00\x00\x01\x00\x00\x00\x17\x00\x04\xff\xff\xff\xff\x00\x00"
# "name" varchar(20) (typmod 24) not from a table, binary format, table OID above 2**31.
COL_NAME = b"name\x00\xff\xff\xff\xf0\x00\x00\x00\x00\x04\x13\xff\xff\x00\x00\x00\x18\x00\x01"


def test_row_description():
    columns = be.parse_row_description(b"\x00\x02" + COL_ID + COL_NAME)
    assert columns == (
        be.Column("id", 16384, 1, 23, 4, -1, 0),
        be.Column("name", 4294967280, 0, 1043, -1, 24, 1),
    )
    assert columns[0].type_oid == 23
    assert columns[1].format == 1


def test_row_description_empty():
    assert be.parse_row_description(b"\x00\x00") == ()


def test_row_description_utf8_name():
    payload = b"\x00\x01caf\xc3\xa9" + COL_ID[2:]
    assert be.parse_row_description(payload)[0].name == "café"


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x00",
        b"\xff\xff",
        b"\x00\x01" + COL_ID[:-1],
        b"\x00\x01id",
        b"\x00\x02" + COL_ID,
        b"\x00\x01" + COL_ID + b"\x00",
        b"\x00\x01\xff\xfe\x00" + COL_ID[3:],
    ],
    ids=[
        "empty",
        "half-count",
        "negative-count",
        "truncated-field",
        "unterminated-name",
        "fewer-fields",
        "trailing",
        "bad-utf8-name",
    ],
)
def test_row_description_malformed(payload):
    with pytest.raises(ProtocolError):
        be.parse_row_description(payload)


def test_data_row():
    payload = (
        b"\x00\x03"
        b"\x00\x00\x00\x0242"
        b"\xff\xff\xff\xff"  # NULL
        b"\x00\x00\x00\x00"  # empty string
    )
    assert be.parse_data_row(payload) == [b"42", None, b""]


def test_data_row_no_columns():
    assert be.parse_data_row(b"\x00\x00") == []


def test_data_row_from_bytearray_payload():
    # The framing layer hands large messages out as bytearray.
    row = be.parse_data_row(bytearray(b"\x00\x01\x00\x00\x00\x03abc"))
    assert row == [b"abc"]


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x00",
        b"\xff\xff",
        b"\x00\x01\x00\x00",
        b"\x00\x01\xff\xff\xff\xfe",
        b"\x00\x01\x80\x00\x00\x00",
        b"\x00\x01\x00\x00\x00\x0aabc",
        b"\x00\x02\x00\x00\x00\x01a",
        b"\x00\x01\x00\x00\x00\x01ab",
        b"\x00\x00\x00",
    ],
    ids=[
        "empty",
        "half-count",
        "negative-count",
        "truncated-length",
        "length-minus-2",
        "length-min-int",
        "column-past-end",
        "fewer-columns",
        "trailing",
        "trailing-after-zero",
    ],
)
def test_data_row_malformed(payload):
    with pytest.raises(ProtocolError):
        be.parse_data_row(payload)


def test_command_complete():
    assert be.parse_command_complete(b"INSERT 0 3\x00") == "INSERT 0 3"


@pytest.mark.parametrize("payload", [b"", b"SELECT 1", b"SELECT 1\x00\x00"])
def test_command_complete_malformed(payload):
    with pytest.raises(ProtocolError):
        be.parse_command_complete(payload)


@pytest.mark.parametrize(
    ("tag", "count"),
    [
        ("SELECT 5", 5),
        ("INSERT 0 3", 3),
        ("UPDATE 0", 0),
        ("DELETE 12", 12),
        ("MERGE 2", 2),
        ("COPY 50", 50),
        ("FETCH 7", 7),
        ("MOVE 1", 1),
        ("BEGIN", -1),
        ("CREATE TABLE", -1),
        ("", -1),
    ],
)
def test_rowcount_from_tag(tag, count):
    assert rowcount_from_tag(tag) == count


# -- errors, notices, notifications ---------------------------------------------------------


def test_error_fields():
    payload = (
        b"SERROR\x00VERROR\x00C42P01\x00"
        b'Mrelation "nope" does not exist\x00P15\x00Fparse_relation.c\x00\x00'
    )
    assert be.parse_fields(payload) == {
        "S": "ERROR",
        "V": "ERROR",
        "C": "42P01",
        "M": 'relation "nope" does not exist',
        "P": "15",
        "F": "parse_relation.c",
    }


def test_error_fields_empty_list():
    assert be.parse_fields(b"\x00") == {}


def test_error_fields_bad_utf8_is_replaced_not_fatal():
    assert be.parse_fields(b"Mab\xffc\x00\x00") == {"M": "ab\ufffdc"}


@pytest.mark.parametrize(
    "payload",
    [b"", b"SERROR", b"SERROR\x00", b"SERROR\x00\x00X"],
    ids=["empty", "unterminated-field", "unterminated-list", "trailing"],
)
def test_error_fields_malformed(payload):
    with pytest.raises(ProtocolError):
        be.parse_fields(payload)


def test_notification():
    payload = b"\x00\x00\x10\xe1jobs\x00hello\x00"
    assert be.parse_notification(payload) == (4321, "jobs", "hello")
    assert be.parse_notification(b"\x00\x00\x00\x01c\x00\x00") == (1, "c", "")


@pytest.mark.parametrize(
    "payload",
    [
        b"\x00\x00\x10",
        b"\x00\x00\x10\xe1jobs",
        b"\x00\x00\x10\xe1jobs\x00hi",
        b"\x00\x00\x00\x01c\x00\x00X",
    ],
    ids=["truncated", "unterminated-channel", "unterminated-payload", "trailing"],
)
def test_notification_malformed(payload):
    with pytest.raises(ProtocolError):
        be.parse_notification(payload)


# -- extended-query and COPY metadata -------------------------------------------------------


def test_parameter_description():
    payload = b"\x00\x02\x00\x00\x00\x17\x00\x00\x00\x19"
    assert be.parse_parameter_description(payload) == (23, 25)
    assert be.parse_parameter_description(b"\x00\x00") == ()


def test_parameter_description_count_is_unsigned():
    payload = b"\xff\xff" + b"\x00\x00\x00\x19" * 65535
    oids = be.parse_parameter_description(payload)
    assert len(oids) == 65535
    assert set(oids) == {25}


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x00",
        b"\x00\x01\x00\x00\x00",
        b"\x00\x01\x00\x00\x00\x17\x00",
        b"\x00\x02\x00\x00\x00\x17",
    ],
    ids=["empty", "half-count", "truncated-oid", "trailing", "fewer-oids"],
)
def test_parameter_description_malformed(payload):
    with pytest.raises(ProtocolError):
        be.parse_parameter_description(payload)


def test_copy_response_text():
    assert be.parse_copy_response(b"\x00\x00\x02\x00\x00\x00\x00") == (0, (0, 0))


def test_copy_response_binary():
    assert be.parse_copy_response(b"\x01\x00\x01\x00\x01") == (1, (1,))


@pytest.mark.parametrize(
    "payload",
    [b"", b"\x00", b"\x00\x00", b"\x00\xff\xff", b"\x00\x00\x02\x00\x00", b"\x00\x00\x00\x00"],
    ids=["empty", "no-count", "half-count", "negative-count", "fewer-formats", "trailing"],
)
def test_copy_response_malformed(payload):
    with pytest.raises(ProtocolError):
        be.parse_copy_response(payload)


def test_expect_empty():
    assert be.expect_empty(b"", "ParseComplete") is None
    with pytest.raises(ProtocolError, match="BindComplete"):
        be.expect_empty(b"\x00", "BindComplete")
