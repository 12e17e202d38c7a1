"""DB-API cursors: run statements through their connection, hand out the rows."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from pgmux.dbapi.paramstyle import bind
from pgmux.engine.result import Row
from pgmux.errors import InterfaceError, NotSupportedError, ProgrammingError
from pgmux.types import oids

if TYPE_CHECKING:
    from pgmux.dbapi.connection import Connection  # (which imports this module)

_VARIABLE_SIZE = -1


class Column(NamedTuple):
    """One item of ``cursor.description`` (PEP 249's seven, by name as well)."""

    name: str
    type_code: int
    display_size: int | None
    internal_size: int | None
    precision: int | None
    scale: int | None
    null_ok: bool | None


def _numeric_precision(type_oid: int, modifier: int) -> tuple[int | None, int | None]:
    if type_oid == oids.NUMERIC and modifier >= 4:
        return ((modifier - 4) >> 16) & 0xFFFF, (modifier - 4) & 0xFFFF
    return None, None


@functools.lru_cache(maxsize=1024)
def describe(fields: tuple[Any, ...]) -> tuple[Column, ...] | None:
    """``cursor.description`` for a result's RowDescription fields (None without one)."""
    if not fields:
        return None
    columns = []
    for field in fields:
        size = None if field.type_size == _VARIABLE_SIZE else field.type_size
        precision, scale = _numeric_precision(field.type_oid, field.type_modifier)
        columns.append(Column(field.name, field.type_oid, None, size, precision, scale, None))
    return tuple(columns)


class Cursor:
    """A PEP 249 cursor. Rows of an ordinary cursor arrive whole at ``execute()``; a
    named (server-side) cursor streams them, ``itersize`` rows per round trip, on its
    connection's pinned connection, which stays taken until the rows are read or the
    cursor is closed."""

    def __init__(self, connection: Connection, name: str | None = None):
        """``connection``: the ``pgmux.dbapi.Connection`` that made it."""
        self.connection = connection
        self.name = name
        self.arraysize = 1
        self.itersize = 2000
        self.rowcount = -1
        self.rownumber: int | None = None
        self.lastrowid = None  # PostgreSQL tables have no row ids: use RETURNING
        self.statusmessage: str | None = None  # the last command tag, e.g. "INSERT 0 1"
        self._fields: tuple[Any, ...] = ()
        self._rows: Sequence[Row] = ()
        self._stream: Iterator[Row] | None = None
        self._closed = False

    # -- running statements ------------------------------------------------------------------
    def execute(self, operation: str, parameters: Any = None) -> Cursor:
        """Run one statement; parameters fill its %s / %(name)s placeholders."""
        self._start()
        sql, values = bind(_text(operation), parameters)
        connection = self.connection
        if self.name is not None:
            self._fields, self._stream = connection.open_stream(sql, values, self.itersize)
            self.rownumber = 0
            return self
        result = connection.run_statement(sql, values)
        self._fields = result.fields
        self._rows = result.rows
        self.rowcount = result.rowcount
        self.statusmessage = result.command
        self.rownumber = 0 if result.fields else None
        return self

    def executemany(self, operation: str, seq_of_parameters: Iterable[Any]) -> Cursor:
        """Run one statement per parameter set, pipelined: one round trip for them all.

        In a transaction the sets run in it; in autocommit mode they run as one implicit
        transaction (all or none): one atomic unit on the multiplexed path where the
        statement may go there. ``rowcount`` is the total of rows changed.
        """
        self._start()
        if self.name is not None:
            raise ProgrammingError("executemany() is not available on a named cursor")
        text = _text(operation)
        sql = text
        seq_values: list[Sequence[Any]] = []
        for parameters in seq_of_parameters:
            sql, values = bind(text, parameters)
            seq_values.append(values or ())
        self.rowcount = self.connection.run_batch(sql, seq_values) if seq_values else 0
        return self

    def callproc(self, procname: str, parameters: Sequence[Any] = ()) -> Sequence[Any]:
        """``SELECT * FROM procname(...)``: its rows are this cursor's result set."""
        placeholders = ", ".join(["%s"] * len(parameters))
        self.execute(f"SELECT * FROM {procname}({placeholders})", tuple(parameters))
        return parameters

    def nextset(self) -> bool | None:
        raise NotSupportedError("PostgreSQL statements return one result set each")

    def setinputsizes(self, sizes: Any) -> None:
        """Accepted and ignored: parameter types come from the values."""

    def setoutputsize(self, size: int, column: int | None = None) -> None:
        """Accepted and ignored: values arrive whole."""

    # -- fetching ------------------------------------------------------------------------------
    @property
    def description(self) -> tuple[Column, ...] | None:
        return describe(self._fields)

    def fetchone(self) -> Row | None:
        if self._stream is not None:
            rows = self._take(self._stream, 1)
            return rows[0] if rows else None
        position = self._position()
        if position >= len(self._rows):
            return None
        self.rownumber = position + 1
        return self._rows[position]

    def fetchmany(self, size: int | None = None) -> list[Row]:
        count = self.arraysize if size is None else size
        if self._stream is not None:
            return self._take(self._stream, count)
        position = self._position()
        rows = list(self._rows[position:position + count])
        self.rownumber = position + len(rows)
        return rows

    def fetchall(self) -> list[Row]:
        if self._stream is not None:
            return self._take(self._stream, -1)
        position = self._position()
        rows = list(self._rows[position:])
        self.rownumber = position + len(rows)
        return rows

    def __iter__(self) -> Iterator[Row]:
        return self

    def __next__(self) -> Row:
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row

    def _position(self) -> int:
        self._check_open()
        if self.rownumber is None:
            raise ProgrammingError("no result to fetch: the last statement returned no rows")
        return self.rownumber

    def _take(self, stream: Iterator[Row], count: int) -> list[Row]:
        self._check_open()
        rows = self.connection.next_rows(stream, count)
        self.rownumber = (self.rownumber or 0) + len(rows)
        self.rowcount = self.rownumber
        if count < 0 or len(rows) < count:
            self._stream = None  # read to the end: the stream has closed itself
        return rows

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        """Close the cursor; a server-side one closes its portal."""
        self._closed = True
        self._end_stream()
        self._rows = ()

    @property
    def closed(self) -> bool:
        return self._closed or self.connection.closed

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _start(self) -> None:
        self._check_open()
        self._end_stream()
        self._fields = ()
        self._rows = ()
        self.rowcount = -1
        self.rownumber = None
        self.statusmessage = None

    def _end_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            self.connection.close_rows(stream)

    def _check_open(self) -> None:
        if self._closed:
            raise InterfaceError("the cursor is closed")
        if self.connection.closed:
            raise InterfaceError("the connection is closed")

    def __repr__(self) -> str:
        kind = f"named {self.name!r}" if self.name is not None else "client-side"
        return f"<pgmux.dbapi.Cursor {kind}{' closed' if self._closed else ''}>"


def _text(operation: Any) -> str:
    if isinstance(operation, str):
        return operation
    if isinstance(operation, (bytes, bytearray)):
        return bytes(operation).decode()
    raise ProgrammingError(f"a statement must be str, not {type(operation).__name__}")
