"""DB-API cursors: run statements through their connection, hand out the rows."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from pgmux.dbapi import copy as copying
from pgmux.dbapi.paramstyle import bind
from pgmux.dbapi.quoting import mogrify
from pgmux.dbapi.server_cursor import ServerRows
from pgmux.dbapi.zones import shift_rows
from pgmux.engine.result import ROWCOUNTS, Result, Row, rowcount_from_tag
from pgmux.errors import InterfaceError, NotSupportedError, ProgrammingError
from pgmux.telemetry import PINNED, PIPELINED, Observer, observed
from pgmux.types import oids

if TYPE_CHECKING:
    from pgmux.dbapi.connection import Connection  # (which imports this module)


class Column(NamedTuple):
    """One item of ``cursor.description`` (PEP 249's seven, by name as well)."""

    name: str
    type_code: int
    display_size: int | None
    internal_size: int | None
    precision: int | None
    scale: int | None
    null_ok: bool | None


_CHAR_TYPES = frozenset({oids.BPCHAR, oids.VARCHAR})  # typmod: length + 4
_BIT_TYPES = frozenset({oids.BIT, oids.VARBIT})  # typmod: length
_TIME_TYPES = frozenset({oids.TIME, oids.TIMETZ, oids.TIMESTAMP, oids.TIMESTAMPTZ,
                         oids.INTERVAL})  # typmod: fractional digits (low 16 bits)
_INTERVAL_FULL_PRECISION = 0xFFFF


def _display_size(type_oid: int, modifier: int) -> int | None:
    """varchar(n) and char(n): n; bit(n) and varbit(n): n (inspectdb's max_length)."""
    if modifier < 0:
        return None
    if type_oid in _CHAR_TYPES:
        return modifier - 4
    return modifier if type_oid in _BIT_TYPES else None


def _precision_scale(type_oid: int, modifier: int) -> tuple[int | None, int | None]:
    """numeric(p, s): (p, s), a negative scale included; the times: (digits, None)."""
    if modifier < 0:
        return None, None
    if type_oid == oids.NUMERIC:
        scale = (modifier - 4) & 0xFFFF
        return modifier >> 16, scale - 0x800 if scale >= 0x400 else scale
    if type_oid in _TIME_TYPES:
        digits = modifier & 0xFFFF
        return (None if digits == _INTERVAL_FULL_PRECISION else digits), None
    return None, None


@functools.lru_cache(maxsize=1024)
def describe(fields: tuple[Any, ...]) -> tuple[Column, ...] | None:
    """``cursor.description`` for a result's RowDescription fields (None without one), with
    the sizes psycopg gives: ``internal_size`` for fixed-size types, ``display_size``,
    ``precision`` and ``scale`` from the type modifier."""
    if not fields:
        return None
    columns = []
    for field in fields:
        oid, modifier = field.type_oid, field.type_modifier
        size = field.type_size if field.type_size >= 0 else None
        precision, scale = _precision_scale(oid, modifier)
        columns.append(Column(field.name, oid, _display_size(oid, modifier), size,
                              precision, scale, None))
    return tuple(columns)


class Cursor:
    """A PEP 249 cursor. Rows of an ordinary cursor arrive whole at ``execute()``; a
    named (server-side) cursor streams them, ``itersize`` rows per round trip, on its
    connection's pinned connection, which stays taken until the rows are read or the
    cursor is closed.

    timestamptz values come aware in UTC; set ``timezone`` (a ``tzinfo``) to have them in
    that zone, and ``naive`` as well to have them as its naive local time.
    """

    def __init__(self, connection: Connection, name: str | None = None, *,
                 withhold: bool | None = None):
        """``connection``: the ``pgmux.dbapi.Connection`` that made it."""
        self.connection = connection
        self.name = name
        self.withhold = withhold
        self.arraysize = 1
        self.itersize = 2000
        self.rowcount = -1
        self.rownumber: int | None = None
        self.lastrowid = None  # PostgreSQL tables have no row ids: use RETURNING
        self.statusmessage: str | None = None  # the last command tag, e.g. "INSERT 0 1"
        self.timezone: Any = None  # a tzinfo: timestamptz results in that zone
        self.naive = False  # with timezone: as its naive local time
        self._fields: tuple[Any, ...] = ()
        self._rows: Sequence[Row] = ()
        self._stream: ServerRows | None = None
        self._closed = False

    # -- running statements ------------------------------------------------------------------
    def execute(self, operation: str, parameters: Any = None) -> Cursor:
        """Run one statement; parameters fill its %s / %(name)s placeholders."""
        connection = self.connection
        if self._closed or connection._closed:  # (_start, inline: every statement)
            self._check_open()
        if self._stream is not None:
            self._end_stream()
        self._fields = ()
        self._rows = ()
        self.rowcount = -1
        self.rownumber = None
        self.statusmessage = None
        text = operation if type(operation) is str else _text(operation)
        if self.name is not None:
            return self._declare(text, parameters)
        sql, values = bind(text, parameters)
        # One operation, with the text as the caller gave it (an ORM's SQL); the multiplexed
        # query or pinned statement under it says which kind of connection carried it.
        observer = connection.client.observer
        if observer is None:  # (telemetry off: no closure, no wrapper)
            result = connection.run_statement(sql, values)
        else:
            result = self._observed_statement(observer, text, sql, values, parameters)
        self._fields = fields = result.fields
        self._rows = result.rows
        if self.timezone is not None and fields:
            self._rows = shift_rows(fields, result.rows, self.timezone, self.naive)
        self.statusmessage = tag = result.command
        rowcount = ROWCOUNTS.get(tag)
        self.rowcount = rowcount if rowcount is not None else rowcount_from_tag(tag)
        self.rownumber = 0 if fields else None
        return self

    def _declare(self, text: str, parameters: Any) -> Cursor:
        """``execute`` of a named cursor: DECLARE it, fetch its first rows."""
        connection = self.connection
        name = self.name
        assert name is not None
        # The span has the text as given; the DECLARE carries the values inline.
        sql = mogrify(text, parameters, connection.client.types)
        self._stream = observed(connection.client.observer, PINNED, text, lambda: (
            connection.open_cursor(name, sql, self.withhold, self.itersize)),
            parameters or ())
        self._fields = self._stream.fields
        self.rownumber = 0
        return self

    def _observed_statement(self, observer: Observer, text: str, sql: str,
                            values: list[Any] | None, parameters: Any) -> Result:
        """``connection.run_statement`` as one observed operation."""
        connection = self.connection
        return observed(observer, PIPELINED, text, lambda: connection.run_statement(sql, values),
                        parameters or ())

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
        if not seq_values:
            self.rowcount = 0
            return self
        connection = self.connection
        self.rowcount = observed(connection.client.observer, PIPELINED, text,
                                 lambda: connection.run_batch(sql, seq_values),
                                 seq_values[0], batch=len(seq_values))
        return self

    def callproc(self, procname: str, parameters: Sequence[Any] = ()) -> Sequence[Any]:
        """``SELECT * FROM procname(...)``: its rows are this cursor's result set."""
        placeholders = ", ".join(["%s"] * len(parameters))
        self.execute(f"SELECT * FROM {procname}({placeholders})", tuple(parameters))
        return parameters

    def nextset(self) -> bool | None:
        """Not supported: a PostgreSQL statement returns one result set."""
        raise NotSupportedError("PostgreSQL statements return one result set each")

    def setinputsizes(self, sizes: Any) -> None:
        """Accepted and ignored: parameter types come from the values."""

    def setoutputsize(self, size: int, column: int | None = None) -> None:
        """Accepted and ignored: values arrive whole."""

    # -- fetching ------------------------------------------------------------------------------
    @property
    def description(self) -> tuple[Column, ...] | None:
        """PEP 249's seven items per column of the last result (``Column``), or None."""
        return describe(self._fields)

    def fetchone(self) -> Row | None:
        """The next row of the result, or None when there is none left."""
        if self._stream is not None:
            rows = self._take(self._stream, 1)
            return rows[0] if rows else None
        position = self._position()
        if position >= len(self._rows):
            return None
        self.rownumber = position + 1
        return self._rows[position]

    def fetchmany(self, size: int | None = None) -> list[Row]:
        """The next ``size`` rows (``arraysize`` by default); fewer at the end."""
        count = self.arraysize if size is None else size
        if self._stream is not None:
            return self._take(self._stream, count)
        position = self._position()
        rows = list(self._rows[position:position + count])
        self.rownumber = position + len(rows)
        return rows

    def fetchall(self) -> list[Row]:
        """The rows left in the result."""
        if self._stream is not None:
            return self._take(self._stream, -1)
        position = self.rownumber
        if position is None or self._closed:  # (_position's checks, the usual case inline)
            position = self._position()
        elif self.connection._closed:
            self._check_open()
        rows = list(self._rows[position:]) if position else list(self._rows)
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

    def _take(self, stream: ServerRows, count: int) -> list[Row]:
        self._check_open()
        rows = stream.take(count)
        if self.timezone is not None:
            rows = list(shift_rows(self._fields, rows, self.timezone, self.naive))
        self.rownumber = (self.rownumber or 0) + len(rows)
        self.rowcount = self.rownumber
        return rows

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        """Close the cursor; a server-side one closes its portal."""
        self._closed = True
        if self._stream is not None:
            self._end_stream()
        self._rows = ()

    @property
    def closed(self) -> bool:
        """True once the cursor or its connection is closed."""
        return self._closed or self.connection.closed

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _start(self) -> None:
        self._check_open()
        if self._stream is not None:
            self._end_stream()
        self._fields = ()
        self._rows = ()
        self.rowcount = -1
        self.rownumber = None
        self.statusmessage = None

    def _end_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None and not self.connection.closed:
            stream.close()

    # -- COPY (pgmux.dbapi.copy) ---------------------------------------------------------------
    def copy(self, statement: str) -> copying.Copy:
        """psycopg 3's COPY block: ``with cur.copy("COPY t FROM STDIN") as c: c.write_row(r)``;
        ``for chunk in cur.copy("COPY t TO STDOUT")``."""
        self._start()
        return copying.Copy(self.connection, _text(statement))

    def copy_expert(self, sql: str, file: Any, size: int = 8192) -> None:
        """psycopg2's: COPY ... FROM STDIN from ``file.read()``, TO STDOUT to ``file.write()``."""
        self._start()
        self.rowcount = copying.copy_expert(self.connection, _text(sql), file, size)

    def copy_from(self, file: Any, table: str, sep: str = "\t", null: str = "\\N",
                  size: int = 8192, columns: Sequence[str] | None = None) -> None:
        """psycopg2's: ``COPY table FROM STDIN`` fed from ``file`` (text format)."""
        self.copy_expert(copying.table_sql(table, columns, "FROM STDIN", sep, null), file, size)

    def copy_to(self, file: Any, table: str, sep: str = "\t", null: str = "\\N",
                columns: Sequence[str] | None = None) -> None:
        """psycopg2's: ``COPY table TO STDOUT`` written to ``file`` (text format)."""
        self.copy_expert(copying.table_sql(table, columns, "TO STDOUT", sep, null), file)

    def mogrify(self, operation: str, parameters: Any = None) -> str:
        """The statement with its parameters as SQL literals (what psycopg would send)."""
        return mogrify(_text(operation), parameters, self.connection.client.types)

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
