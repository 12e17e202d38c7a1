"""Query results: the public ``Result`` and the per-operation accumulator that builds it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from struct import Struct
from typing import Any, overload

from pgmux.errors import DatabaseError, Error, ProtocolError
from pgmux.protocol.backend import Column, parse_data_row, rowcount_from_tag

_i32 = Struct("!i")
_unpack_i32 = _i32.unpack_from
_unpack_i16 = Struct("!h").unpack_from

# Columns of more than this many bytes inside a large message are handed to decoders
# as memoryviews, so a 1 MiB field is not copied just to be decoded.
_VIEW_THRESHOLD = 64 * 1024

Decoder = Callable[[bytes], Any]
Row = tuple[Any, ...]


class DecodeError(Error):
    """A column value could not be converted to a Python object."""


class Result(Sequence[Row]):
    """The rows of one statement, with its column names and command tag.

    A sequence of row tuples: ``res[0]``, ``len(res)``, ``list(res)``. ``fields`` are the
    RowDescription's columns (name, type OID, size, modifier ...); () without one.
    """

    __slots__ = ("rows", "columns", "command", "fields")

    def __init__(self, rows: list[Row], columns: tuple[str, ...], command: str,
                 fields: tuple[Column, ...] = ()):
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
    def __getitem__(self, index):
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


class RowShape:
    """What a statement returns: column descriptions, names and one decoder per column."""

    __slots__ = ("columns", "names", "decoders")

    def __init__(self, columns: tuple[Column, ...], decoders: list[Decoder]):
        self.columns = columns
        self.names = tuple(c.name for c in columns)
        self.decoders = decoders


EMPTY_SHAPE = RowShape((), [])


def decode_row(payload: bytes, decoders: list[Decoder]) -> Row:
    """Decode one DataRow payload with one decoder per column."""
    if type(payload) is not bytes:
        return _decode_large_row(payload, decoders)
    (count,) = _unpack_i16(payload)
    if count != len(decoders):
        raise ProtocolError(f"DataRow has {count} columns, RowDescription announced {len(decoders)}")
    values = []
    append = values.append
    pos = 2
    for decode in decoders:
        (size,) = _unpack_i32(payload, pos)
        pos += 4
        if size == -1:
            append(None)
            continue
        if size < 0:
            raise ProtocolError(f"DataRow column with length {size}")
        end = pos + size
        append(decode(payload[pos:end]))
        pos = end
    if pos != len(payload):
        raise ProtocolError("DataRow length does not match its columns")
    return tuple(values)


def _decode_large_row(payload: bytearray, decoders: list[Decoder]) -> Row:
    view = memoryview(payload)
    (count,) = _unpack_i16(view)
    if count != len(decoders):
        raise ProtocolError(f"DataRow has {count} columns, RowDescription announced {len(decoders)}")
    values = []
    pos = 2
    for decode in decoders:
        (size,) = _unpack_i32(view, pos)
        pos += 4
        if size == -1:
            values.append(None)
            continue
        end = pos + size
        if size < 0 or end > len(view):
            raise ProtocolError(f"DataRow column with length {size}")
        field = view[pos:end]
        values.append(decode(field if size > _VIEW_THRESHOLD else bytes(field)))
        pos = end
    if pos != len(view):
        raise ProtocolError("DataRow length does not match its columns")
    return tuple(values)


class Reply:
    """Accumulates the messages answering one operation into a ``Result`` or an error."""

    __slots__ = ("shape", "rows", "command", "error", "suspended")

    def __init__(self, shape: RowShape | None = None):
        self.shape = shape
        self.rows: list[Row] = []
        self.command = ""
        self.error: BaseException | None = None
        self.suspended = False

    def add_row(self, payload: bytes) -> None:
        if self.error is not None:
            return
        shape = self.shape
        if shape is None:
            raise ProtocolError("DataRow before any RowDescription")
        try:
            self.rows.append(decode_row(payload, shape.decoders))
        except ProtocolError:
            raise
        except Exception as exc:  # a codec rejected the value: the caller gets the reason
            parse_data_row(payload)  # ... unless the row itself is malformed: ProtocolError
            self.error = DecodeError(f"could not decode a result value: {exc!r}")

    def fail(self, fields: dict[str, str]) -> None:
        self.error = DatabaseError.from_fields(fields)

    def result(self) -> Result:
        if self.error is not None:
            raise self.error
        shape = self.shape or EMPTY_SHAPE
        return Result(self.rows, shape.names, self.command, shape.columns)
