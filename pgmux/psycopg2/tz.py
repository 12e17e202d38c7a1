"""psycopg2.tz: ``FixedOffsetTimezone`` and ``LocalTimezone`` (tzinfo classes)."""

from __future__ import annotations

import datetime
import time
from typing import Any

ZERO = datetime.timedelta(0)


class FixedOffsetTimezone(datetime.tzinfo):
    """A zone at a fixed ``offset`` from UTC (a timedelta or minutes east) named ``name``;
    instances with the same arguments are one object."""

    _name: str | None = None
    _offset = ZERO
    _cache: dict[Any, FixedOffsetTimezone] = {}

    def __init__(self, offset: Any = None, name: Any = None) -> None:
        if offset is not None:
            if not isinstance(offset, datetime.timedelta):
                offset = datetime.timedelta(minutes=offset)
            self._offset = offset
        if name is not None:
            self._name = name

    def __new__(cls, offset: Any = None, name: Any = None) -> FixedOffsetTimezone:
        key = (offset, name)
        try:
            return cls._cache[key]
        except KeyError:
            tz = super().__new__(cls)
            cls._cache[key] = tz
            return tz

    def __repr__(self) -> str:
        return (f"psycopg2.tz.FixedOffsetTimezone(offset={self._offset!r}, "
                f"name={self._name!r})")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FixedOffsetTimezone):
            return self._offset == other._offset
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        if isinstance(other, FixedOffsetTimezone):
            return self._offset != other._offset
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._offset)

    def __getinitargs__(self) -> tuple[Any, Any]:
        return self._offset, self._name

    def utcoffset(self, dt: Any) -> datetime.timedelta:
        return self._offset

    def tzname(self, dt: Any) -> str:
        if self._name is not None:
            return self._name
        minutes, seconds = divmod(self._offset.total_seconds(), 60)
        hours, minutes = divmod(minutes, 60)
        rv = f"{int(hours):+03d}"
        if minutes or seconds:
            rv += f":{int(minutes):02d}"
            if seconds:
                rv += f":{int(seconds):02d}"
        return rv

    def dst(self, dt: Any) -> datetime.timedelta:
        return ZERO


STDOFFSET = datetime.timedelta(seconds=-time.timezone)
DSTOFFSET = datetime.timedelta(seconds=-time.altzone) if time.daylight else STDOFFSET
DSTDIFF = DSTOFFSET - STDOFFSET


class LocalTimezone(datetime.tzinfo):
    """The platform's local time zone."""

    def utcoffset(self, dt: Any) -> datetime.timedelta:
        return DSTOFFSET if self._isdst(dt) else STDOFFSET

    def dst(self, dt: Any) -> datetime.timedelta:
        return DSTDIFF if self._isdst(dt) else ZERO

    def tzname(self, dt: Any) -> str:
        return time.tzname[self._isdst(dt)]

    def _isdst(self, dt: Any) -> bool:
        tt = (dt.year, dt.month, dt.day, dt.hour, dt.minute, dt.second, dt.weekday(), 0, -1)
        stamp = time.mktime(tt)
        return time.localtime(stamp).tm_isdst > 0


LOCAL = LocalTimezone()

__all__ = ["DSTDIFF", "DSTOFFSET", "FixedOffsetTimezone", "LOCAL", "LocalTimezone",
           "STDOFFSET", "ZERO"]
