"""Text-format codecs: the server's output text -> Python values, and Python values -> input text.

Decoders take the column bytes exactly as a DataRow carries them (``bytes``, or a
``memoryview`` for a large value) and assume the session settings pgmux always
makes: ``client_encoding=UTF8``, ``DateStyle=ISO, MDY``, ``IntervalStyle=postgres``,
``bytea_output=hex`` (the ``escape`` output is understood too).

Values Python cannot represent are never an error:

* timestamptz decodes to an aware ``datetime`` in UTC, whatever the session's TimeZone
  (the offset the server printed is applied), so every path gives the same value.
* ``infinity`` / ``-infinity`` of date, timestamp and timestamptz decode to
  ``date.max`` / ``date.min``, ``datetime.max`` / ``datetime.min`` (timestamptz: the
  same in UTC, so they compare with other aware values). The mapping is one way:
  ``date.max`` is sent as ``9999-12-31``, not ``infinity``; send the string
  ``"infinity"`` for that.
* dates and timestamps outside the years 1..9999 (BC, or beyond 9999) and the time
  ``24:00:00`` decode to the server's text, a ``str`` (timestamptz: the text in UTC,
  as the server prints it under TimeZone UTC).
* an interval with months decodes to :class:`Interval`, without months to a
  ``timedelta`` (or an :class:`Interval` when timedelta cannot hold it); text in
  another IntervalStyle decodes to ``str`` (``pgmux.types.styles`` reads the others).

``pgmux.types.temporal`` holds these rules; the binary decoders follow them too.

Text encoders ("dumpers") take a Python value and return ``(type oid, text)``; the
array and COPY encoders and most parameters are built on them.
"""

from __future__ import annotations

import binascii
import json
import re
import sys
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from ipaddress import ip_address, ip_interface, ip_network
from typing import Any
from uuid import UUID

from pgmux.errors import InterfaceError
from pgmux.types import oids, temporal
from pgmux.types.temporal import Interval

Decoder = Callable[[Any], Any]  # bytes | memoryview -> value
Dumper = Callable[[Any], "tuple[int, str]"]  # value -> (type oid, text)
ParamEncoder = Callable[[Any], "tuple[int, int, bytes | None]"]  # value -> (oid, format, data)


# -- values that have no exact Python builtin ------------------------------------------------


class Json:
    """Wrap a JSON-able Python value to send it as a parameter of type jsonb.

    jsonb, not json: jsonb has the operators people use in parameters (``@>``, ``?``,
    ``||``), and the jsonb -> json assignment cast still stores it into json columns
    (normalised by jsonb: key order, whitespace and duplicate keys are not kept). Use
    ``$1::json`` where a function wants json. ``dumps`` replaces ``json.dumps``.
    """

    __slots__ = ("value", "dumps")

    def __init__(self, value: Any, dumps: Callable[[Any], str] | None = None) -> None:
        self.value = value
        self.dumps = dumps

    def text(self) -> str:
        """The JSON text of the wrapped value."""
        return (self.dumps or json.dumps)(self.value)

    def __eq__(self, other: object) -> bool:
        return type(other) is Json and other.value == self.value and other.dumps == self.dumps

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Json({self.value!r})"


# -- decoders --------------------------------------------------------------------------------


def decode_str(data: Any) -> str:
    """text, varchar, bpchar, name, unknown and every type without a decoder."""
    return str(data, "utf-8")


decode_bool: Decoder = {b"t": True, b"f": False}.__getitem__
decode_int: Decoder = int  # int(b"-42") parses bytes directly
decode_float: Decoder = float  # also NaN, Infinity, -Infinity


def decode_numeric(data: Any) -> Decimal:
    """numeric, including NaN, Infinity and -Infinity."""
    return Decimal(str(data, "ascii"))


_BYTEA_ESCAPE = re.compile(rb"\\(\\|[0-3][0-7]{2})")


def _unescape_byte(match: re.Match[bytes]) -> bytes:
    code = match.group(1)
    return b"\\" if code == b"\\" else bytes((int(code, 8),))


def decode_bytea(data: Any) -> bytes:
    """bytea in the hex output (``\\x00ff``) or the escape output (``\\000\\377``)."""
    if data[:2] == b"\\x":
        return binascii.unhexlify(data[2:])
    return _BYTEA_ESCAPE.sub(_unescape_byte, bytes(data))


def decode_uuid(data: Any) -> UUID:
    return UUID(str(data, "ascii"))


def decode_json(data: Any) -> Any:
    """json and jsonb."""
    return json.loads(str(data, "utf-8"))


def decode_inet(data: Any) -> Any:
    """inet: an ip_interface when the server printed a prefix, else an ip_address."""
    text = str(data, "ascii")
    return ip_interface(text) if "/" in text else ip_address(text)


def decode_cidr(data: Any) -> Any:
    return ip_network(str(data, "ascii"))


# Dates and times. Python 3.11's fromisoformat reads every in-range ISO form the server
# prints (short fractions, "+05", "+05:53:28" offsets); 3.10 needs the regex parser below.

_DT_TEXT = re.compile(
    r"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?"
    r"(?:([+-])(\d\d)(?::(\d\d))?(?::(\d\d))?)?"
)
_TIME_TEXT = re.compile(
    r"(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?(?:([+-])(\d\d)(?::(\d\d))?(?::(\d\d))?)?"
)


def _micros(fraction: str | None) -> int:
    return int(fraction.ljust(6, "0")) if fraction else 0


def _offset(sign: str | None, hours: str, minutes: str | None,
            seconds: str | None) -> timezone | None:
    if sign is None:
        return None
    total = int(hours) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)
    return timezone(timedelta(seconds=-total if sign == "-" else total))


def parse_datetime_text(text: str) -> datetime:
    """Parse the server's ISO timestamp text; ValueError for what datetime cannot hold."""
    match = _DT_TEXT.fullmatch(text)
    if match is None:
        raise ValueError(f"not an ISO timestamp: {text!r}")
    y, mo, d, h, mi, s, frac, sign, oh, om, osec = match.groups()
    tz = _offset(sign, oh, om, osec)
    return datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), _micros(frac), tz)


def parse_time_text(text: str) -> time:
    """Parse the server's ISO time / timetz text; ValueError for what time cannot hold."""
    match = _TIME_TEXT.fullmatch(text)
    if match is None:
        raise ValueError(f"not an ISO time: {text!r}")
    h, mi, s, frac, sign, oh, om, osec = match.groups()
    return time(int(h), int(mi), int(s), _micros(frac), _offset(sign, oh, om, osec))


if sys.version_info >= (3, 11):
    _parse_datetime: Callable[[str], datetime] = datetime.fromisoformat
    _parse_time: Callable[[str], time] = time.fromisoformat
else:  # pragma: no cover - exercised through the parse_*_text tests
    _parse_datetime = parse_datetime_text
    _parse_time = parse_time_text

_DATE_SPECIAL = temporal.SPECIAL_DATE_TEXT
_TIMESTAMP_SPECIAL = temporal.SPECIAL_TIMESTAMP_TEXT
_TIMESTAMPTZ_SPECIAL = temporal.SPECIAL_TIMESTAMPTZ_TEXT
_UTC = timezone.utc


def decode_date(data: Any) -> date | str:
    text = str(data, "ascii")
    try:
        return date.fromisoformat(text)
    except ValueError:
        return _DATE_SPECIAL.get(text, text)


def decode_timestamp(data: Any) -> datetime | str:
    text = str(data, "ascii")
    try:
        return _parse_datetime(text)
    except ValueError:
        return _TIMESTAMP_SPECIAL.get(text, text)


def decode_timestamptz(data: Any) -> datetime | str:
    """timestamptz: aware, in UTC (the offset the server printed for its TimeZone applied)."""
    text = str(data, "ascii")
    try:
        value = _parse_datetime(text)
    except ValueError:
        return _timestamptz_beyond_datetime(text)
    if value.tzinfo is _UTC or value.tzinfo is None:
        return value
    try:
        return value.astimezone(_UTC)
    except OverflowError:  # in range locally, not in UTC (0001-01-01 00:00:00+01)
        return _timestamptz_beyond_datetime(text)


def _timestamptz_beyond_datetime(text: str) -> datetime | str:
    """infinity, BC or a year beyond 9999 (here or in UTC): as the binary decoder gives it."""
    micros, offset = temporal.parse_iso_timestamp(text) or (0, None)
    if offset is None:
        return _TIMESTAMPTZ_SPECIAL.get(text, text)
    return temporal.timestamptz_value(micros - offset * 1_000_000)


def decode_time(data: Any) -> time | str:
    """time and timetz; ``24:00:00`` decodes to the string."""
    text = str(data, "ascii")
    try:
        return _parse_time(text)
    except ValueError:
        return text


_INTERVAL_TEXT = re.compile(
    rb"(?:([+-]?\d+) years? ?)?(?:([+-]?\d+) mons? ?)?(?:([+-]?\d+) days? ?)?"
    rb"(?:([+-]?)(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?)?"
)


def decode_interval(data: Any) -> timedelta | Interval | str:
    """interval in IntervalStyle postgres, e.g. ``1 year 2 mons -3 days +04:05:06.789``."""
    match = _INTERVAL_TEXT.fullmatch(data)
    if match is None or not data:
        return str(data, "ascii")
    years, mons, days, sign, h, mi, s, frac = match.groups()
    months = int(years or 0) * 12 + int(mons or 0)
    day_count = int(days or 0)
    micros = 0
    if h is not None:
        micros = (int(h) * 3600 + int(mi) * 60 + int(s)) * 1_000_000
        micros += int(frac.ljust(6, b"0")) if frac else 0
        if sign == b"-":
            micros = -micros
    return temporal.interval_value(months, day_count, micros)


# -- dumpers: value -> (oid, input text) -----------------------------------------------------

_INT4_MIN, _INT4_MAX = -(2**31), 2**31 - 1
_INT8_MIN, _INT8_MAX = -(2**63), 2**63 - 1


def int_oid(value: int) -> int:
    """int4 if it fits, else int8 if it fits, else numeric."""
    if _INT4_MIN <= value <= _INT4_MAX:
        return oids.INT4
    return oids.INT8 if _INT8_MIN <= value <= _INT8_MAX else oids.NUMERIC


def dump_int(value: int) -> tuple[int, str]:
    return int_oid(value), int.__repr__(value)  # not str(): an IntEnum str()s as its name on 3.10


def dump_bool(value: bool) -> tuple[int, str]:
    return oids.BOOL, "t" if value else "f"


_FLOAT_SPECIAL = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def dump_float(value: float) -> tuple[int, str]:
    text = float.__repr__(value)  # shortest text that reads back to the same double
    return oids.FLOAT8, _FLOAT_SPECIAL.get(text, text)


def dump_decimal(value: Decimal) -> tuple[int, str]:
    if value.is_finite():
        return oids.NUMERIC, str(value)
    if value.is_nan():  # NaN, -NaN, sNaN: the server has one NaN
        return oids.NUMERIC, "NaN"
    return oids.NUMERIC, "-Infinity" if value.is_signed() else "Infinity"


def dump_str(value: str) -> tuple[int, str]:
    """str inside arrays and COPY; a str parameter alone is sent as unknown (see param_str)."""
    return oids.TEXT, value


def dump_bytes(value: Any) -> tuple[int, str]:
    return oids.BYTEA, "\\x" + value.hex()


def dump_date(value: date) -> tuple[int, str]:
    return oids.DATE, date.isoformat(value)


def dump_datetime(value: datetime) -> tuple[int, str]:
    """Naive -> timestamp, aware -> timestamptz."""
    text = datetime.isoformat(value, " ")
    if value.tzinfo is None or value.utcoffset() is None:
        return oids.TIMESTAMP, text
    return oids.TIMESTAMPTZ, text


def dump_time(value: time) -> tuple[int, str]:
    """Naive -> time, aware -> timetz."""
    text = time.isoformat(value)
    if value.tzinfo is None or value.utcoffset() is None:
        return oids.TIME, text
    return oids.TIMETZ, text


def format_interval(months: int, days: int, microseconds: int) -> str:
    """Interval input text the server reads back exactly: ``1 mons -2 days -03:04:05.000006``."""
    sign = "-" if microseconds < 0 else ""
    seconds, micros = divmod(abs(microseconds), 1_000_000)
    minutes, secs = divmod(seconds, 60)
    hours, mins = divmod(minutes, 60)
    clock = f"{sign}{hours:02d}:{mins:02d}:{secs:02d}.{micros:06d}"
    parts = (f"{months} mons " if months else "") + (f"{days} days " if days else "")
    return parts + clock


def dump_timedelta(value: timedelta) -> tuple[int, str]:
    """A negative timedelta is sent with every part negative (-1 hour, not -1 day +23 hours)."""
    size = abs(value)
    micros = size.seconds * 1_000_000 + size.microseconds
    if value < timedelta(0):
        return oids.INTERVAL, format_interval(0, -size.days, -micros)
    return oids.INTERVAL, format_interval(0, size.days, micros)


def dump_interval(value: Interval) -> tuple[int, str]:
    return oids.INTERVAL, format_interval(value.months, value.days, value.microseconds)


def dump_uuid(value: UUID) -> tuple[int, str]:
    return oids.UUID, str(value)


def dump_inet(value: Any) -> tuple[int, str]:
    """IPv4/IPv6 addresses and interfaces -> inet."""
    return oids.INET, str(value)


def dump_cidr(value: Any) -> tuple[int, str]:
    """IPv4/IPv6 networks -> cidr."""
    return oids.CIDR, str(value)


def dump_json(value: Json) -> tuple[int, str]:
    return oids.JSONB, value.text()


# -- text parameter encoders -----------------------------------------------------------------

_NUL_MESSAGE = "a str parameter contains a NUL character (\\x00), which PostgreSQL text cannot hold"


def param_str(value: str) -> tuple[int, int, bytes]:
    """A str goes as type unknown (OID 0): the server infers the type from the context."""
    if "\x00" in value:
        raise InterfaceError(_NUL_MESSAGE)
    return 0, 0, value.encode()


def param_int(value: int) -> tuple[int, int, bytes]:
    if _INT4_MIN <= value <= _INT4_MAX:
        return oids.INT4, 0, b"%d" % value
    return int_oid(value), 0, b"%d" % value


def param_from_dumper(dump: Dumper) -> ParamEncoder:
    """A text-format parameter encoder built on a dumper whose output is NUL-free."""

    def encode(value: Any) -> tuple[int, int, bytes]:
        oid, text = dump(value)
        return oid, 0, text.encode()

    return encode


def checked_param_from_dumper(dump: Dumper) -> ParamEncoder:
    """Like param_from_dumper, for user dumpers: refuses NUL in their text."""

    def encode(value: Any) -> tuple[int, int, bytes]:
        oid, text = dump(value)
        if "\x00" in text:
            raise InterfaceError(f"the text of a {type(value).__name__} parameter contains NUL")
        return oid, 0, text.encode()

    return encode
