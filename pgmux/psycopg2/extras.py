"""psycopg2.extras: dict and namedtuple cursors, logging connections, batch helpers, and
the extra types (json, ranges, uuid, inet, hstore, composites)."""

from __future__ import annotations

import json  # noqa: F401  (psycopg2.extras.json)
import logging as _logging
import re
import time as _time
from collections import OrderedDict
from collections import namedtuple as _namedtuple
from functools import lru_cache
from typing import Any

from pgmux.psycopg2._batch import execute_batch, execute_values, paginate, split_sql
from pgmux.psycopg2._connection import connection as _connection
from pgmux.psycopg2._cursor import cursor as _cursor
from pgmux.psycopg2._exceptions import NotSupportedError
from pgmux.psycopg2._extras_types import (
    CompositeCaster,
    HstoreAdapter,
    Inet,
    UUID_adapter,
    register_composite,
    register_hstore,
    register_inet,
    register_uuid,
)
from pgmux.psycopg2._ipaddress import register_ipaddress
from pgmux.psycopg2._json import (
    Json,
    register_default_json,
    register_default_jsonb,
    register_json,
)
from pgmux.psycopg2._psycopg import ReplicationMessage, quote_ident  # noqa: F401
from pgmux.psycopg2._range import (
    DateRange,
    DateTimeRange,
    DateTimeTZRange,
    NumberRangeAdapter,
    NumericRange,
    Range,
    RangeAdapter,
    RangeCaster,
    register_range,
)

_paginate = paginate
_split_sql = split_sql
REPLICATION_PHYSICAL = 12345678
REPLICATION_LOGICAL = 87654321


# -- dict cursors ---------------------------------------------------------------------------

class DictCursorBase(_cursor):
    """Base of the cursors whose rows are made by ``row_factory`` (a class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        factory = kwargs.pop("row_factory", None)
        if factory is None:
            raise NotImplementedError("DictCursorBase can't be instantiated without a "
                                      "row factory")
        super().__init__(*args, **kwargs)
        self._dict_row = factory


class DictRow(list):
    """A row that is a list and is read by column name as well."""

    __slots__ = ("_index",)

    def __init__(self, cursor: Any = None, values: Any = None) -> None:
        if cursor is not None:
            self._index = cursor.index
            super().__init__(values if values is not None else
                             [None] * len(cursor.description))
        else:
            self._index = OrderedDict()
            super().__init__(values or ())

    def __getitem__(self, x: Any) -> Any:
        if not isinstance(x, (int, slice)):
            x = self._index[x]
        return super().__getitem__(x)

    def __setitem__(self, x: Any, v: Any) -> None:
        if not isinstance(x, (int, slice)):
            x = self._index[x]
        super().__setitem__(x, v)

    def items(self) -> Any:
        g = super().__getitem__
        return ((name, g(index)) for name, index in self._index.items())

    def keys(self) -> Any:
        return iter(self._index)

    def values(self) -> Any:
        g = super().__getitem__
        return (g(index) for index in self._index.values())

    def get(self, x: Any, default: Any = None) -> Any:
        try:
            return self[x]
        except Exception:
            return default

    def copy(self) -> OrderedDict[Any, Any]:  # type: ignore[override]
        return OrderedDict(self.items())

    def __contains__(self, x: Any) -> bool:
        return x in self._index

    def __reduce__(self) -> Any:
        return DictRow._rebuild, (list(self), self._index)

    @staticmethod
    def _rebuild(values: list[Any], index: Any) -> DictRow:
        row = DictRow()
        row.extend(values)
        row._index = index
        return row

    def __copy__(self) -> DictRow:
        return DictRow._rebuild(list(self), self._index)

    def __deepcopy__(self, memo: Any) -> DictRow:
        import copy

        return DictRow._rebuild(copy.deepcopy(list(self), memo), self._index.copy())


class DictCursor(DictCursorBase):
    """A cursor whose rows are ``DictRow``: by index and by column name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["row_factory"] = DictRow
        super().__init__(*args, **kwargs)
        self.index: OrderedDict[str, int] = OrderedDict()
        self._index_for: Any = None

    def execute(self, query: Any, vars: Any = None) -> None:  # noqa: A002
        self.index = OrderedDict()
        self._index_for = None
        return super().execute(query, vars)

    def callproc(self, procname: str, vars: Any = None) -> Any:  # noqa: A002
        self.index = OrderedDict()
        self._index_for = None
        return super().callproc(procname, vars)

    def _make_rows(self, rows: list[Any]) -> list[Any]:
        if self._index_for is not self._fields:
            index: OrderedDict[str, int] = OrderedDict()
            for i, column in enumerate(self.description or ()):
                index[column[0]] = i
            self.index = index
            self._index_for = self._fields
        return [DictRow(self, row) for row in rows]

    def _make_one(self, row: Any) -> Any:
        return self._make_rows([row])[0]


class DictConnection(_connection):
    """A connection whose cursors are ``DictCursor`` unless told otherwise."""

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cursor_factory", self.cursor_factory or DictCursor)
        return super().cursor(*args, **kwargs)


class RealDictRow(OrderedDict):
    """A row that is a dict from column name to value."""


class RealDictCursor(DictCursorBase):
    """A cursor whose rows are ``RealDictRow`` (dicts)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["row_factory"] = RealDictRow
        super().__init__(*args, **kwargs)
        self.column_mapping: list[str] = []

    def execute(self, query: Any, vars: Any = None) -> None:  # noqa: A002
        self.column_mapping = []
        return super().execute(query, vars)

    def callproc(self, procname: str, vars: Any = None) -> Any:  # noqa: A002
        self.column_mapping = []
        return super().callproc(procname, vars)

    def _make_rows(self, rows: list[Any]) -> list[Any]:
        names = [column[0] for column in self.description or ()]
        self.column_mapping = names
        return [RealDictRow(zip(names, row, strict=False)) for row in rows]


class RealDictConnection(_connection):
    """A connection whose cursors are ``RealDictCursor`` unless told otherwise."""

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cursor_factory", self.cursor_factory or RealDictCursor)
        return super().cursor(*args, **kwargs)


# -- namedtuple cursors -------------------------------------------------------------------------

_NOT_IDENTIFIER = re.compile(r"\W")


class NamedTupleCursor(_cursor):
    """A cursor whose rows are namedtuples of the result's columns."""

    Record: Any = None
    MAX_CACHE = 1024

    def execute(self, query: Any, vars: Any = None) -> None:  # noqa: A002
        self.Record = None
        return super().execute(query, vars)

    def executemany(self, query: Any, vars: Any) -> None:  # noqa: A002
        self.Record = None
        return super().executemany(query, vars)

    def callproc(self, procname: str, vars: Any = None) -> Any:  # noqa: A002
        self.Record = None
        return super().callproc(procname, vars)

    def _make_rows(self, rows: list[Any]) -> list[Any]:
        record = self.Record
        if record is None:
            record = self.Record = self._make_nt()
        make = record._make
        return [make(row) for row in rows]

    def _make_nt(self) -> Any:
        key = tuple(column[0] for column in self.description or ())
        return self._cached_make_nt(key)

    @classmethod
    def _do_make_nt(cls, key: tuple[str, ...]) -> Any:
        fields = []
        for name in key:
            name = _NOT_IDENTIFIER.sub("_", name)
            if not name[:1].isalpha():
                name = "f" + name
            fields.append(name)
        return _namedtuple("Record", fields)

    @classmethod
    @lru_cache(512)
    def _cached_make_nt(cls, key: tuple[str, ...]) -> Any:
        return NamedTupleCursor._do_make_nt(key)


class NamedTupleConnection(_connection):
    """A connection whose cursors are ``NamedTupleCursor`` unless told otherwise."""

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cursor_factory", self.cursor_factory or NamedTupleCursor)
        return super().cursor(*args, **kwargs)


# -- logging --------------------------------------------------------------------------------

class LoggingConnection(_connection):
    """A connection that logs every statement its cursors run (``initialize(logobj)``
    first: a ``logging.Logger`` or a file-like object)."""

    def initialize(self, logobj: Any) -> None:
        self._logobj = logobj
        if _logging and isinstance(logobj, _logging.Logger):
            self.log = self._logtologger
        else:
            self.log = self._logtofile

    def filter(self, msg: Any, curs: Any) -> Any:
        """What is logged for ``msg`` (override to change or hide it)."""
        return msg

    def _logtofile(self, msg: Any, curs: Any) -> None:
        msg = self.filter(msg, curs)
        if msg:
            if isinstance(msg, bytes):
                msg = msg.decode(self.pgmux_encoding, "replace")
            self._logobj.write(msg + "\n")

    def _logtologger(self, msg: Any, curs: Any) -> None:
        msg = self.filter(msg, curs)
        if msg:
            self._logobj.debug(msg)

    def _check_init(self) -> None:
        if not hasattr(self, "_logobj"):
            from pgmux.psycopg2._exceptions import ProgrammingError

            raise ProgrammingError("LoggingConnection object has not been initialize()d")

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        self._check_init()
        kwargs.setdefault("cursor_factory", self.cursor_factory or LoggingCursor)
        return super().cursor(*args, **kwargs)


class LoggingCursor(_cursor):
    """A cursor that logs each statement through its LoggingConnection."""

    def execute(self, query: Any, vars: Any = None) -> None:  # noqa: A002
        try:
            return super().execute(query, vars)
        finally:
            self.connection.log(self.query, self)

    def callproc(self, procname: str, vars: Any = None) -> Any:  # noqa: A002
        try:
            return super().callproc(procname, vars)
        finally:
            self.connection.log(self.query, self)


class MinTimeLoggingConnection(LoggingConnection):
    """Logs only the statements that ran at least ``mintime`` milliseconds, with their
    duration."""

    def initialize(self, logobj: Any, mintime: float = 0) -> None:
        LoggingConnection.initialize(self, logobj)
        self._mintime = mintime

    def filter(self, msg: Any, curs: Any) -> Any:
        t = (_time.time() - curs.timestamp) * 1000
        if t > self._mintime:
            if isinstance(msg, bytes):
                msg = msg.decode(self.pgmux_encoding, "replace")
            return f"{msg}{chr(10)}  (execution time: {int(t)} ms)"
        return None

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cursor_factory", self.cursor_factory or MinTimeLoggingCursor)
        return LoggingConnection.cursor(self, *args, **kwargs)


class MinTimeLoggingCursor(LoggingCursor):
    """The cursor of ``MinTimeLoggingConnection``."""

    def execute(self, query: Any, vars: Any = None) -> None:  # noqa: A002
        self.timestamp = _time.time()
        return LoggingCursor.execute(self, query, vars)

    def callproc(self, procname: str, vars: Any = None) -> Any:  # noqa: A002
        self.timestamp = _time.time()
        return LoggingCursor.callproc(self, procname, vars)


# -- what a multiplexing client cannot be ------------------------------------------------

def wait_select(conn: Any) -> None:
    """psycopg2's wait callback for select(): nothing waits here (pgmux is cooperative
    under gevent); reads what the server sent, as ``poll()`` does."""
    conn.poll()


class _ReplicationUnsupported(_connection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotSupportedError("replication connections are not supported by "
                                "pgmux.psycopg2: they stream from one server session")


class LogicalReplicationConnection(_ReplicationUnsupported):
    """psycopg2's logical replication connection: creating one raises NotSupportedError
    (replication streams from one server session)."""


class PhysicalReplicationConnection(_ReplicationUnsupported):
    """psycopg2's physical replication connection: creating one raises NotSupportedError."""


class StopReplication(Exception):  # noqa: N818  (psycopg2's name)
    """psycopg2's name, for code that catches it; pgmux never raises it."""


class ReplicationCursor(_cursor):
    """psycopg2's replication cursor: creating one raises NotSupportedError."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotSupportedError("replication is not supported by pgmux.psycopg2")


__all__ = [
    "CompositeCaster", "DateRange", "DateTimeRange", "DateTimeTZRange", "DictConnection",
    "DictCursor", "DictCursorBase", "DictRow", "HstoreAdapter", "Inet", "Json",
    "LoggingConnection", "LoggingCursor", "MinTimeLoggingConnection",
    "MinTimeLoggingCursor", "NamedTupleConnection", "NamedTupleCursor",
    "NumberRangeAdapter", "NumericRange", "Range", "RangeAdapter", "RangeCaster",
    "RealDictConnection", "RealDictCursor", "RealDictRow", "UUID_adapter",
    "execute_batch", "execute_values", "register_composite", "register_default_json",
    "register_default_jsonb", "register_hstore", "register_inet", "register_ipaddress",
    "register_json", "register_range", "register_uuid", "wait_select", "_paginate",
    "_split_sql", "LogicalReplicationConnection", "PhysicalReplicationConnection",
    "ReplicationCursor", "StopReplication"]
