"""Encoders for the frontend (client → server) messages of protocol 3.0 and 3.2."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from struct import Struct

from pgmux._native import extension as native_extension
from pgmux.errors import InterfaceError

# PostgreSQL refuses any message over MaxAllocSize (1 GiB - 1); so do we, before sending.
MAX_MESSAGE_SIZE = 0x3FFFFFFF
MAX_PARAMETERS = 65535

PROTOCOL_3_0 = (3 << 16) | 0
PROTOCOL_3_2 = (3 << 16) | 2
SSL_REQUEST_CODE = 80877103
CANCEL_REQUEST_CODE = 80877102

_i32 = Struct("!i")
_i16 = Struct("!h")
_u16 = Struct("!H")  # counts: the server reads them unsigned, up to 65535
_ii = Struct("!ii")
_cih = Struct("!cih")  # type, length, int16
_ci = Struct("!ci")

pack_i32 = _i32.pack
pack_i16 = _i16.pack

SYNC = b"S\x00\x00\x00\x04"
FLUSH = b"H\x00\x00\x00\x04"
COPY_DONE = b"c\x00\x00\x00\x04"
TERMINATE = b"X\x00\x00\x00\x04"
# Execute the unnamed portal with no row limit, then Sync: the tail of every multiplexed unit.
EXECUTE_UNNAMED = b"E\x00\x00\x00\x09\x00\x00\x00\x00\x00"
EXECUTE_SYNC = EXECUTE_UNNAMED + SYNC
DESCRIBE_UNNAMED_PORTAL = b"D\x00\x00\x00\x06P\x00"
NULL_PARAM = b"\xff\xff\xff\xff"


def cstr(text: str | bytes) -> bytes:
    """A NUL-terminated UTF-8 string; refuses embedded NUL (it would truncate the field)."""
    try:
        data = text.encode() if isinstance(text, str) else bytes(text)
    except UnicodeEncodeError as exc:
        raise InterfaceError(f"a string sent to the server is not valid Unicode "
                             f"({exc.reason} at position {exc.start})") from None
    if b"\x00" in data:
        raise InterfaceError("a string sent to the server must not contain NUL (\\x00)")
    return data + b"\x00"


def message(kind: bytes, body: bytes) -> bytes:
    """Frame ``body`` as a message of type ``kind`` with its length, refusing oversized ones."""
    length = len(body) + 4
    if length > MAX_MESSAGE_SIZE:
        raise InterfaceError(
            f"message of {length} bytes exceeds PostgreSQL's limit of {MAX_MESSAGE_SIZE} bytes"
        )
    return kind + _i32.pack(length) + body


def startup(params: Mapping[str, str], version: int = PROTOCOL_3_0) -> bytes:
    """StartupMessage: protocol version then name/value pairs (no type byte)."""
    body = _i32.pack(version) + b"".join(cstr(k) + cstr(v) for k, v in params.items()) + b"\x00"
    return _i32.pack(len(body) + 4) + body


def ssl_request() -> bytes:
    return _ii.pack(8, SSL_REQUEST_CODE)


def cancel_request(pid: int, key: bytes) -> bytes:
    """CancelRequest: a 4-byte key on protocol 3.0, up to 256 bytes on 3.2."""
    if not 4 <= len(key) <= 256:
        raise InterfaceError(f"cancel key of {len(key)} bytes is out of range")
    return _i32.pack(12 + len(key)) + _ii.pack(CANCEL_REQUEST_CODE, pid) + key


def password(secret: bytes) -> bytes:
    """PasswordMessage (cleartext or MD5 digest); ``secret`` excludes the NUL."""
    return message(b"p", cstr(secret))


def sasl_initial_response(mechanism: str, data: bytes) -> bytes:
    return message(b"p", cstr(mechanism) + _i32.pack(len(data)) + data)


def sasl_response(data: bytes) -> bytes:
    return message(b"p", data)


def query(sql: str) -> bytes:
    """Simple Query."""
    return message(b"Q", cstr(sql))


def parse(name: bytes, sql: str | bytes, param_oids: Sequence[int] = ()) -> bytes:
    """Parse: prepare ``sql`` as statement ``name`` (b"" for the unnamed one)."""
    n = len(param_oids)
    if n > MAX_PARAMETERS:
        raise InterfaceError(f"{n} parameters; the protocol allows at most {MAX_PARAMETERS}")
    oids = _u16.pack(n) + (Struct(f"!{n}I").pack(*param_oids) if n else b"")
    return message(b"P", cstr(name) + cstr(sql) + oids)


def bind(
    portal: bytes,
    statement: bytes,
    param_formats: Sequence[int],
    params: Sequence[bytes | None],
    result_formats: Sequence[int] = (),
) -> bytes:
    """Bind: parameters already encoded (``None`` is SQL NULL).

    Formats follow the protocol: no codes means all text, one code applies to all.
    """
    n = len(params)
    if n > MAX_PARAMETERS:
        raise InterfaceError(f"{n} parameters; the protocol allows at most {MAX_PARAMETERS}")
    parts = [cstr(portal), cstr(statement), _format_codes(param_formats), _u16.pack(n)]
    append = parts.append
    for value in params:
        if value is None:
            append(NULL_PARAM)
        else:
            append(_i32.pack(len(value)))
            append(value)
    append(_format_codes(result_formats))
    return message(b"B", b"".join(parts))


def check_bind(params: Sequence[bytes | None]) -> None:
    """Refuse parameters no Bind could carry (too many, or over the message size cap)."""
    n = len(params)
    if n > MAX_PARAMETERS:
        raise InterfaceError(f"{n} parameters; the protocol allows at most {MAX_PARAMETERS}")
    length = 4 * n + sum(len(v) for v in params if v is not None)
    if length > MAX_MESSAGE_SIZE:
        raise InterfaceError(
            f"message of {length} bytes exceeds PostgreSQL's limit of {MAX_MESSAGE_SIZE} bytes"
        )


def bind_statement(prefix: bytes, param_formats: tuple[int, ...],
                   params: Sequence[bytes | None], result_codes: bytes,
                   tail: bytes = b"") -> bytes:
    """Bind the unnamed portal to a statement we named ourselves (the hot path), then
    ``tail`` (what follows Bind in the same write: Execute and Sync), in one object.

    ``prefix`` is ``b"\\0" + name + b"\\0"`` (see ``Statement.bind_prefix``) and
    ``result_codes`` the encoded result-format field (``format_codes(...)``).
    """
    n = len(params)
    if n == 1:
        value = params[0]
        values = NULL_PARAM if value is None else _i32.pack(len(value)) + value
    else:
        if n > MAX_PARAMETERS:
            raise InterfaceError(f"{n} parameters; the protocol allows at most {MAX_PARAMETERS}")
        values = b"".join([NULL_PARAM if v is None else _i32.pack(len(v)) + v for v in params])
    codes = _format_code_cache.get(param_formats) or format_codes(param_formats)
    length = len(prefix) + len(codes) + 6 + len(values) + len(result_codes)
    if length > MAX_MESSAGE_SIZE:
        raise InterfaceError(
            f"message of {length} bytes exceeds PostgreSQL's limit of {MAX_MESSAGE_SIZE} bytes"
        )
    return b"".join((b"B", _i32.pack(length), prefix, codes, _u16.pack(n), values, result_codes,
                     tail))


_format_code_cache: dict[tuple[int, ...], bytes] = {}


def format_codes(codes: Sequence[int]) -> bytes:
    """The format-code field of Bind (cached for the common tuples)."""
    encoded = _format_codes(codes)
    if type(codes) is tuple and len(codes) <= 16 and len(_format_code_cache) < 1024:
        _format_code_cache[codes] = encoded
    return encoded


def _format_codes(codes: Sequence[int]) -> bytes:
    n = len(codes)
    if n == 0:
        return b"\x00\x00"
    if n == 1:
        return b"\x00\x01\x00\x01" if codes[0] else b"\x00\x01\x00\x00"
    return _u16.pack(n) + Struct(f"!{n}h").pack(*codes)


def describe_statement(name: bytes) -> bytes:
    return message(b"D", b"S" + cstr(name))


def describe_portal(name: bytes = b"") -> bytes:
    return message(b"D", b"P" + cstr(name))


def execute(portal: bytes = b"", max_rows: int = 0) -> bytes:
    """Execute ``portal``; ``max_rows`` > 0 suspends the portal after that many rows."""
    return message(b"E", cstr(portal) + _i32.pack(max_rows))


def close_statement(name: bytes) -> bytes:
    return message(b"C", b"S" + cstr(name))


def close_portal(name: bytes) -> bytes:
    return message(b"C", b"P" + cstr(name))


def copy_data(data: bytes) -> bytes:
    return message(b"d", data)


def copy_fail(reason: str) -> bytes:
    return message(b"f", cstr(reason.replace("\x00", "")))


# The compiled twin of bind_statement (pgmux._native), which hands everything unusual to
# the reference above.
python_bind_statement = bind_statement
_compiled = native_extension("pgmux.protocol._cmessages")
if _compiled is not None:
    _compiled.configure(fallback=python_bind_statement, namespace=globals())
    bind_statement = _compiled.bind_statement  # noqa: F811
