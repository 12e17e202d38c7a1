"""COPY on a DB-API cursor: psycopg 3's ``cursor.copy(sql)`` and psycopg2's ``copy_expert``,
``copy_from`` and ``copy_to``, on the connection's pinned connection.

``COPY ... FROM STDIN``: what a ``copy()`` block writes (bytes, str or rows through
``write_row``) is sent when the block ends without an exception, in one COPY (nothing
is sent if it raises). ``COPY ... TO STDOUT``: the block's iteration (or ``read()``)
streams the data as it arrives, a row per chunk.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pgmux.errors import NotSupportedError, ProgrammingError
from pgmux.session import quote_ident
from pgmux.sql.scanner import mask_sql
from pgmux.types import encode_copy_row

if TYPE_CHECKING:
    from pgmux.dbapi.connection import Connection

_FROM_STDIN = re.compile(r"\bfrom\s+stdin\b", re.IGNORECASE | re.ASCII)
_TO_STDOUT = re.compile(r"\bto\s+stdout\b", re.IGNORECASE | re.ASCII)


def direction(sql: str) -> str:
    """"in" for COPY ... FROM STDIN, "out" for COPY ... TO STDOUT (literals masked)."""
    try:
        masked = mask_sql(sql)
    except ValueError:
        masked = sql
    if _FROM_STDIN.search(masked):
        return "in"
    if _TO_STDOUT.search(masked):
        return "out"
    raise ProgrammingError("a COPY on a cursor must read FROM STDIN or write TO STDOUT")


class Copy:
    """The block of ``cursor.copy(sql)`` (psycopg 3's ``Copy``)."""

    def __init__(self, connection: Connection, sql: str):
        self._connection = connection
        self._sql = sql
        self._direction = direction(sql)
        self._chunks: list[bytes] = []
        self._reader: Iterator[bytes] | None = None
        self.rowcount = -1

    def __enter__(self) -> Copy:
        if self._direction == "out":
            self._reader = self._connection.start_copy_out(self._sql)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self._direction == "in":
            if exc is None:
                self.rowcount = self._connection.run_copy_in(self._sql, self._chunks)
            self._chunks = []
        elif self._reader is not None:
            for _ in self:  # read to the end: the connection is then free again
                pass

    # COPY FROM STDIN
    def write(self, data: bytes | str) -> None:
        self._writing()
        self._chunks.append(data.encode() if isinstance(data, str) else bytes(data))

    def write_row(self, row: Sequence[Any]) -> None:
        self._writing()
        self._chunks.append(encode_copy_row(row, self._connection.client.types))

    def _writing(self) -> None:
        if self._direction != "in":
            raise ProgrammingError("this COPY writes TO STDOUT: read it")

    # COPY TO STDOUT
    def __iter__(self) -> Iterator[bytes]:
        while True:
            chunk = self.read()
            if not chunk:
                return
            yield chunk

    def read(self) -> bytes:
        """The next chunk of data (a row in text format), b"" at the end."""
        if self._direction != "out":
            raise ProgrammingError("this COPY reads FROM STDIN: write to it")
        reader = self._reader
        if reader is None:
            return b""
        chunk = self._connection.copy_out_chunk(reader)
        if chunk is None:
            self._reader = None
            return b""
        return chunk

    def rows(self) -> Iterator[tuple[Any, ...]]:
        raise NotSupportedError("Copy.rows(): read the text format with read() or iteration")


def copy_expert(connection: Connection, sql: str, file: Any, size: int = 8192) -> int:
    """psycopg2's ``copy_expert``: COPY between the server and a file-like object."""
    if direction(sql) == "in":
        return connection.run_copy_in(sql, _read_chunks(file, size))
    text = isinstance(file, io.TextIOBase)
    with Copy(connection, sql) as copy:
        for chunk in copy:
            file.write(chunk.decode() if text else chunk)
    return -1


def table_sql(table: str, columns: Sequence[str] | None, way: str, sep: str,
              null: str) -> str:
    """psycopg2's ``copy_from`` / ``copy_to`` statement for ``table``."""
    names = ".".join(quote_ident(part) for part in table.split("."))
    if columns:
        names += " (" + ", ".join(quote_ident(column) for column in columns) + ")"
    options = f"DELIMITER {_literal(sep)} NULL {_literal(null)}"
    return f"COPY {names} {way} WITH ({options.replace(' NULL', ', NULL')})"


def _literal(text: str) -> str:
    return "E'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def _read_chunks(file: Any, size: int) -> Iterator[bytes]:
    while True:
        chunk = file.read(size)
        if not chunk:
            return
        yield chunk.encode() if isinstance(chunk, str) else bytes(chunk)
