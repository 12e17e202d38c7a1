"""Decoders for the backend (server → client) messages.

Each decoder takes the payload of one framed message (type byte and length
already removed, see ``framing``) and raises ``ProtocolError`` when the payload
does not have the shape the protocol promises.
"""

from __future__ import annotations

from struct import Struct
from struct import error as StructError
from typing import NamedTuple

from pgmux._native import extension as native_extension
from pgmux.errors import ProtocolError

# Message type bytes, as ints (what indexing a bytes object gives).
AUTHENTICATION = ord("R")
BACKEND_KEY_DATA = ord("K")
BIND_COMPLETE = ord("2")
CLOSE_COMPLETE = ord("3")
COMMAND_COMPLETE = ord("C")
COPY_DATA = ord("d")
COPY_DONE = ord("c")
COPY_IN_RESPONSE = ord("G")
COPY_OUT_RESPONSE = ord("H")
COPY_BOTH_RESPONSE = ord("W")
DATA_ROW = ord("D")
EMPTY_QUERY_RESPONSE = ord("I")
ERROR_RESPONSE = ord("E")
FUNCTION_CALL_RESPONSE = ord("V")
NEGOTIATE_PROTOCOL_VERSION = ord("v")
NO_DATA = ord("n")
NOTICE_RESPONSE = ord("N")
NOTIFICATION_RESPONSE = ord("A")
PARAMETER_DESCRIPTION = ord("t")
PARAMETER_STATUS = ord("S")
PARSE_COMPLETE = ord("1")
PORTAL_SUSPENDED = ord("s")
READY_FOR_QUERY = ord("Z")
ROW_DESCRIPTION = ord("T")

KNOWN_TYPES = frozenset(
    {
        AUTHENTICATION, BACKEND_KEY_DATA, BIND_COMPLETE, CLOSE_COMPLETE, COMMAND_COMPLETE,
        COPY_DATA, COPY_DONE, COPY_IN_RESPONSE, COPY_OUT_RESPONSE, COPY_BOTH_RESPONSE,
        DATA_ROW, EMPTY_QUERY_RESPONSE, ERROR_RESPONSE, FUNCTION_CALL_RESPONSE,
        NEGOTIATE_PROTOCOL_VERSION, NO_DATA, NOTICE_RESPONSE, NOTIFICATION_RESPONSE,
        PARAMETER_DESCRIPTION, PARAMETER_STATUS, PARSE_COMPLETE, PORTAL_SUSPENDED,
        READY_FOR_QUERY, ROW_DESCRIPTION,
    }
)  # fmt: skip

# Authentication request codes.
AUTH_OK = 0
AUTH_KERBEROS_V5 = 2
AUTH_CLEARTEXT = 3
AUTH_MD5 = 5
AUTH_GSS = 7
AUTH_GSS_CONTINUE = 8
AUTH_SSPI = 9
AUTH_SASL = 10
AUTH_SASL_CONTINUE = 11
AUTH_SASL_FINAL = 12

_i16 = Struct("!h")
_i32 = Struct("!i")
_u32 = Struct("!I")
_ii = Struct("!ii")
_column = Struct("!IhIhih")

unpack_i16 = _i16.unpack_from
unpack_i32 = _i32.unpack_from


class Column(NamedTuple):
    """One field of a RowDescription."""

    name: str
    table_oid: int
    column_number: int
    type_oid: int
    type_size: int
    type_modifier: int
    format: int


def _cstring(payload: bytes, pos: int) -> tuple[str, int]:
    end = payload.find(b"\x00", pos)
    if end < 0:
        raise ProtocolError("string in a backend message is not NUL-terminated")
    try:
        return payload[pos:end].decode(), end + 1
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"string in a backend message is not valid UTF-8: {exc}") from None


def _check_consumed(payload: bytes, pos: int, what: str) -> None:
    if pos != len(payload):
        raise ProtocolError(f"{what}: {len(payload) - pos} unexpected trailing bytes")


def parse_authentication(payload: bytes) -> tuple[int, bytes]:
    """Authentication*: (request code, the rest of the payload)."""
    if len(payload) < 4:
        raise ProtocolError("Authentication message shorter than its code")
    return _i32.unpack_from(payload)[0], payload[4:]


def parse_sasl_mechanisms(data: bytes) -> list[str]:
    """The mechanism list of AuthenticationSASL: strings ended by an empty one."""
    names: list[str] = []
    pos = 0
    while True:
        name, pos = _cstring(data, pos)
        if not name:
            break
        names.append(name)
    _check_consumed(data, pos, "AuthenticationSASL")
    return names


def parse_backend_key_data(payload: bytes) -> tuple[int, bytes]:
    """BackendKeyData: (process id, secret key); the key is 4 bytes on 3.0, up to 256 on 3.2."""
    if not 8 <= len(payload) <= 260:
        raise ProtocolError(f"BackendKeyData of {len(payload)} bytes")
    return _i32.unpack_from(payload)[0], payload[4:]


def parse_negotiate_protocol_version(payload: bytes) -> tuple[int, list[str]]:
    """NegotiateProtocolVersion: (newest minor version supported, unrecognised options).

    The documentation calls the first field a minor version; servers send the whole
    version word (3 << 16 | minor). Both spellings are accepted.
    """
    try:
        version, count = _ii.unpack_from(payload)
    except StructError:
        raise ProtocolError("NegotiateProtocolVersion too short") from None
    if count < 0:
        raise ProtocolError("NegotiateProtocolVersion with a negative option count")
    if version >> 16 not in (0, 3):
        raise ProtocolError(f"NegotiateProtocolVersion names protocol version {version:#x}")
    options: list[str] = []
    pos = 8
    for _ in range(count):
        name, pos = _cstring(payload, pos)
        options.append(name)
    _check_consumed(payload, pos, "NegotiateProtocolVersion")
    return version & 0xFFFF, options


def parse_parameter_status(payload: bytes) -> tuple[str, str]:
    name, pos = _cstring(payload, 0)
    value, pos = _cstring(payload, pos)
    _check_consumed(payload, pos, "ParameterStatus")
    return name, value


def parse_ready_for_query(payload: bytes) -> str:
    """ReadyForQuery: the transaction status, ``I`` idle, ``T`` in a block, ``E`` failed."""
    if len(payload) != 1 or payload not in (b"I", b"T", b"E"):
        raise ProtocolError(f"ReadyForQuery with status {payload!r}")
    return chr(payload[0])


def parse_row_description(payload: bytes) -> tuple[Column, ...]:
    try:
        (count,) = _i16.unpack_from(payload)
        if count < 0:
            raise ProtocolError("RowDescription with a negative field count")
        columns = []
        pos = 2
        for _ in range(count):
            name, pos = _cstring(payload, pos)
            columns.append(Column(name, *_column.unpack_from(payload, pos)))
            pos += 18
    except StructError:
        raise ProtocolError("RowDescription truncated") from None
    _check_consumed(payload, pos, "RowDescription")
    return tuple(columns)


def parse_data_row(payload: bytes) -> list[bytes | None]:
    """DataRow: each column's raw bytes, ``None`` for NULL."""
    try:
        (count,) = _i16.unpack_from(payload)
        if count < 0:
            raise ProtocolError("DataRow with a negative column count")
        values: list[bytes | None] = []
        append = values.append
        pos = 2
        for _ in range(count):
            (size,) = _i32.unpack_from(payload, pos)
            pos += 4
            if size < 0:
                if size != -1:
                    raise ProtocolError(f"DataRow column with length {size}")
                append(None)
                continue
            end = pos + size
            if end > len(payload):
                raise ProtocolError("DataRow column runs past the end of the message")
            append(payload[pos:end])
            pos = end
    except StructError:
        raise ProtocolError("DataRow truncated") from None
    _check_consumed(payload, pos, "DataRow")
    return values


def parse_command_complete(payload: bytes) -> str:
    if payload and payload.find(b"\x00") == len(payload) - 1:  # one NUL, at the end: usual
        try:
            return payload[:-1].decode()
        except UnicodeDecodeError:
            pass  # _cstring says what is wrong
    tag, pos = _cstring(payload, 0)
    _check_consumed(payload, pos, "CommandComplete")
    return tag


def parse_fields(payload: bytes) -> dict[str, str]:
    """ErrorResponse / NoticeResponse: field code → value (see ``errors.FIELD_NAMES``)."""
    fields: dict[str, str] = {}
    pos = 0
    end = len(payload)
    while pos < end:
        code = payload[pos]
        if code == 0:
            _check_consumed(payload, pos + 1, "ErrorResponse")
            return fields
        stop = payload.find(b"\x00", pos + 1)
        if stop < 0:
            raise ProtocolError("ErrorResponse field is not NUL-terminated")
        fields[chr(code)] = payload[pos + 1 : stop].decode("utf-8", "replace")
        pos = stop + 1
    raise ProtocolError("ErrorResponse is not terminated")


def parse_notification(payload: bytes) -> tuple[int, str, str]:
    """NotificationResponse: (sender pid, channel, payload)."""
    if len(payload) < 4:
        raise ProtocolError("NotificationResponse too short")
    (pid,) = _i32.unpack_from(payload)
    channel, pos = _cstring(payload, 4)
    text, pos = _cstring(payload, pos)
    _check_consumed(payload, pos, "NotificationResponse")
    return pid, channel, text


def parse_parameter_description(payload: bytes) -> tuple[int, ...]:
    try:
        (count,) = _i16.unpack_from(payload)
        if len(payload) != 2 + 4 * (count & 0xFFFF):
            raise ProtocolError("ParameterDescription length does not match its count")
        return Struct(f"!{count & 0xFFFF}I").unpack_from(payload, 2)
    except StructError:
        raise ProtocolError("ParameterDescription truncated") from None


def parse_copy_response(payload: bytes) -> tuple[int, tuple[int, ...]]:
    """CopyIn/Out/BothResponse: (overall format, per-column formats)."""
    try:
        overall = payload[0]
        (count,) = _i16.unpack_from(payload, 1)
        if count < 0 or len(payload) != 3 + 2 * count:
            raise ProtocolError("CopyResponse length does not match its column count")
        return overall, Struct(f"!{count}h").unpack_from(payload, 3)
    except (StructError, IndexError):
        raise ProtocolError("CopyResponse truncated") from None


def expect_empty(payload: bytes, what: str) -> None:
    """ParseComplete, BindComplete, CloseComplete, NoData, EmptyQueryResponse, CopyDone,
    PortalSuspended carry no payload."""
    if payload:
        raise ProtocolError(f"{what} carries {len(payload)} unexpected bytes")


# The compiled twin of parse_command_complete (pgmux._native), which hands everything
# unusual to the reference above.
python_parse_command_complete = parse_command_complete
_compiled = native_extension("pgmux.protocol._cmessages")
if _compiled is not None:
    _compiled.configure_tags(python_parse_command_complete)
    parse_command_complete = _compiled.parse_command_complete  # noqa: F811
