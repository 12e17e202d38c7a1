"""Comparing decoded values strictly, and server values of every decoded type to compare."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any


def same(a: Any, b: Any) -> bool:
    """Equal in value, type, NaN-ness, float sign, Decimal exponent and UTC offset."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, Decimal):
        return repr(a) == repr(b)
    if isinstance(a, (dt.datetime, dt.time)):
        return a == b and (a.tzinfo is None) == (b.tzinfo is None) and a.utcoffset() == b.utcoffset()
    return a == b


def assert_same(actual: Any, expected: Any) -> None:
    assert same(actual, expected), f"{actual!r} != {expected!r}"


# SQL expressions per type, edge cases included (selected in text and in binary by the tests).
SERVER_VALUES: dict[str, list[str]] = {
    "bool": ["true", "false"],
    "int2": ["32767", "-32768", "0"],
    "int4": ["2147483647", "-2147483648"],
    "int8": ["9223372036854775807", "-9223372036854775808"],
    "oid": ["4294967295", "0"],
    "xid": ["'4294967295'::xid", "'3'::xid"],
    "cid": ["'4294967295'::cid"],
    "xid8": ["'18446744073709551615'::xid8", "'0'::xid8"],
    "float4": ["0.1", "1.5", "-2.75", "3.4028235e38", "1e-45", "1.17549435e-38", "16777216",
               "1073741824", "'NaN'", "'Infinity'", "'-Infinity'", "'-0'", "0", "3.14159274",
               "1e10", "123456.789", "0.3"],
    "float8": ["0.1", "1.7976931348623157e308", "5e-324", "'-0'", "'NaN'", "'Infinity'",
               "'-Infinity'", "3.141592653589793"],
    "numeric": ["1.50", "0.00", "0", "-0.0001230", "'NaN'", "'Infinity'", "'-Infinity'",
                "1e20", "1e-20", "123456789012345678901234567890.123456789",
                "'1" + "0" * 1000 + "'", "'1E-1000'", "12.5::numeric(12,2)"],
    "bytea": ["'\\x00ff'::bytea", "''::bytea", "decode(repeat('ab', 10), 'hex')"],
    "text": ["'héllo ✓ 🎉'", "''", "repeat('x', 100000)"],
    "varchar": ["'v'::varchar(10)"],
    "bpchar": ["'ab'::char(5)", "'ab  '::bpchar"],
    "name": ["'pg_catalog'::name"],
    '"char"': ["'a'::\"char\"", "''::\"char\"", "'\\351'::\"char\"", "'\\001'::\"char\""],
    "json": ["' {\"b\": 1,  \"a\": [1, 2.5e3]} '::json", "'null'::json"],
    "jsonb": ["'{\"b\": 1, \"a\": [1, 2.5e3, \"é\"]}'::jsonb", "'\"s\"'::jsonb",
              "'[[[[1]]]]'::jsonb", "'1e400'::jsonb"],
    "uuid": ["'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid",
             "'00000000-0000-0000-0000-000000000000'::uuid"],
    "date": ["'2024-02-29'::date", "'0001-01-01'::date", "'9999-12-31'::date",
             "'0001-12-31 BC'::date", "'4714-11-24 BC'::date", "'10000-01-01'::date",
             "'5874897-12-31'::date", "'infinity'::date", "'-infinity'::date"],
    "time": ["'00:00:00'::time", "'23:59:59.999999'::time", "'12:00:00.5'::time",
             "'24:00:00'::time"],
    "timetz": ["'12:34:56.789+05:30'::timetz", "'00:00:00-15:59:59'::timetz",
               "'23:59:59.999999+00'::timetz", "'24:00:00+05'::timetz",
               "'24:00:00-03:30'::timetz"],
    "timestamp": ["'2024-02-29 12:34:56.123456'::timestamp", "'0001-01-01 00:00:00'::timestamp",
                  "'9999-12-31 23:59:59.999999'::timestamp", "'0044-03-15 12:00:00.5 BC'::timestamp",
                  "'4714-11-24 00:00:00 BC'::timestamp", "'294276-12-31 23:59:59.999999'::timestamp",
                  "'10000-01-01 00:00:00'::timestamp", "'infinity'::timestamp",
                  "'-infinity'::timestamp"],
    "timestamptz": ["'2024-02-29 12:34:56.123456+05:30'::timestamptz",
                    "'0001-01-01 00:00:00+00'::timestamptz",
                    "'0001-01-01 00:30:00+01'::timestamptz",
                    "'9999-12-31 23:59:59.999999+00'::timestamptz",
                    "'1900-01-01 00:00:00+00'::timestamptz",
                    "'0044-03-15 12:00:00 BC'::timestamptz",
                    "'294276-12-31 23:59:59.999999+00'::timestamptz",
                    "'infinity'::timestamptz", "'-infinity'::timestamptz"],
    "interval": ["'1 year 2 mons 3 days 04:05:06.789'::interval", "'-1 mons'::interval",
                 "'-00:00:00.5'::interval", "'0'::interval", "'-3 days +00:00:00.000005'::interval",
                 "'999999999 days 23:59:59.999999'::interval", "'2147483647 days'::interval",
                 "'178000000 years'::interval", "'-2562047788:00:54.775807'::interval"],
    "inet": ["'192.168.0.1'::inet", "'10.1.2.3/8'::inet", "'2001:db8::1/64'::inet",
             "'::ffff:1.2.3.4'::inet", "'10.0.0.0/8'::cidr::inet"],
    "cidr": ["'10.0.0.0/8'::cidr", "'2001:db8::/32'::cidr", "'192.168.1.5/32'::cidr"],
}
