"""psycopg2's ``cursor``: statements through its connection's pgmux handle, rows cast as
psycopg2 casts them (``pgmux.psycopg2._casters``), client-side or named (server-side)."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterator
from typing import Any

from gevent.hub import getcurrent

from pgmux import errors as pgmux_errors
from pgmux.engine.result import ROWCOUNTS, rowcount_from_tag
from pgmux.psycopg2 import _query, _script
from pgmux.psycopg2._adapt import VersionedDict
from pgmux.psycopg2._casters import RENDERED, caster_for
from pgmux.psycopg2._connection import connection
from pgmux.psycopg2._copy import copy_expert, copy_sql
from pgmux.psycopg2._defaults import DEFAULT_CURSOR
from pgmux.psycopg2._exceptions import InterfaceError, NotSupportedError, ProgrammingError
from pgmux.psycopg2._info import Column
from pgmux.psycopg2._notices import NOTICES_TO
from pgmux.psycopg2._types import DecodeFailure, decode_failures, registry
from pgmux.psycopg2.errors import lookup
from pgmux.session import quote_ident
from pgmux.telemetry import PIPELINED, observed
from pgmux.types import oids

IndeterminateDatatype = lookup("42P18")
_ZONED = frozenset({oids.TIMESTAMPTZ, oids.TIMETZ})
_NO_RESULTS = "no results to fetch"
_BLANK = " \t\r\n;"  # what an empty query holds


def _text(conn: Any, query: Any) -> str:
    if isinstance(query, str):
        return query
    if isinstance(query, (bytes, bytearray)):
        return bytes(query).decode(conn.pgmux_encoding)
    as_string = getattr(query, "as_string", None)
    if as_string is not None:
        return as_string(conn)
    raise TypeError(f"argument 1 must be a string or unicode object: got "
                    f"{type(query).__name__} instead")


class cursor:  # noqa: N801  (psycopg2's name)
    """A psycopg2 cursor."""

    _closed = False
    connection: Any = None  # (a subclass that skips __init__ has none)
    name: str | None = None
    _rows: list[Any] | None = None
    _fields: tuple[Any, ...] = ()
    _description: Any = None
    _query_args: Any = None
    _query: bytes | None = None
    _named_state = 0  # named cursors: 0 new, 1 declared
    _failures_seen = 0
    _poisoned = False  # the rows may hold a value that could not be read

    def __init__(self, conn: Any, name: str | None = None, withhold: bool = False,
                 scrollable: bool | None = None) -> None:
        if not isinstance(conn, connection):
            raise TypeError("argument 1 must be a pgmux.psycopg2 connection")
        self.connection = conn
        self.name = name
        # the class's defaults again, on the instance (read there at every statement)
        self._closed = False
        self._rows = None
        self._fields = ()
        self._description = None
        self._query_args = None
        self._query = None
        self._named_state = 0
        self._poisoned = False
        self.withhold = withhold
        self.scrollable = scrollable
        self.arraysize = 1
        self.itersize = 2000
        self.rowcount = -1
        self.rownumber = 0
        self.lastrowid = 0
        self.statusmessage: str | None = None
        self.tzinfo_factory: Any = dt.timezone
        self.row_factory: Any = None
        self.string_types: dict[int, Any] = {}
        self.binary_types: dict[int, Any] = {}
        self._failures_seen = decode_failures[0]
        self._plain = type(self)._make_rows is cursor._make_rows

    # -- running statements --------------------------------------------------------------
    def execute(self, query: Any, vars: Any = None) -> None:  # noqa: A002
        conn = self.connection
        if self._closed or conn is None or conn._closed:
            raise InterfaceError("cursor already closed")
        if type(query) is not str:
            query = _text(conn, query)
        if self.name is not None:
            return self._declare(query, vars)
        handle = conn.pgmux_handle
        run = handle.run_statement
        script = _script.steps(query, vars, conn) if (
            ";" in query and handle.autocommit and handle.lease is None) else None
        if script is None:
            sql, values = _query.bind(query, vars, conn)
            if not sql or (sql[0] in _BLANK and not sql.strip(_BLANK)):
                raise ProgrammingError("can't execute an empty query")
        else:  # several statements, autocommit: one atomic unit, multiplexed
            run = functools.partial(_script.run, handle, script, query, vars, conn)
            sql, values = query, None
        self._query_args = (query, vars)
        self._query = None
        if registry.synced != VersionedDict.version:
            registry.sync_claims()
        if "pg_backend_pid" in sql and handle.lease is None:
            # the answer names a server process: the handle keeps that one from now on
            conn.pgmux_call(handle.pin, "pg_backend_pid() was called")
        try:
            observer = handle.client.observer
            if observer is None:  # (pgmux_call, inline)
                if conn._closed:
                    raise InterfaceError("connection already closed")
                current = getcurrent()
                previous = conn.pgmux_running
                conn.pgmux_running = current
                prior = getattr(current, NOTICES_TO, None)
                setattr(current, NOTICES_TO, conn)
                try:
                    result = run(sql, values)
                except pgmux_errors.Error as error:
                    raise conn.pgmux_failed(error, sql, self) from None
                finally:
                    conn.pgmux_running = previous
                    setattr(current, NOTICES_TO, prior)
                    if conn.notifies is not None and handle.lease is not None:
                        conn.pgmux_drain_notifies()
            else:
                result = self._observed(observer, query, vars, run, sql, values)
        except IndeterminateDatatype as error:
            # an untyped parameter where the server cannot tell its type (psycopg2's
            # literal reads as text there): the statement, refused before it ran, is sent
            # again with its values as literals, where nothing was aborted by the refusal
            if not values or not handle.forgive(error.__context__):
                raise
            sql = _query.render(query, vars, conn).decode(conn.pgmux_encoding)
            result = conn.pgmux_call(handle.run_statement, sql, None, query=sql, cursor=self)
        fields = result.fields  # (the result taken)
        self.statusmessage = tag = result.command
        rowcount = ROWCOUNTS.get(tag)
        self.rowcount = rowcount if rowcount is not None else rowcount_from_tag(tag)
        self._fields = fields
        self._description = None
        self.rownumber = 0
        if fields:
            rows = result.rows
            if registry.claimed or self.tzinfo_factory is not dt.timezone:
                rows = self._cast(fields, rows)
            self._rows = rows if type(rows) is list else list(rows)
        else:
            self._rows = None
        if decode_failures[0] != self._failures_seen:  # a value could not be read: the
            self._failures_seen = decode_failures[0]   # rows are checked as they are
            self._poisoned = True                      # fetched

    def _observed(self, observer: Any, query: str, vars: Any,  # noqa: A002
                  run: Any, sql: str, values: Any) -> Any:
        """``run(sql, values)`` as one operation with the text as the caller gave it
        (pgmux.dbapi's too)."""
        conn = self.connection
        return observed(observer, PIPELINED, query, lambda: conn.pgmux_call(
            run, sql, values, query=sql, cursor=self), vars or ())

    def _cast(self, fields: tuple[Any, ...], rows: Any) -> list[Any]:
        """Rows with the claimed columns read by their casters (and timestamptz in the
        zones this cursor's tzinfo_factory makes)."""
        claimed = registry.claimed
        plan = []
        for index, field in enumerate(fields):
            oid = field.type_oid
            if oid in claimed:
                plan.append((index, caster_for(oid, self), RENDERED.get(oid, True)))
            elif oid in _ZONED and self.tzinfo_factory is not dt.timezone:
                plan.append((index, self.tzinfo_factory, False))
        if not plan:
            return rows if type(rows) is list else list(rows)
        out = []
        for row in rows:
            values = list(row)
            for index, caster, text in plan:
                value = values[index]
                if text is not False:  # claimed: the caster reads the value's text
                    if text is not True and value is not None:
                        value = text(value)
                    if caster is not None:
                        value = _cast_or_failure(caster, value, self)
                    values[index] = value
                elif value is not None and value.tzinfo is not None:
                    values[index] = (value.replace(tzinfo=None) if caster is None else
                                     value.replace(tzinfo=caster(value.utcoffset())))
            out.append(tuple(values))
        return out

    def executemany(self, query: Any, vars_list: Any) -> None:
        """Run the statement once per parameter set; ``rowcount`` is the total changed."""
        conn = self.connection
        if self._closed or conn is None or conn._closed:
            raise InterfaceError("cursor already closed")
        if self.name is not None:
            raise ProgrammingError("executemany cannot be used with named cursors")
        query = _text(conn, query)
        total = 0
        counted = True
        for vars in vars_list:  # noqa: A001
            self.execute(query, vars)
            if self.rowcount < 0:
                counted = False
            else:
                total += self.rowcount
        self.rowcount = total if counted else -1
        self._rows = None

    def callproc(self, procname: str, parameters: Any = None) -> Any:
        """``SELECT * FROM procname(...)``; a mapping of parameters goes by name."""
        conn = self.connection
        if self._closed or conn._closed:
            raise InterfaceError("cursor already closed")
        if self.name is not None:
            raise ProgrammingError("can't call .callproc() on named cursors")
        if parameters is None:
            parameters = ()
        if isinstance(parameters, dict):
            if not all(isinstance(key, str) for key in parameters):
                raise TypeError("callproc() parameter names must be strings")
            args = ", ".join(f"{quote_ident(str(k))} := %s" for k in parameters)
            values: Any = tuple(parameters.values())
        else:
            if not hasattr(parameters, "__len__"):
                raise TypeError("callproc() parameters must be a sequence or a mapping")
            args = ", ".join(["%s"] * len(parameters))
            values = parameters
        self.execute(f"SELECT * FROM {procname}({args})", values)
        return parameters

    def mogrify(self, query: Any, vars: Any = None) -> bytes:  # noqa: A002
        """The statement as psycopg2 sends it (bytes)."""
        conn = self.connection
        return _query.render(_text(conn, query), vars, conn)

    @property
    def query(self) -> bytes | None:
        """The text psycopg2 would have sent for the last statement (bytes)."""
        if self._query is None and self._query_args is not None:
            query, vars = self._query_args  # noqa: A001
            self._query = _query.render(query, vars, self.connection)
        return self._query

    # -- named (server-side) cursors -------------------------------------------------------
    def _declare(self, query: str, vars: Any) -> None:  # noqa: A002
        if self._named_state:
            raise ProgrammingError("can't call .execute() on named cursors more than once")
        conn = self.connection
        if conn.autocommit and not self.withhold:
            raise ProgrammingError("can't use a named cursor outside of transactions")
        body = _query.render(query, vars, conn).decode(conn.pgmux_encoding)
        scroll = {None: "", True: "SCROLL ", False: "NO SCROLL "}[self.scrollable]
        hold = "WITH HOLD" if self.withhold else "WITHOUT HOLD"
        sql = f"DECLARE {quote_ident(self.name or '')} {scroll}CURSOR {hold} FOR {body}"
        self._query_args = (sql, None)
        self._query = None
        if registry.synced != VersionedDict.version:
            registry.sync_claims()
        handle = conn.pgmux_handle
        if self.withhold:  # it outlives transactions: its server session must stay
            conn.pgmux_call(handle.pin, "a WITH HOLD cursor was declared")
        result = conn.pgmux_call(handle.run_statement, sql, None, query=sql, cursor=self)
        self.statusmessage = result.command
        self._named_state = 1
        self.rowcount = -1
        self.rownumber = 0
        self._rows = None

    def _named_command(self, sql: str) -> Any:
        """FETCH, MOVE or CLOSE of this named cursor: on the pinned connection that holds
        it (outside a transaction too, for a WITH HOLD cursor: no BEGIN)."""
        conn = self.connection
        handle = conn.pgmux_handle
        if handle.lease is not None:
            return conn.pgmux_call(handle.on_lease, lambda lease: lease.command(sql),
                                   query=sql, cursor=self)
        return conn.pgmux_call(handle.run_statement, sql, None, query=sql, cursor=self)

    def _fetch_named(self, how: str, page: bool = False) -> list[Any]:
        if self._closed:
            raise InterfaceError("cursor already closed")
        sql = f"FETCH {how} FROM {quote_ident(self.name or '')}"
        result = self._named_command(sql)
        self._fields = result.fields
        self._description = None
        rows = result.rows
        if registry.claimed or self.tzinfo_factory is not dt.timezone:
            rows = self._cast(result.fields, rows)
        if decode_failures[0] != self._failures_seen:
            self._failures_seen = decode_failures[0]
            self._check_values(rows)
        rows = self._make_rows(rows if type(rows) is list else list(rows))
        if page:
            self.rownumber = 0
        else:
            self.rownumber += len(rows)
            self.rowcount = self.rownumber
        return rows

    # -- fetching ---------------------------------------------------------------------------
    @property
    def description(self) -> tuple[Column, ...] | None:
        if self._description is None and self._fields:
            self._description = _describe(self._fields)
        return self._description

    def _check_fetch(self) -> list[Any]:
        if self._closed:
            raise InterfaceError("cursor already closed")
        rows = self._rows
        if rows is None:
            raise ProgrammingError(_NO_RESULTS)
        return rows

    def _check_values(self, rows: Any) -> None:
        """Raise the error of the first value of ``rows`` (those about to be fetched) its
        typecaster could not read, as psycopg2 raises when that row is fetched."""
        for row in rows:
            for value in row:
                failure = _failure_in(value)
                if failure is not None:
                    raise failure.error

    def _make_rows(self, rows: list[Any]) -> list[Any]:
        """Rows as this cursor hands them out (subclasses: dicts, namedtuples ...)."""
        factory = self.row_factory
        return rows if factory is None else [factory(self, row) for row in rows]

    def fetchone(self) -> Any:
        if self.name is not None:
            rows = self._fetch_named("FORWARD 1")
            return rows[0] if rows else None
        rows = self._check_fetch()
        position = self.rownumber
        if position >= len(rows):
            return None
        if self._poisoned:
            self._check_values(rows[position:position + 1])
        self.rownumber = position + 1
        row = rows[position]
        return row if self._plain and self.row_factory is None else self._make_rows([row])[0]

    def fetchmany(self, size: int | None = None) -> list[Any]:
        count = self.arraysize if size is None else size
        if self.name is not None:
            return self._fetch_named(f"FORWARD {int(count)}")
        rows = self._check_fetch()
        position = self.rownumber
        out = rows[position:position + count]
        if self._poisoned:
            self._check_values(out)
        self.rownumber = position + len(out)
        return out if self._plain and self.row_factory is None else self._make_rows(out)

    def fetchall(self) -> list[Any]:
        if self.name is not None:
            return self._fetch_named("FORWARD ALL")
        rows = self._rows
        if rows is None or self._closed:  # (_check_fetch's, the usual case inline)
            rows = self._check_fetch()
        position = self.rownumber
        out = rows[position:] if position else rows[:]
        if self._poisoned:
            self._check_values(out)
        self.rownumber = len(rows)
        return out if self._plain and self.row_factory is None else self._make_rows(out)

    def __iter__(self) -> Iterator[Any]:
        if self.name is None:
            while True:
                row = self.fetchone()
                if row is None:
                    return
                yield row
        while True:
            rows = self._fetch_named(f"FORWARD {int(self.itersize)}", page=True)
            self.rowcount = len(rows)
            for row in rows:
                self.rownumber += 1
                yield row
            if len(rows) < self.itersize:
                return

    def __next__(self) -> Any:
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row

    def scroll(self, value: int, mode: str = "relative") -> None:
        if mode not in ("relative", "absolute"):
            raise ProgrammingError(f"scroll mode must be 'relative' or 'absolute', not "
                                   f"'{mode}'")
        if self.name is not None:
            how = f"ABSOLUTE {int(value)}" if mode == "absolute" else f"{int(value)}"
            self._named_command(f"MOVE {how} FROM {quote_ident(self.name)}")
            self.rownumber = value if mode == "absolute" else self.rownumber + value
            return
        rows = self._check_fetch()
        target = value if mode == "absolute" else self.rownumber + value
        if not 0 <= target < len(rows):
            raise ProgrammingError("scroll destination out of bounds")
        self.rownumber = target

    def nextset(self) -> None:
        raise NotSupportedError("the nextset() method is not supported by PostgreSQL")

    def setinputsizes(self, sizes: Any) -> None:
        pass

    def setoutputsize(self, size: int, column: int | None = None) -> None:
        pass

    def cast(self, oid: int, s: str | None) -> Any:
        """``s`` read as type ``oid`` by the caster that wins on this cursor."""
        caster = caster_for(oid, self)
        return s if caster is None else caster(s, self)

    @property
    def pgresult_ptr(self) -> None:
        return None

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        if self.name is not None:
            self._close_named()
        self._closed = True
        self._rows = None

    def _close_named(self) -> None:
        """CLOSE the SQL cursor of this name, if one exists on the handle's session and
        the transaction can take a statement."""
        conn = self.connection
        if conn is None or conn._closed:
            return
        handle = conn.pgmux_handle
        if handle is None or handle.broken or handle.lease is None \
                or conn.get_transaction_status() == 3:
            return
        name = quote_ident(self.name or "")
        if not self._named_state:  # a cursor declared elsewhere, if it exists
            found = self._named_command(
                "SELECT 1 FROM pg_catalog.pg_cursors WHERE name = "
                + _literal(self.name or ""))
            if not found.rows:
                return
        try:
            self._named_command(f"CLOSE {name}")
        except ProgrammingError:
            pass  # ended with its transaction

    @property
    def closed(self) -> bool:
        return self._closed or bool(self.connection.closed)

    def __enter__(self) -> cursor:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- COPY ------------------------------------------------------------------------------
    def copy_expert(self, sql: Any, file: Any, size: int = 8192) -> None:
        """Run COPY ... FROM STDIN reading ``file``, or COPY ... TO STDOUT writing it."""
        conn = self.connection
        if self._closed or conn is None or conn._closed:
            raise InterfaceError("cursor already closed")
        sql = _text(conn, sql)
        self._query_args = (sql, None)
        self._query = None
        self.rowcount = -1
        self._rows = None
        self.rowcount = conn.pgmux_call(copy_expert, conn.pgmux_handle, sql, file, size,
                                        conn.pgmux_encoding, query=sql, cursor=self)

    def copy_from(self, file: Any, table: str, sep: str = "\t", null: str = "\\N",
                  size: int = 8192, columns: Any = None) -> None:
        self.copy_expert(copy_sql(table, columns, "FROM stdin", sep, null), file, size)

    def copy_to(self, file: Any, table: str, sep: str = "\t", null: str = "\\N",
                columns: Any = None) -> None:
        self.copy_expert(copy_sql(table, columns, "TO stdout", sep, null), file)

    def __repr__(self) -> str:
        return f"<cursor object at 0x{id(self):x}; closed: {int(self.closed)}>"


def _cast_or_failure(caster: Any, value: Any, cursor: Any) -> Any:
    """``caster(value, cursor)``, or the DecodeFailure raised when its row is fetched."""
    try:
        return caster(value, cursor)
    except Exception as error:
        decode_failures[0] += 1
        return DecodeFailure(error)


def _failure_in(value: Any) -> DecodeFailure | None:
    if type(value) is DecodeFailure:
        return value
    if type(value) is list:
        for item in value:
            found = _failure_in(item)
            if found is not None:
                return found
    return None


def _literal(text: str) -> str:
    body = text.replace("'", "''")
    return f"E'{body.replace(chr(92), chr(92) * 2)}'" if "\\" in body else f"'{body}'"


DEFAULT_CURSOR[0] = cursor
_CHAR_TYPES = frozenset({oids.BPCHAR, oids.VARCHAR})
_NUMERIC = oids.NUMERIC


def _describe(fields: tuple[Any, ...]) -> tuple[Column, ...]:
    """``cursor.description`` as psycopg2 builds it from libpq's result."""
    columns = []
    for field in fields:
        oid, modifier = field.type_oid, field.type_modifier
        size = field.type_size
        display = internal = precision = scale = None
        if oid in _CHAR_TYPES and modifier >= 4:
            display = internal = modifier - 4
        elif oid == _NUMERIC and modifier >= 4:
            precision = ((modifier - 4) >> 16) & 0xFFFF
            scale = (modifier - 4) & 0xFFFF
            display = internal = precision
        if internal is None:
            internal = size
        columns.append(Column(field.name, oid, display, internal, precision, scale, None,
                              field.table_oid or None, field.column_number or None))
    return tuple(columns)
