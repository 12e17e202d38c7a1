"""Text forms of PostgreSQL values read as psycopg2 reads them (the built-in typecasters'
parsers): dates and times with infinity, intervals as timedelta, bytea, arrays."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

from pgmux.psycopg2._exceptions import DataError

_TIME = re.compile(r"(\d+):(\d+)(?::(\d+)(?:\.(\d+))?)?(?:([-+])(\d+)(?::(\d+)(?::(\d+))?)?)?$")
_DATE = re.compile(r"(\d+)-(\d+)-(\d+)( BC)?$")
_INTERVAL_PART = re.compile(r"([-+]?\d+) (year|mon|day)s?")
_INTERVAL_TIME = re.compile(r"([-+])?(\d+):(\d+):(\d+)(?:\.(\d+))?")


def parse_date(text: str) -> dt.date:
    if text == "infinity":
        return dt.date.max
    if text == "-infinity":
        return dt.date.min
    match = _DATE.match(text)
    if match is None:
        raise DataError(f"bad datetime representation: {text!r}")
    if match.group(4):
        raise DataError(f"date out of range: {text!r} (years BC have no Python date)")
    try:
        return dt.date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError as exc:
        raise DataError(f"date out of range: {text!r}: {exc}") from None


def _micro(fraction: str | None) -> int:
    if not fraction:
        return 0
    return int((fraction + "000000")[:6])


def _offset(sign: str | None, hours: str | None, minutes: str | None,
            seconds: str | None) -> dt.timedelta | None:
    if sign is None:
        return None
    delta = dt.timedelta(hours=int(hours or 0), minutes=int(minutes or 0),
                         seconds=int(seconds or 0))
    return -delta if sign == "-" else delta


def parse_time_parts(text: str) -> tuple[dt.time, dt.timedelta | None]:
    match = _TIME.match(text)
    if match is None:
        raise DataError(f"bad time representation: {text!r}")
    hour, minute, second = int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
    micro = _micro(match.group(4))
    offset = _offset(match.group(5), match.group(6), match.group(7), match.group(8))
    if hour == 24:
        hour = 0
    return dt.time(hour, minute, second, micro), offset


def parse_time(text: str, tzinfo_factory: Any = dt.timezone) -> dt.time:
    value, offset = parse_time_parts(text)
    if offset is not None and tzinfo_factory is not None:
        return value.replace(tzinfo=tzinfo_factory(offset))
    return value


def parse_timestamp(text: str, tzinfo_factory: Any = dt.timezone,
                    aware: bool = False) -> dt.datetime:
    if text in ("infinity", "-infinity"):
        value = dt.datetime.max if text == "infinity" else dt.datetime.min
        if aware and tzinfo_factory is not None:
            return value.replace(tzinfo=tzinfo_factory(dt.timedelta(0)))
        return value
    date_text, _, time_text = text.partition(" ")
    bc = time_text.endswith(" BC")
    if bc:
        raise DataError(f"timestamp out of range: {text!r} (years BC have no Python date)")
    day = parse_date(date_text)
    clock, offset = parse_time_parts(time_text) if time_text else (dt.time(), None)
    value = dt.datetime.combine(day, clock)
    if offset is not None and tzinfo_factory is not None:
        return value.replace(tzinfo=tzinfo_factory(offset))
    return value


def parse_interval(text: str) -> dt.timedelta:
    days = 0
    for number, unit in _INTERVAL_PART.findall(text):
        count = int(number)
        days += count * (365 if unit == "year" else 30 if unit == "mon" else 1)
    seconds, micro = 0, 0
    match = _INTERVAL_TIME.search(text)
    if match is not None:
        seconds = int(match.group(2)) * 3600 + int(match.group(3)) * 60 + int(match.group(4))
        micro = _micro(match.group(5))
        if match.group(1) == "-":
            seconds, micro = -seconds, -micro
    return dt.timedelta(days=days, seconds=seconds, microseconds=micro)


def parse_bytea(text: str) -> memoryview:
    if text.startswith("\\x"):
        return memoryview(bytes.fromhex(text[2:]))
    out = bytearray()
    i, size = 0, len(text)
    while i < size:
        char = text[i]
        if char != "\\":
            out += char.encode("latin-1")
            i += 1
        elif text[i + 1:i + 2] == "\\":
            out.append(0x5C)
            i += 2
        else:
            out.append(int(text[i + 1:i + 4], 8))
            i += 4
    return memoryview(bytes(out))


def parse_bool(text: str) -> bool:
    return text[:1] in ("t", "T", "y", "1") or text.lower() in ("true", "on")


def parse_array(text: str, cast: Callable[[str | None], Any], delimiter: str = ",") -> list[Any]:
    """An array's text: nested lists of ``cast(element text)`` (None for NULL)."""
    if text.startswith("["):  # explicit bounds: "[0:1]={...}"
        text = text[text.index("=") + 1:]
    if not text.startswith("{"):
        raise DataError(f"malformed array literal: {text!r}")
    value, end = _parse_level(text, 1, cast, delimiter)
    return value


def _parse_level(text: str, i: int, cast: Callable[[str | None], Any],
                 delimiter: str) -> tuple[list[Any], int]:
    out: list[Any] = []
    size = len(text)
    while i < size:
        char = text[i]
        if char == "}":
            return out, i + 1
        if char == delimiter or char in " \t\n":
            i += 1
        elif char == "{":
            nested, i = _parse_level(text, i + 1, cast, delimiter)
            out.append(nested)
        elif char == '"':
            buf = []
            i += 1
            while text[i] != '"':
                if text[i] == "\\":
                    i += 1
                buf.append(text[i])
                i += 1
            out.append(cast("".join(buf)))
            i += 1
        else:
            start = i
            while i < size and text[i] != delimiter and text[i] != "}":
                i += 1
            token = text[start:i].strip()
            out.append(None if token == "NULL" else cast(token))
    raise DataError(f"malformed array literal: {text!r}")
