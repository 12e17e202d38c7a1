"""Query results: the public ``Result`` and what callers take from one."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol, overload

from pgmux._native import adopt
from pgmux.cache import put_bounded
from pgmux.errors import DataError, InterfaceError
from pgmux.protocol import backend

Row = tuple[Any, ...]
ROWCOUNTS: dict[str, int] = {}  # command tag -> its row count (a DB-API cursor reads it too)
ROWCOUNTS_LIMIT = 1024


def rowcount_from_tag(tag: str) -> int:
    """Rows affected or returned according to a command tag, -1 if the tag has no count."""
    count = ROWCOUNTS.get(tag)
    if count is None:
        _, _, last = tag.rpartition(" ")
        count = int(last) if last.isdigit() else -1
        put_bounded(ROWCOUNTS, tag, count, ROWCOUNTS_LIMIT)
    return count


class DecodeError(DataError):
    """A column value could not be converted to a Python object (a DataError, as psycopg
    raises for the data it cannot load)."""


class Result(Sequence[Row]):
    """The rows of one statement, with its column names and command tag.

    A sequence of row tuples: ``res[0]``, ``len(res)``, ``list(res)``. ``fields`` are the
    RowDescription's columns (:class:`~pgmux.protocol.backend.Column`: name, type OID,
    size, modifier ...); () without one.
    """

    __slots__ = ("rows", "columns", "command", "fields")

    def __init__(self, rows: list[Row], columns: tuple[str, ...], command: str,
                 fields: tuple[backend.Column, ...] = ()):
        self.rows = rows
        self.columns = columns
        self.command = command
        self.fields = fields

    @property
    def rowcount(self) -> int:
        """Rows affected or returned per the command tag (-1 when the tag has no count)."""
        return rowcount_from_tag(self.command)

    @overload
    def __getitem__(self, index: int) -> Row: ...
    @overload
    def __getitem__(self, index: slice) -> list[Row]: ...
    def __getitem__(self, index: int | slice) -> Row | list[Row]:
        return self.rows[index]

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Result):
            return self.rows == other.rows and self.columns == other.columns
        if isinstance(other, list):
            return self.rows == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<Result {self.command!r} columns={self.columns!r} rows={len(self.rows)}>"


class Rows(Protocol):
    """A ``Result``, or the successful reply one is made of."""

    rows: list[Row]


def first_row(result: Rows) -> Row | None:
    """The first row of ``result``, or None."""
    return result.rows[0] if result.rows else None


def first_value(result: Rows) -> Any:
    """The first column of the first row, or None; a row without columns is misuse."""
    rows = result.rows
    if not rows:
        return None
    row = rows[0]
    if not row:
        raise InterfaceError("the statement returned a row without columns: there is no value")
    return row[0]

adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
