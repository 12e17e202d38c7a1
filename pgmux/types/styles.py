"""Text decoders for date/time types under any DateStyle, and interval under any IntervalStyle.

pgmux starts every session with ``DateStyle=ISO, MDY`` and ``IntervalStyle=postgres``,
and the decoders in ``pgmux.types.text`` read that. A session can change either; for
the results that must stay in text, ``decoders_for_styles`` gives decoders that read the
style the server reports (ParameterStatus), with the same values as the ISO ones:

* date and timestamp in SQL (``MM/DD/YYYY``, ``DD/MM/YYYY``), German (``DD.MM.YYYY``)
  and Postgres (``Mon Jul 01 12:00:00 2024``) styles: exact;
* timestamptz in those styles shows a zone abbreviation (``CEST``, ``GMT``) instead of
  the UTC offset, and abbreviations do not name offsets (``GMT`` is printed for the
  TimeZone ``GMT-3``), so those decoders raise ``ValueError`` (but read ``infinity``);
* time and timetz print the same in every DateStyle;
* interval in postgres_verbose (``@ 1 year 2 mons ago``), sql_standard (``+1-2 -3
  +4:05:06``) and iso_8601 (``P1Y2M-3DT4H5M6S``): exact.

Values Python cannot hold decode as the ISO decoders decode them (``temporal``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, datetime, timedelta
from typing import Any

from pgmux.types import oids, temporal, text
from pgmux.types.temporal import Interval

Decoder = Callable[[Any], Any]

DATE_STYLES = ("ISO", "SQL", "POSTGRES", "GERMAN")
DATE_ORDERS = ("MDY", "DMY", "YMD")
INTERVAL_STYLES = ("postgres", "postgres_verbose", "sql_standard", "iso_8601")
STYLED_OIDS = (oids.DATE, oids.TIME, oids.TIMETZ, oids.TIMESTAMP, oids.TIMESTAMPTZ,
               oids.INTERVAL)
STYLED_ARRAY_OIDS = (oids.DATE_ARRAY, oids.TIME_ARRAY, oids.TIMETZ_ARRAY, oids.TIMESTAMP_ARRAY,
                     oids.TIMESTAMPTZ_ARRAY, oids.INTERVAL_ARRAY)


def parse_datestyle(datestyle: str) -> tuple[str, str]:
    """("SQL", "DMY") of a DateStyle as the server reports it ("SQL, DMY"); ValueError else."""
    words = [word.upper() for word in re.split(r"[\s,]+", datestyle.strip()) if word]
    styles = [word for word in words if word in DATE_STYLES]
    orders = [word for word in words if word in DATE_ORDERS]
    if len(styles) != 1 or len(orders) > 1 or len(words) != len(styles) + len(orders):
        raise ValueError(f"unknown DateStyle {datestyle!r}")
    return styles[0], (orders[0] if orders else "MDY")


def decoders_for_styles(datestyle: str, intervalstyle: str) -> dict[int, Decoder]:
    """Text decoders of date, time, timetz, timestamp, timestamptz and interval (scalars only)
    that read output in these styles; ISO and postgres give the decoders of ``text``."""
    style, order = parse_datestyle(datestyle)
    interval = _INTERVAL_DECODERS.get(intervalstyle.strip().lower())
    if interval is None:
        raise ValueError(f"unknown IntervalStyle {intervalstyle!r}")
    decoders = {oids.TIME: text.decode_time, oids.TIMETZ: text.decode_time,
                oids.INTERVAL: interval}
    if style == "ISO":
        decoders.update({oids.DATE: text.decode_date, oids.TIMESTAMP: text.decode_timestamp,
                         oids.TIMESTAMPTZ: text.decode_timestamptz})
    else:
        day_first = order == "DMY" or style == "GERMAN"
        decoders[oids.DATE] = _date_decoder(style, day_first)
        decoders[oids.TIMESTAMP] = _timestamp_decoder(style, day_first)
        decoders[oids.TIMESTAMPTZ] = _timestamptz_refuser(datestyle)
    return decoders


# -- dates and timestamps --------------------------------------------------------------------

_SEPARATORS = {"SQL": "/", "GERMAN": r"\.", "POSTGRES": "-"}
_CLOCK = r"(?P<hour>\d\d):(?P<minute>\d\d):(?P<second>\d\d)(?:\.(?P<fraction>\d{1,6}))?"
_YEAR = r"(?P<year>\d{4,})"
_BC = "(?P<bc> BC)?"
_MONTHS = {name: number for number, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}


def _date_pattern(style: str, day_first: bool) -> str:
    """06/30/2024 (SQL), 30.06.2024 (German), 06-30-2024 (Postgres); day first for DMY."""
    day, month, separator = r"(?P<day>\d\d)", r"(?P<month>\d\d)", _SEPARATORS[style]
    first, second = (day, month) if day_first else (month, day)
    return f"{first}{separator}{second}{separator}{_YEAR}"


def _timestamp_pattern(style: str, day_first: bool) -> str:
    """The date then the clock; Postgres: "Sun Jun 30 12:00:00.5 2024" ("Sun 30 Jun" DMY)."""
    if style != "POSTGRES":
        return f"{_date_pattern(style, day_first)} {_CLOCK}"
    day, month = r"(?P<day>\d\d)", r"(?P<month>[A-Z][a-z]{2})"
    day_month = f"{day} {month}" if day_first else f"{month} {day}"
    return rf"[A-Z][a-z]{{2}} {day_month} {_CLOCK} {_YEAR}"


def _year(match: re.Match[str]) -> int:
    digits = int(match["year"])
    return 1 - digits if match["bc"] else digits


def _month(match: re.Match[str]) -> int:
    month = match["month"]
    return _MONTHS[month] if month in _MONTHS else int(month)


def _parsing_decoder(pattern: str, specials: dict[str, Any],
                     value_of: Callable[[re.Match[str]], Any]) -> Decoder:
    """A decoder reading text that fully matches ``pattern``; other text: a special or itself."""
    regex = re.compile(pattern)

    def decode(data: Any) -> Any:
        value = str(data, "ascii")
        match = regex.fullmatch(value)
        if match is None:
            return specials.get(value, value)
        return value_of(match)

    return decode


def _date_of(match: re.Match[str]) -> date | str:
    return temporal.date_value(
        temporal.days_from_civil(_year(match), _month(match), int(match["day"])))


def _timestamp_of(match: re.Match[str]) -> datetime | str:
    return temporal.timestamp_value(temporal.micros_of(
        _year(match), _month(match), int(match["day"]), int(match["hour"]),
        int(match["minute"]), int(match["second"]), match["fraction"]))


def _date_decoder(style: str, day_first: bool) -> Decoder:
    return _parsing_decoder(_date_pattern(style, day_first) + _BC,
                            temporal.SPECIAL_DATE_TEXT, _date_of)


def _timestamp_decoder(style: str, day_first: bool) -> Decoder:
    return _parsing_decoder(_timestamp_pattern(style, day_first) + _BC,
                            temporal.SPECIAL_TIMESTAMP_TEXT, _timestamp_of)


def _timestamptz_refuser(datestyle: str) -> Decoder:
    message = (f"timestamptz text in DateStyle {datestyle!r} shows a time zone abbreviation, "
               f"not the UTC offset, so the instant is unknown; use DateStyle ISO")

    def decode_timestamptz(data: Any) -> datetime:
        special = temporal.SPECIAL_TIMESTAMPTZ_TEXT.get(str(data, "ascii"))
        if special is None:
            raise ValueError(message)
        return special

    return decode_timestamptz


# -- intervals ---------------------------------------------------------------------------------

_SECONDS = r"(\d+)(?:\.(\d{1,6}))?"  # unsigned seconds and fraction


def _clock_micros(hours: str | None, minutes: str | None, negative_seconds: bool,
                  seconds: str | None, fraction: str | None) -> int:
    """Microseconds of signed hours and minutes and unsigned seconds with their own sign."""
    micros = int(seconds or 0) * 1_000_000 + (int(fraction.ljust(6, "0")) if fraction else 0)
    clock = (int(hours or 0) * 3600 + int(minutes or 0) * 60) * 1_000_000
    return clock - micros if negative_seconds else clock + micros


def _interval_decoder(pattern: str,
                      fields: Callable[[re.Match[str]], tuple[int, int, int]]) -> Decoder:
    """Text that does not match (infinity, -infinity) decodes to itself, as in ISO."""
    return _parsing_decoder(pattern, {}, lambda match: temporal.interval_value(*fields(match)))


_VERBOSE = (
    r"@(?: (-?\d+) years?)?(?: (-?\d+) mons?)?(?: (-?\d+) days?)?(?: (-?\d+) hours?)?"
    rf"(?: (-?\d+) mins?)?(?: (-?){_SECONDS} secs?)?( 0)?( ago)?"
)


def _verbose_fields(match: re.Match[str]) -> tuple[int, int, int]:
    """Each field printed with its own sign; "ago" negates them all."""
    years, mons, days, hours, mins, sec_sign, secs, fraction, _zero, ago = match.groups()
    micros = _clock_micros(hours, mins, bool(sec_sign), secs, fraction)
    months, day_count = int(years or 0) * 12 + int(mons or 0), int(days or 0)
    if ago:
        return -months, -day_count, -micros
    return months, day_count, micros


_SQL_STANDARD_MIXED = rf"([+-])(\d+)-(\d+) ([+-])(\d+) ([+-])(\d+):(\d\d):{_SECONDS}"
_SQL_STANDARD = rf"(-?)(?:(\d+)-(\d+)|(?:(\d+) )?(\d+):(\d\d):{_SECONDS}|(0))"


def _sql_standard_fields(match: re.Match[str]) -> tuple[int, int, int]:
    """One sign for the whole value, "Y-M" or "[D ]H:MM:SS" (the zero is "0")."""
    sign, years, mons, days, hours, mins, secs, fraction, _zero = match.groups()
    micros = _clock_micros(hours, mins, False, secs, fraction)
    months, day_count = int(years or 0) * 12 + int(mons or 0), int(days or 0)
    if sign:
        return -months, -day_count, -micros
    return months, day_count, micros


def _sql_standard_mixed_fields(match: re.Match[str]) -> tuple[int, int, int]:
    """Mixed signs: "+Y-M +D +H:MM:SS", each group with its sign."""
    ym_sign, years, mons, day_sign, days, time_sign, hours, mins, secs, fraction = match.groups()
    months = int(years) * 12 + int(mons)
    micros = _clock_micros(hours, mins, False, secs, fraction)
    return (-months if ym_sign == "-" else months, -int(days) if day_sign == "-" else int(days),
            -micros if time_sign == "-" else micros)


_decode_sql_standard_mixed = _interval_decoder(_SQL_STANDARD_MIXED, _sql_standard_mixed_fields)
_decode_sql_standard_plain = _interval_decoder(_SQL_STANDARD, _sql_standard_fields)


def _decode_sql_standard(data: Any) -> timedelta | Interval | str:
    """Mixed signs print all three groups ("+1-2 -3 +4:05:06"): two blanks; the rest fewer."""
    if bytes(data).count(b" ") == 2:
        return _decode_sql_standard_mixed(data)
    return _decode_sql_standard_plain(data)


_ISO_8601 = (
    r"P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)D)?"
    rf"(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?){_SECONDS}S)?)?"
)


def _iso_8601_fields(match: re.Match[str]) -> tuple[int, int, int]:
    years, mons, days, hours, mins, sec_sign, secs, fraction = match.groups()
    micros = _clock_micros(hours, mins, bool(sec_sign), secs, fraction)
    return int(years or 0) * 12 + int(mons or 0), int(days or 0), micros


_INTERVAL_DECODERS: dict[str, Decoder] = {
    "postgres": text.decode_interval,
    "postgres_verbose": _interval_decoder(_VERBOSE, _verbose_fields),
    "sql_standard": _decode_sql_standard,
    "iso_8601": _interval_decoder(_ISO_8601, _iso_8601_fields),
}
