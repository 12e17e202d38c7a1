"""Dates, times and intervals as PostgreSQL counts them, for the text and binary decoders.

PostgreSQL keeps a date as days and a timestamp as microseconds since 2000-01-01 (UTC
for timestamptz), on the proleptic Gregorian calendar from 4713 BC to years Python's
``datetime`` cannot hold. This module turns those counts (and the ISO text the server
prints for them) into the values pgmux returns, one rule for every path:

* in range: ``date`` / ``datetime`` (timestamptz aware, in UTC) / ``time``;
* ``infinity`` / ``-infinity``: ``date.max`` / ``date.min``, ``datetime.max`` /
  ``datetime.min`` (timestamptz: the same in UTC);
* anything else (BC, years beyond 9999, the time 24:00:00): the text the server prints
  for it in DateStyle ISO (timestamptz: with TimeZone UTC), a ``str``;
* an interval with months: :class:`Interval`; without: ``timedelta``, or an
  ``Interval`` when timedelta cannot hold it; ``infinity`` / ``-infinity``: that ``str``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone

UTC = timezone.utc
USECS_PER_DAY = 86_400_000_000
EPOCH_ORDINAL = date(2000, 1, 1).toordinal()
_MAX_ORDINAL = date.max.toordinal()
DAYS_IN_RANGE = range(1 - EPOCH_ORDINAL, _MAX_ORDINAL - EPOCH_ORDINAL + 1)  # date can hold
EPOCH = datetime(2000, 1, 1)
EPOCH_UTC = datetime(2000, 1, 1, tzinfo=UTC)
ONE_MICROSECOND = timedelta(microseconds=1)
_from_ordinal = date.fromordinal
_time = time

DATE_INFINITY, DATE_MINUS_INFINITY = 2**31 - 1, -(2**31)
TIMESTAMP_INFINITY, TIMESTAMP_MINUS_INFINITY = 2**63 - 1, -(2**63)

_DATE_SPECIAL = {DATE_INFINITY: date.max, DATE_MINUS_INFINITY: date.min}
_TIMESTAMP_SPECIAL = {TIMESTAMP_INFINITY: datetime.max, TIMESTAMP_MINUS_INFINITY: datetime.min}
_TIMESTAMPTZ_SPECIAL = {
    TIMESTAMP_INFINITY: datetime.max.replace(tzinfo=UTC),
    TIMESTAMP_MINUS_INFINITY: datetime.min.replace(tzinfo=UTC),
}
_INTERVAL_SPECIAL = {
    (2**31 - 1, 2**31 - 1, 2**63 - 1): "infinity",
    (-(2**31), -(2**31), -(2**63)): "-infinity",
}  # (months, days, microseconds), PostgreSQL 17+

SPECIAL_DATE_TEXT = {"infinity": date.max, "-infinity": date.min}
SPECIAL_TIMESTAMP_TEXT = {"infinity": datetime.max, "-infinity": datetime.min}
SPECIAL_TIMESTAMPTZ_TEXT = {
    "infinity": _TIMESTAMPTZ_SPECIAL[TIMESTAMP_INFINITY],
    "-infinity": _TIMESTAMPTZ_SPECIAL[TIMESTAMP_MINUS_INFINITY],
}


@dataclass(frozen=True, slots=True)
class Interval:
    """A PostgreSQL interval kept as the server keeps it: months, days and microseconds.

    Decoding returns this only for intervals with months (a month has no fixed length),
    or whose days and microseconds a ``timedelta`` cannot hold; other intervals decode
    to ``datetime.timedelta``.
    """

    months: int = 0
    days: int = 0
    microseconds: int = 0


# -- the calendar ------------------------------------------------------------------------------
# Howard Hinnant's civil-from-days algorithms, exact for any int (years <= 0 are BC: 0 = 1 BC).

_DAYS_0000_03_01_TO_2000_01_01 = 730425


def civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of ``days`` since 2000-01-01; year 0 is 1 BC, -1 is 2 BC."""
    z = days + _DAYS_0000_03_01_TO_2000_01_01
    era, day_of_era = divmod(z, 146097)
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36524
                   - day_of_era // 146096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted_month = (5 * day_of_year + 2) // 153  # 0 = March
    day = day_of_year - (153 * shifted_month + 2) // 5 + 1
    month = shifted_month + 3 if shifted_month < 10 else shifted_month - 9
    return era * 400 + year_of_era + (month <= 2), month, day


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 2000-01-01 of a date (year 0 is 1 BC); the inverse of civil_from_days."""
    year -= month <= 2
    era, year_of_era = divmod(year, 400)
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - _DAYS_0000_03_01_TO_2000_01_01


def weekday(days: int) -> int:
    """0 = Sunday .. 6 = Saturday, of ``days`` since 2000-01-01 (a Saturday)."""
    return (days + 6) % 7


# -- ISO text, as the server prints it -------------------------------------------------------


def year_text(year: int) -> str:
    """The year as printed (at least 4 digits); BC years count from 1 (the " BC" is separate)."""
    return f"{year:04d}" if year > 0 else f"{1 - year:04d}"


def clock_text(micros: int) -> str:
    """HH:MM:SS of microseconds since midnight, with the fraction's trailing zeros trimmed."""
    seconds, fraction = divmod(micros, 1_000_000)
    minutes, sec = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    text = f"{hours:02d}:{minute:02d}:{sec:02d}"
    return text + f".{fraction:06d}".rstrip("0") if fraction else text


def offset_text(seconds_east: int) -> str:
    """A UTC offset as printed: +05, -03:30, +00:09:21."""
    sign = "-" if seconds_east < 0 else "+"
    minutes, sec = divmod(abs(seconds_east), 60)
    hours, minute = divmod(minutes, 60)
    if sec:
        return f"{sign}{hours:02d}:{minute:02d}:{sec:02d}"
    return f"{sign}{hours:02d}:{minute:02d}" if minute else f"{sign}{hours:02d}"


def iso_date_text(days: int) -> str:
    year, month, day = civil_from_days(days)
    return f"{year_text(year)}-{month:02d}-{day:02d}" + (" BC" if year <= 0 else "")


def iso_timestamp_text(micros: int, zone: str = "") -> str:
    """A timestamp's ISO text; ``zone`` (an offset text) goes before the " BC"."""
    days, clock = divmod(micros, USECS_PER_DAY)
    year, month, day = civil_from_days(days)
    text = f"{year_text(year)}-{month:02d}-{day:02d} {clock_text(clock)}{zone}"
    return text + " BC" if year <= 0 else text


# -- counts -> values ----------------------------------------------------------------------------


def date_value(days: int) -> date | str:
    """The decoded value of a date given as days since 2000-01-01."""
    if days in DAYS_IN_RANGE:
        return _from_ordinal(days + EPOCH_ORDINAL)
    return _DATE_SPECIAL.get(days) or iso_date_text(days)


def timestamp_value(micros: int) -> datetime | str:
    """The decoded value of a timestamp given as microseconds since 2000-01-01."""
    try:
        return EPOCH + ONE_MICROSECOND * micros
    except OverflowError:  # infinity, -infinity, or beyond datetime
        return _TIMESTAMP_SPECIAL.get(micros) or iso_timestamp_text(micros)


def timestamptz_value(micros: int) -> datetime | str:
    """The decoded value of a timestamptz given as microseconds since 2000-01-01 UTC."""
    try:
        return EPOCH_UTC + ONE_MICROSECOND * micros
    except OverflowError:  # infinity, -infinity, or beyond datetime
        return _TIMESTAMPTZ_SPECIAL.get(micros) or iso_timestamp_text(micros, "+00")


def time_value(micros: int) -> time | str:
    """time of microseconds since midnight; 24:00:00 gives its text."""
    if micros >= USECS_PER_DAY:
        return clock_text(micros)
    seconds, fraction = divmod(micros, 1_000_000)
    minutes, sec = divmod(seconds, 60)
    return _time(minutes // 60, minutes % 60, sec, fraction)


def timetz_value(micros: int, seconds_east: int) -> time | str:
    """timetz of microseconds since midnight at a UTC offset; 24:00:00 gives its text."""
    if micros >= USECS_PER_DAY:
        return clock_text(micros) + offset_text(seconds_east)
    seconds, fraction = divmod(micros, 1_000_000)
    minutes, sec = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    return time(hours, minute, sec, fraction, zone(seconds_east))


def interval_value(months: int, days: int, micros: int) -> timedelta | Interval | str:
    """The decoded value of an interval given as the server keeps it."""
    if months:
        return _INTERVAL_SPECIAL.get((months, days, micros)) or Interval(months, days, micros)
    try:
        return timedelta(days, 0, micros)
    except OverflowError:
        return Interval(0, days, micros)


_zones: dict[int, timezone] = {0: UTC}


def zone(seconds_east: int) -> timezone:
    """The fixed-offset tzinfo of an offset (shared instances: offsets repeat)."""
    found = _zones.get(seconds_east)
    if found is None:
        found = timezone(timedelta(seconds=seconds_east))
        if len(_zones) < 4096:
            _zones[seconds_east] = found
    return found


# -- ISO text the datetime module cannot read -----------------------------------------------------

_ISO_TIMESTAMP = re.compile(
    r"(\d{4,})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?"
    r"(?:([+-])(\d\d)(?::(\d\d))?(?::(\d\d))?)?( BC)?"
)


def micros_of(year: int, month: int, day: int, hour: int, minute: int, second: int,
              fraction: str | None) -> int:
    """Microseconds since 2000-01-01 of a calendar date and clock (year 0 is 1 BC)."""
    clock = (hour * 3600 + minute * 60 + second) * 1_000_000
    if fraction:
        clock += int(fraction.ljust(6, "0"))
    return days_from_civil(year, month, day) * USECS_PER_DAY + clock


def offset_seconds(sign: str, hours: str, minutes: str | None, seconds: str | None) -> int:
    total = int(hours) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)
    return -total if sign == "-" else total


def parse_iso_timestamp(text: str) -> tuple[int, int | None] | None:
    """(microseconds since 2000-01-01 local, UTC offset in seconds or None) of any ISO
    timestamp text the server prints (BC, 5+ digit years); None if it is not one."""
    match = _ISO_TIMESTAMP.fullmatch(text)
    if match is None:
        return None
    y, mo, d, h, mi, s, frac, sign, oh, om, osec, bc = match.groups()
    year = 1 - int(y) if bc else int(y)
    micros = micros_of(year, int(mo), int(d), int(h), int(mi), int(s), frac)
    return micros, (None if sign is None else offset_seconds(sign, oh, om, osec))
