"""Client-side SQL literals: ``quote(value)`` and ``mogrify(sql, params)``, for DDL and logs.

Statements never need this: their values travel as real parameters. It is for SQL that
takes no parameters (DDL's DEFAULT clauses, Django's schema editor) and for showing the
statement that ran. The literals read back as the same value whatever the server's
``standard_conforming_strings``: text with a backslash is an ``E''`` string, a negative
number gets a space before it (``x -%s`` must not become a ``--`` comment), and what a
bare literal would leave untyped carries a cast (``'2024-05-01'::date``), much as psycopg
renders them. A NUL character, which PostgreSQL text cannot hold, is a ``DataError``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import math
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from pgmux.dbapi.paramstyle import values_for
from pgmux.errors import DataError
from pgmux.types import Interval, Json, TypeRegistry, default_registry, oids
from pgmux.types.text import dump_interval, dump_timedelta

NUL_MESSAGE = "a NUL character (\\x00) cannot be part of PostgreSQL text"

# type OID -> the name to cast to (arrays as "name[]")
_TYPE_NAMES: dict[int, str] = {}
for _name, (_oid, _array_oid, _) in oids.TYPES.items():
    _TYPE_NAMES[_oid] = _name
    if _array_oid:
        _TYPE_NAMES[_array_oid] = f"{_name}[]"


def quote_string(text: str) -> str:
    """``text`` as a string literal (``E''`` when it holds a backslash)."""
    if "\x00" in text:
        raise DataError(NUL_MESSAGE)
    body = text.replace("'", "''")
    if "\\" in body:
        return " E'" + body.replace("\\", "\\\\") + "'"
    return "'" + body + "'"


def _typed(text: str, type_name: str) -> str:
    return f"{quote_string(text)}::{type_name}"


def _number(text: str) -> str:
    return " " + text if text.startswith("-") else text


def _float(value: float) -> str:
    if math.isnan(value):
        return "'NaN'::float8"
    if math.isinf(value):
        return "'Infinity'::float8" if value > 0 else "'-Infinity'::float8"
    return _number(float.__repr__(value))


def _decimal(value: Decimal) -> str:
    if value.is_nan():
        return "'NaN'::numeric"
    if value.is_infinite():
        return "'-Infinity'::numeric" if value.is_signed() else "'Infinity'::numeric"
    return _number(str(value))


def _datetime(value: dt.datetime) -> str:
    aware = value.tzinfo is not None and value.utcoffset() is not None
    return _typed(value.isoformat(" "), "timestamptz" if aware else "timestamp")


def _time(value: dt.time) -> str:
    aware = value.tzinfo is not None and value.utcoffset() is not None
    return _typed(value.isoformat(), "timetz" if aware else "time")


def _range(value: Any) -> str:
    """A psycopg-style range (``lower``, ``upper``, bounds, ``isempty``): its text."""
    if value.isempty:
        return "'empty'"
    lower = "" if value.lower is None else _range_bound(value.lower)
    upper = "" if value.upper is None else _range_bound(value.upper)
    text = (("[" if value.lower_inc else "(") + lower + "," + upper
            + ("]" if value.upper_inc else ")"))
    return quote_string(text)


def _range_bound(bound: Any) -> str:
    text = bound.isoformat(" ") if isinstance(bound, dt.datetime) else str(bound)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def is_range(value: Any) -> bool:
    """Whether ``value`` looks like a psycopg (2 or 3) range object."""
    return all(hasattr(value, name) for name in ("lower", "upper", "isempty", "lower_inc",
                                                 "upper_inc"))


_QUOTERS: dict[type, Callable[[Any], str]] = {
    type(None): lambda value: "NULL",
    bool: lambda value: "true" if value else "false",
    int: lambda value: _number(int.__repr__(value)),
    float: _float,
    Decimal: _decimal,
    str: quote_string,
    bytes: lambda value: _typed("\\x" + value.hex(), "bytea"),
    bytearray: lambda value: _typed("\\x" + bytes(value).hex(), "bytea"),
    memoryview: lambda value: _typed("\\x" + bytes(value).hex(), "bytea"),
    dt.date: lambda value: _typed(value.isoformat(), "date"),
    dt.datetime: _datetime,
    dt.time: _time,
    dt.timedelta: lambda value: _typed(dump_timedelta(value)[1], "interval"),
    Interval: lambda value: _typed(dump_interval(value)[1], "interval"),
    uuid.UUID: lambda value: _typed(str(value), "uuid"),
    Json: lambda value: _typed(value.text(), "jsonb"),
    ipaddress.IPv4Address: lambda value: _typed(str(value), "inet"),
    ipaddress.IPv6Address: lambda value: _typed(str(value), "inet"),
    ipaddress.IPv4Interface: lambda value: _typed(str(value), "inet"),
    ipaddress.IPv6Interface: lambda value: _typed(str(value), "inet"),
    ipaddress.IPv4Network: lambda value: _typed(str(value), "cidr"),
    ipaddress.IPv6Network: lambda value: _typed(str(value), "cidr"),
}


def quote(value: Any, registry: TypeRegistry | None = None) -> str:
    """``value`` as a SQL literal; other types through ``registry``'s encoders (lists as
    arrays, classes registered with an encoder), cast to the type they are sent as."""
    for cls in type(value).__mro__:
        quoter = _QUOTERS.get(cls)
        if quoter is not None:
            return quoter(value)
    if is_range(value):
        return _range(value)
    oid, _, data = (registry or default_registry).encode(value)
    text = data.decode() if isinstance(data, bytes) else ""
    type_name = _TYPE_NAMES.get(oid)
    return _typed(text, type_name) if type_name else quote_string(text)


def mogrify(sql: str, params: Any, registry: TypeRegistry | None = None) -> str:
    """``sql`` with its %s / %(name)s placeholders replaced by literals (``quote``); a
    tuple renders as a parenthesised list, as in a statement. Without parameters
    (``None``) the text is returned as it is."""
    if params is None:
        return sql
    converted, values = values_for(sql, params)

    def literal(value: Any) -> str:
        if type(value) is tuple:
            return "(" + ", ".join(literal(item) for item in value) + ")"
        return quote(value, registry)

    texts = [literal(value) for value in values]
    pieces = [converted.parts[0]]
    for slot, after in zip(converted.slots, converted.parts[1:], strict=True):
        pieces += (texts[slot], after)
    return "".join(pieces)
