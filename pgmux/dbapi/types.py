"""PEP 249 type objects (compared with a description's type code) and constructors."""

from __future__ import annotations

import datetime as dt
import time

from pgmux.types import oids

__all__ = [
    "BINARY",
    "DATETIME",
    "NUMBER",
    "ROWID",
    "STRING",
    "Binary",
    "Date",
    "DateFromTicks",
    "Time",
    "TimeFromTicks",
    "Timestamp",
    "TimestampFromTicks",
    "TypeObject",
]


class TypeObject:
    """Equal to every type OID of its group (``cursor.description[i][1] == STRING``)."""

    def __init__(self, name: str, *type_oids: int):
        self.name = name
        self.oids = frozenset(type_oids)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TypeObject):
            return self is other
        if isinstance(other, int):
            return other in self.oids
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"<pgmux.dbapi.{self.name}>"


STRING = TypeObject("STRING", oids.TEXT, oids.VARCHAR, oids.BPCHAR, oids.NAME, oids.CHAR,
                    oids.UNKNOWN)
BINARY = TypeObject("BINARY", oids.BYTEA)
NUMBER = TypeObject("NUMBER", oids.INT2, oids.INT4, oids.INT8, oids.FLOAT4, oids.FLOAT8,
                    oids.NUMERIC, oids.OID, oids.MONEY)
DATETIME = TypeObject("DATETIME", oids.DATE, oids.TIME, oids.TIMETZ, oids.TIMESTAMP,
                      oids.TIMESTAMPTZ, oids.INTERVAL)
ROWID = TypeObject("ROWID", oids.OID, oids.TID)

Date = dt.date
Time = dt.time
Timestamp = dt.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> dt.date:  # noqa: N802  (PEP 249 names)
    """The local date of a POSIX timestamp."""
    return dt.date(*time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> dt.time:  # noqa: N802
    """The local time of day of a POSIX timestamp."""
    return dt.time(*time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> dt.datetime:  # noqa: N802
    """The local date and time of a POSIX timestamp."""
    return dt.datetime(*time.localtime(ticks)[:6])

