"""The libpq connection string lexer: a URL or ``key=value`` string into keyword -> value."""

from __future__ import annotations

import re
from urllib.parse import unquote

from pgmux.errors import InterfaceError

# Every libpq keyword we accept -> its environment variable (None: no variable).
KEYWORDS: dict[str, str | None] = {
    "host": "PGHOST",
    "hostaddr": "PGHOSTADDR",
    "port": "PGPORT",
    "dbname": "PGDATABASE",
    "user": "PGUSER",
    "password": "PGPASSWORD",
    "passfile": "PGPASSFILE",
    "channel_binding": "PGCHANNELBINDING",
    "require_auth": "PGREQUIREAUTH",
    "connect_timeout": "PGCONNECT_TIMEOUT",
    "client_encoding": "PGCLIENTENCODING",
    "options": "PGOPTIONS",
    "application_name": "PGAPPNAME",
    "fallback_application_name": None,
    "keepalives": None,
    "keepalives_idle": None,
    "keepalives_interval": None,
    "keepalives_count": None,
    "tcp_user_timeout": None,
    "replication": None,
    "gssencmode": "PGGSSENCMODE",
    "sslmode": "PGSSLMODE",
    "sslnegotiation": "PGSSLNEGOTIATION",
    "sslcompression": "PGSSLCOMPRESSION",
    "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY",
    "sslpassword": None,
    "sslcertmode": "PGSSLCERTMODE",
    "sslrootcert": "PGSSLROOTCERT",
    "sslcrl": "PGSSLCRL",
    "sslcrldir": "PGSSLCRLDIR",
    "sslsni": "PGSSLSNI",
    "requirepeer": "PGREQUIREPEER",
    "ssl_min_protocol_version": "PGSSLMINPROTOCOLVERSION",
    "ssl_max_protocol_version": "PGSSLMAXPROTOCOLVERSION",
    "min_protocol_version": "PGMINPROTOCOLVERSION",
    "max_protocol_version": "PGMAXPROTOCOLVERSION",
    "krbsrvname": "PGKRBSRVNAME",
    "gsslib": "PGGSSLIB",
    "gssdelegation": "PGGSSDELEGATION",
    "service": "PGSERVICE",
    "target_session_attrs": "PGTARGETSESSIONATTRS",
    "load_balance_hosts": "PGLOADBALANCEHOSTS",
    "allow_cleartext_password": None,  # pgmux extension
}
# Accepted for compatibility, without effect here (no GSSAPI; compression is gone from TLS).
IGNORED_KEYWORDS = frozenset({"krbsrvname", "gsslib", "gssdelegation", "sslcompression"})
SECRET_FIELDS = frozenset({"password", "sslpassword"})

_URL_PREFIXES = ("postgresql://", "postgres://")
_KEY_LIKE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def parse_dsn(dsn: str) -> dict[str, str]:
    """Parse a libpq connection string, URL or ``key=value`` form, into keyword → value.

    Unknown keywords and malformed strings raise InterfaceError; messages never quote a
    value (which might be a password).
    """
    if dsn.startswith(_URL_PREFIXES):
        pairs = _parse_url(dsn)
    else:
        pairs = _parse_keyvalue(dsn)
    secrets = [value for key, value in pairs if key in SECRET_FIELDS and value]
    previous = ""
    for key, _ in pairs:
        if key not in KEYWORDS:
            shown = _show_key(key, secrets, after_secret=previous in SECRET_FIELDS)
            raise InterfaceError(f"invalid connection option {shown}")
        previous = key
    return dict(pairs)


def _show_key(key: str, secrets: list[str], after_secret: bool) -> str:
    """Quote an unknown key unless it could be a piece of a secret (an unquoted space)."""
    if _KEY_LIKE.fullmatch(key) and not after_secret and not any(key in s for s in secrets):
        return f'"{key}"'
    return "(name not shown: it may be part of a password)"


def _parse_keyvalue(dsn: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    pos, end = 0, len(dsn)
    while True:
        pos = _skip_space(dsn, pos)
        if pos >= end:
            return pairs
        start = pos
        while pos < end and dsn[pos] != "=" and not dsn[pos].isspace():
            pos += 1
        key = dsn[start:pos]
        pos = _skip_space(dsn, pos)
        if pos >= end or dsn[pos] != "=":
            raise InterfaceError(
                f'missing "=" after the keyword at position {start} in the connection string'
            )
        pos = _skip_space(dsn, pos + 1)
        value, pos = _read_value(dsn, pos)
        pairs.append((key, value))


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _read_value(dsn: str, pos: int) -> tuple[str, int]:
    """An unquoted or single-quoted value with backslash escapes; returns (value, new pos)."""
    quoted = pos < len(dsn) and dsn[pos] == "'"
    start = pos
    if quoted:
        pos += 1
    chars: list[str] = []
    while pos < len(dsn):
        char = dsn[pos]
        if char == "\\" and pos + 1 < len(dsn):
            chars.append(dsn[pos + 1])
            pos += 2
            continue
        if (quoted and char == "'") or (not quoted and char.isspace()):
            return "".join(chars), pos + 1
        chars.append(char)
        pos += 1
    if quoted:
        raise InterfaceError(
            f"unterminated quoted string starting at position {start} in the connection string"
        )
    return "".join(chars), pos


def _parse_url(dsn: str) -> list[tuple[str, str]]:
    rest = dsn.split("://", 1)[1]
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    pairs: list[tuple[str, str]] = []
    if "@" in netloc:
        userinfo, _, netloc = netloc.rpartition("@")
        user, colon, password = userinfo.partition(":")
        if user:
            pairs.append(("user", _percent_decode(user, "user name")))
        if colon:
            pairs.append(("password", _percent_decode(password, "password")))
    pairs.extend(_parse_hostspec(netloc))
    if path:
        pairs.append(("dbname", _percent_decode(path, "database name")))
    pairs.extend(_parse_query(query))
    return pairs


def _parse_hostspec(netloc: str) -> list[tuple[str, str]]:
    hosts, ports = [], []
    for item in netloc.split(","):
        if item.startswith("["):
            close = item.find("]")
            if close < 0:
                raise InterfaceError('missing "]" in an IPv6 host address in the URI')
            host, tail = item[1:close], item[close + 1 :]
            if tail and not tail.startswith(":"):
                raise InterfaceError('unexpected character after an IPv6 "]" in the URI')
        else:
            host, colon, port_text = item.partition(":")
            tail = colon + port_text
        hosts.append(_percent_decode(host, "host"))
        ports.append(_percent_decode(tail[1:], "port"))
    pairs = []
    if any(hosts) or len(hosts) > 1:
        pairs.append(("host", ",".join(hosts)))
    if any(ports):
        pairs.append(("port", ",".join(ports)))
    return pairs


def _parse_query(query: str) -> list[tuple[str, str]]:
    pairs = []
    for item in query.split("&") if query else ():
        key, equals, value = item.partition("=")
        if not equals:
            raise InterfaceError('missing "=" in a URI query parameter')
        key = _percent_decode(key, "query parameter name")
        value = _percent_decode(value, "query parameter value")
        if key == "ssl" and value == "true":  # JDBC spelling, accepted by libpq
            key, value = "sslmode", "require"
        pairs.append((key, value))
    return pairs


def _percent_decode(text: str, what: str) -> str:
    if "%" not in text:
        return text
    if _BAD_PERCENT.search(text):
        raise InterfaceError(f"invalid percent-encoded token in the {what} of the URI")
    if "%00" in text:
        raise InterfaceError(f"forbidden value %00 in the {what} of the URI")
    try:
        return unquote(text, errors="strict")
    except UnicodeDecodeError:
        raise InterfaceError(f"percent-encoded {what} in the URI is not valid UTF-8") from None
