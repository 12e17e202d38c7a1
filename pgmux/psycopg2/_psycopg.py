"""psycopg2._psycopg: what psycopg2's C module exports, from the drop-in's modules (code
that imports names from ``psycopg2._psycopg`` finds them here)."""

from __future__ import annotations

import datetime as _dt
import time as _time
from typing import Any

from pgmux.dbapi.twophase import Xid
from pgmux.psycopg2._adapt import (
    AsIs,
    Binary,
    Boolean,
    DateFromPy,
    Decimal,
    Float,
    Int,
    IntervalFromPy,
    ISQLQuote,
    List,
    QuotedString,
    TimeFromPy,
    TimestampFromPy,
    adapt,
    adapters,
)
from pgmux.psycopg2._casters import BINARY as _BINARY_CASTER
from pgmux.psycopg2._casters import (
    BINARYARRAY,
    BOOLEAN,
    BOOLEANARRAY,
    BYTES,
    BYTESARRAY,
    CIDRARRAY,
    DATE,
    DATEARRAY,
    DATETIME,
    DATETIMEARRAY,
    DATETIMETZ,
    DATETIMETZARRAY,
    DECIMAL,
    DECIMALARRAY,
    FLOAT,
    FLOATARRAY,
    INETARRAY,
    INTEGER,
    INTEGERARRAY,
    INTERVAL,
    INTERVALARRAY,
    LONGINTEGER,
    LONGINTEGERARRAY,
    MACADDRARRAY,
    PYDATE,
    PYDATEARRAY,
    PYDATETIME,
    PYDATETIMEARRAY,
    PYDATETIMETZ,
    PYDATETIMETZARRAY,
    PYINTERVAL,
    PYINTERVALARRAY,
    PYTIME,
    PYTIMEARRAY,
    ROWIDARRAY,
    STRINGARRAY,
    TIME,
    TIMEARRAY,
    UNICODE,
    UNICODEARRAY,
    UNKNOWN,
    Typecaster,
    binary_types,
    new_array_type,
    new_type,
    register_type,
    string_types,
)
from pgmux.psycopg2._casters import ROWID as _ROWID_CASTER
from pgmux.psycopg2._casters import STRING as _STRING_CASTER
from pgmux.psycopg2._connection import connection
from pgmux.psycopg2._cursor import cursor
from pgmux.psycopg2._dsn import parse_dsn
from pgmux.psycopg2._exceptions import CLASSES_BY_SQLSTATE as sqlstate_errors
from pgmux.psycopg2._exceptions import (
    DatabaseError,
    DataError,
    Diagnostics,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    QueryCanceledError,
    TransactionRollbackError,
    Warning,
)
from pgmux.psycopg2._info import Column, ConnectionInfo, Notify, encodings

apilevel = "2.0"
threadsafety = 2
paramstyle = "pyformat"
LIBPQ_VERSION = 170000  # the libpq whose behaviour the drop-in follows
__libpq_version__ = LIBPQ_VERSION

# PEP 249 type objects: each compares equal to the OIDs of its kind.
STRING = _STRING_CASTER
BINARY = _BINARY_CASTER
NUMBER = Typecaster((20, 21, 23, 700, 701, 1700), "NUMBER")
DATETIME_ = DATETIME
ROWID = _ROWID_CASTER

REPLICATION_PHYSICAL = 12345678
REPLICATION_LOGICAL = 87654321


def libpq_version() -> int:
    """The libpq version the drop-in follows (``__libpq_version__``; there is no libpq)."""
    return LIBPQ_VERSION


def Date(year: int, month: int, day: int) -> Any:  # noqa: N802
    """A date parameter: an adapter whose ``getquoted()`` is a ``'...'::date`` literal."""
    return DateFromPy(_dt.date(year, month, day))


def Time(hour: int, minute: int, second: int, tzinfo: Any = None) -> Any:  # noqa: N802
    """A time parameter (``second`` may have a fraction): an adapter, as ``Date``."""
    whole = int(second)
    return TimeFromPy(_dt.time(hour, minute, whole, int(round((second - whole) * 1e6)),
                               tzinfo))


def Timestamp(year: int, month: int, day: int, hour: int = 0, minute: int = 0,  # noqa: N802
              second: float = 0, tzinfo: Any = None) -> Any:
    """A timestamp parameter (aware with ``tzinfo``): an adapter, as ``Date``."""
    whole = int(second)
    return TimestampFromPy(_dt.datetime(year, month, day, hour, minute, whole,
                                        int(round((second - whole) * 1e6)), tzinfo))


def DateFromTicks(ticks: float) -> Any:  # noqa: N802
    """The local date at ``ticks`` seconds since the epoch, as ``Date`` gives it."""
    return DateFromPy(_dt.date.fromtimestamp(ticks))


def TimeFromTicks(ticks: float) -> Any:  # noqa: N802
    """The local time of day at ``ticks`` seconds since the epoch, as ``Time`` gives it."""
    return TimeFromPy(_dt.datetime.fromtimestamp(ticks).time())


def TimestampFromTicks(ticks: float) -> Any:  # noqa: N802
    """An aware timestamp in the local time zone."""
    return TimestampFromPy(_dt.datetime.fromtimestamp(ticks).astimezone())


def make_connection(dsn: str, connection_factory: Any = None, async_: Any = False) -> Any:
    factory = connection_factory or connection
    if async_:
        return factory(dsn, async_=async_)
    return factory(dsn)


def quote_ident(name: str, scope: Any = None) -> str:
    """``name`` as a quoted identifier."""
    if not isinstance(name, str):
        raise TypeError(f"argument 1 must be str, not {type(name).__name__}")
    return '"' + name.replace('"', '""') + '"'


_wait_callback: Any = None


def set_wait_callback(func: Any) -> None:
    """Accepted and kept: pgmux is cooperative under gevent whatever is set here (so
    ``psycogreen.gevent.patch_psycopg()`` is harmless)."""
    global _wait_callback
    _wait_callback = func


def get_wait_callback() -> Any:
    """The callable ``set_wait_callback()`` registered, or None."""
    return _wait_callback


def encrypt_password(password: str, user: str, scope: Any = None,
                     algorithm: str | None = None) -> str:
    """The password as PostgreSQL stores it (``md5`` or ``scram-sha-256``)."""
    from pgmux.psycopg2._password import encrypt

    return encrypt(password, user, scope, algorithm)


class lobject:  # noqa: N801
    """Large objects are not supported: their descriptors live in one server session."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotSupportedError("large objects are not supported by pgmux.psycopg2")


class ReplicationConnection(connection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotSupportedError("replication connections are not supported by "
                                "pgmux.psycopg2: they stream from one server session")


class ReplicationCursor(cursor):
    pass


class ReplicationMessage:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotSupportedError("replication is not supported by pgmux.psycopg2")


_connect = make_connection
_ = (_time, AsIs, Binary, Boolean, Decimal, Float, Int, IntervalFromPy, ISQLQuote, List,
     QuotedString, adapt, adapters, Xid, BINARYARRAY, BOOLEAN, BOOLEANARRAY, BYTES,
     BYTESARRAY, CIDRARRAY, DATE, DATEARRAY, DATETIMEARRAY, DATETIMETZ, DATETIMETZARRAY,
     DECIMAL, DECIMALARRAY, FLOAT, FLOATARRAY, INETARRAY, INTEGER, INTEGERARRAY, INTERVAL,
     INTERVALARRAY, LONGINTEGER, LONGINTEGERARRAY, MACADDRARRAY, PYDATE, PYDATEARRAY,
     PYDATETIME, PYDATETIMEARRAY, PYDATETIMETZ, PYDATETIMETZARRAY, PYINTERVAL,
     PYINTERVALARRAY, PYTIME, PYTIMEARRAY, ROWIDARRAY, STRINGARRAY, TIME, TIMEARRAY, UNICODE,
     UNICODEARRAY, UNKNOWN, binary_types, new_array_type, new_type, register_type,
     string_types, parse_dsn, DatabaseError, DataError, Diagnostics, Error, IntegrityError,
     InterfaceError, InternalError, OperationalError, ProgrammingError, QueryCanceledError,
     TransactionRollbackError, Warning, Column, ConnectionInfo, Notify, encodings,
     sqlstate_errors)
