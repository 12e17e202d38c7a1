"""psycopg2's COPY methods (``copy_expert``, ``copy_from``, ``copy_to``) on a handle's
pinned connection: text in the connection's encoding, rows counted as psycopg2 counts."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import Any

from pgmux.dbapi.copy import direction
from pgmux.psycopg2._exceptions import QueryCanceledError
from pgmux.session import quote_ident

_BINARY = re.compile(r"\bbinary\b", re.IGNORECASE)


def copy_sql(table: str, columns: Any, direction: str, sep: str, null: str) -> str:
    """psycopg2's statement for ``copy_from``/``copy_to`` (names quoted, as 2.9 does)."""
    if not isinstance(sep, str):
        raise TypeError("sep must be a str")
    target = quote_ident(table)
    if columns:
        target += " (" + ", ".join(quote_ident(column) for column in columns) + ")"
    return (f"COPY {target} {direction} WITH DELIMITER AS {_literal(sep)} "
            f"NULL AS {_literal(null)}")


def _literal(text: str) -> str:
    body = text.replace("'", "''")
    return f"E'{body.replace(chr(92), chr(92) * 2)}'" if "\\" in body else f"'{body}'"


def _chunks(file: Any, size: int, encoding: str, transcode: bool) -> Iterator[bytes]:
    """The file's data as UTF-8 bytes (what pgmux's connections speak); an exception of
    the file's is the COPY's failure, as psycopg2 reports it."""
    reader = getattr(file, "read", None)
    if reader is None:
        raise TypeError("file must be a readable file-like object for COPY FROM")
    while True:
        try:
            data = reader(size)
        except Exception as error:
            raise QueryCanceledError(
                f"error in .read() call: {type(error).__name__} {error}") from error
        if not data:
            return
        if isinstance(data, str):
            yield data.encode()
        elif transcode:
            yield bytes(data).decode(encoding).encode()
        else:
            yield bytes(data)


def copy_expert(dbconn: Any, sql: str, file: Any, size: int, encoding: str) -> int:
    """COPY between the server and ``file``; the rows copied."""
    transcode = encoding not in ("utf_8", "utf-8") and not _BINARY.search(sql)
    if direction(sql) == "in":
        return int(dbconn.run_copy_in(sql, _chunks(file, size, encoding, transcode)))
    writer = getattr(file, "write", None)
    if writer is None:
        raise TypeError("file must be a writable file-like object for COPY TO")
    text = isinstance(file, io.TextIOBase)
    chunks = dbconn.start_copy_out(sql)
    binary = bool(_BINARY.search(sql))
    rows = 0
    while True:
        chunk = dbconn.copy_out_chunk(chunks)
        if chunk is None:
            return rows
        rows += chunk.count(b"\n") if not binary else 1
        if text:
            writer(chunk.decode())
        elif transcode:
            writer(chunk.decode().encode(encoding))
        else:
            writer(chunk)
