"""Text forms of PostgreSQL values read as psycopg2 reads them (the built-in typecasters'
parsers): dates and times with infinity, intervals as timedelta, bytea, arrays."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

from pgmux.psycopg2._exceptions import DataError

_TIME = re.compile(r"(\d+):(\d+):(\d+)(?:\.(\d+))?(?:([-+])(\d+)(?::(\d+)(?::(\d+))?)?)?$")
_DATE = re.compile(r"(\d+)-(\d+)-(\d+)( BC)?$")
_INTERVAL_PART = re.compile(r"([-+]?\d+) (year|mon|day)s?")
_DIGITS = re.compile(r"-?\d+")
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
        raise ValueError(f"date out of range: {text!r} (years BC have no Python date)")
    return dt.date(int(match.group(1)), int(match.group(2)), int(match.group(3)))


def _micro(fraction: str | None) -> int:
    if not fraction:
        return 0
    if len(fraction) > 9:
        raise OverflowError(f"fractional seconds too long: {fraction!r}")
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
    if time_text.endswith(" BC"):
        raise ValueError(f"timestamp out of range: {text!r} (years BC have no Python date)")
    day = parse_date(date_text)
    if not time_text:
        raise DataError(f"bad datetime representation: {text!r}")
    clock, offset = parse_time_parts(time_text)
    value = dt.datetime.combine(day, clock)
    if offset is not None and tzinfo_factory is not None:
        return value.replace(tzinfo=tzinfo_factory(offset))
    return value


def parse_interval(text: str) -> dt.timedelta:
    if text.lstrip("-").startswith("P"):
        from pgmux.psycopg2._exceptions import NotSupportedError

        raise NotSupportedError("iso_8601 intervalstyle currently not supported")
    if _DIGITS.fullmatch(text):  # some servers (Redshift) send microseconds
        return dt.timedelta(microseconds=int(text))
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


def parse_bytea(text: str) -> memoryview[bytes]:
    if text.startswith("\\x"):
        return memoryview(bytes.fromhex(text[2:])).cast("c")
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
    return memoryview(bytes(out)).cast("c")


def parse_bool(text: str) -> bool:
    return text[:1] in ("t", "T", "y", "1") or text.lower() in ("true", "on")


_MAX_DIMENSIONS = 16


def parse_array(text: str, cast: Callable[[str | None], Any], delimiter: str = ",") -> list[Any]:
    """An array's text: nested lists of ``cast(element text)`` (``cast(None)`` for NULL)."""
    if text.startswith("["):  # explicit bounds: "[0:1]={...}"
        text = text[text.index("=") + 1:]
    if not text.startswith("{"):
        raise DataError(f"malformed array literal: {text!r}")
    try:
        value, end = _parse_level(text, 1, cast, delimiter, 1)
    except IndexError:
        raise DataError(f"malformed array literal: {text!r}") from None
    if text[end:].strip():
        raise DataError(f"malformed array literal: {text!r}")
    return value


def _parse_level(text: str, i: int, cast: Callable[[str | None], Any],
                 delimiter: str, depth: int) -> tuple[list[Any], int]:
    if depth > _MAX_DIMENSIONS:
        raise DataError(f"array with more than {_MAX_DIMENSIONS} dimensions")
    out: list[Any] = []
    size = len(text)
    while i < size:
        char = text[i]
        if char == "}":
            return out, i + 1
        if char == delimiter or char in " \t\n":
            i += 1
        elif char == "{":
            nested, i = _parse_level(text, i + 1, cast, delimiter, depth + 1)
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
            out.append(cast(None) if token == "NULL" else cast(token))
    raise DataError(f"malformed array literal: {text!r}")


def parse_hstore(text: str) -> dict[str, str | None]:
    """An hstore's text (``"k"=>"v", "k2"=>NULL``, blanks anywhere between) as a dict."""
    out: dict[str, str | None] = {}
    i, size = 0, len(text)

    def skip(i: int) -> int:
        while i < size and text[i] in " \t\n\r":
            i += 1
        return i

    def quoted(i: int) -> tuple[str, int]:
        if text[i] != '"':
            raise ValueError(f"a quoted string was expected at char {i}")
        buf, i = [], i + 1
        while text[i] != '"':
            if text[i] == "\\":
                i += 1
            buf.append(text[i])
            i += 1
        return "".join(buf), i + 1

    i = skip(i)
    while i < size:
        key, i = quoted(i)
        i = skip(i)
        if text[i:i + 2] != "=>":
            raise ValueError(f"'=>' was expected at char {i}")
        i = skip(i + 2)
        if text[i:i + 4] == "NULL":
            value, i = None, i + 4
        else:
            value, i = quoted(i)
        out[key] = value
        i = skip(i)
        if i < size:
            if text[i] != ",":
                raise ValueError(f"',' was expected at char {i}")
            i = skip(i + 1)
    return out
