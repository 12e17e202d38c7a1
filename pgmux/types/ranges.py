"""Range and multirange types: ``Range``, ``Multirange``, their text and binary forms.

A ``Range`` is psycopg's: ``Range(lower, upper, bounds="[)")`` or ``Range(empty=True)``;
``None`` for a bound is infinity. Values are not normalised here: the server turns an
int4range ``[1,3]`` into ``[1,4)``, and a ``Range`` compares by its three parts.

Text output (range_out): ``empty``, or the bounds' brackets around the two bound texts,
either empty for infinity, double-quoted when empty or holding a quote, backslash, comma,
bracket, parenthesis or whitespace (inside quotes ``"`` and ``\\`` are doubled; range_in
also reads backslash escapes). Binary (range_send): a flags byte, then each finite bound
as a length and its subtype's binary form. A multirange is ``{range,range}`` in text and
a count of length-prefixed ranges in binary.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable
from typing import Any

from pgmux.types import oids
from pgmux.types.quoting import read_item
from pgmux.types.text import Decoder, Dumper

_BOUNDS = ("[)", "(]", "()", "[]")
_EMPTY, _LB_INC, _UB_INC, _LB_INF, _UB_INF = 0x01, 0x02, 0x04, 0x08, 0x10
_INT4 = struct.Struct("!i")


class Range:
    """A PostgreSQL range value: ``lower``, ``upper`` (None: unbounded) and ``bounds``
    (``"[)"``, ``"(]"``, ``"()"``, ``"[]"``), or empty (``Range(empty=True)``)."""

    __slots__ = ("_lower", "_upper", "_bounds")

    def __init__(self, lower: Any = None, upper: Any = None, bounds: str = "[)",
                 empty: bool = False) -> None:
        if empty:
            self._lower = self._upper = None
            self._bounds = ""
            return
        if bounds not in _BOUNDS:
            raise ValueError(f"range bounds must be one of {', '.join(_BOUNDS)}, not {bounds!r}")
        if lower is None and bounds[0] == "[":
            bounds = "(" + bounds[1]
        if upper is None and bounds[1] == "]":
            bounds = bounds[0] + ")"
        self._lower, self._upper, self._bounds = lower, upper, bounds

    @property
    def lower(self) -> Any:
        """The lower bound (None: unbounded, or an empty range)."""
        return self._lower

    @property
    def upper(self) -> Any:
        """The upper bound (None: unbounded, or an empty range)."""
        return self._upper

    @property
    def bounds(self) -> str:
        """``"[)"``, ``"(]"``, ``"()"`` or ``"[]"``; ``""`` for an empty range."""
        return self._bounds

    @property
    def isempty(self) -> bool:
        """The range is empty (``Range(empty=True)``)."""
        return not self._bounds

    @property
    def lower_inf(self) -> bool:
        """The range has no lower bound (False for an empty range)."""
        return bool(self._bounds) and self._lower is None

    @property
    def upper_inf(self) -> bool:
        """The range has no upper bound (False for an empty range)."""
        return bool(self._bounds) and self._upper is None

    @property
    def lower_inc(self) -> bool:
        """The lower bound is in the range."""
        return self._lower is not None and self._bounds[0] == "["

    @property
    def upper_inc(self) -> bool:
        """The upper bound is in the range."""
        return self._upper is not None and self._bounds[1] == "]"

    def __contains__(self, value: Any) -> bool:
        if not self._bounds:
            return False
        lower, upper = self._lower, self._upper
        if lower is not None and (value < lower or (value == lower and not self.lower_inc)):
            return False
        return upper is None or value < upper or (value == upper and self.upper_inc)

    def __bool__(self) -> bool:
        return bool(self._bounds)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Range):
            return NotImplemented
        return (self._lower, self._upper, self._bounds) == (other._lower, other._upper,
                                                            other._bounds)

    def __hash__(self) -> int:
        return hash((self._lower, self._upper, self._bounds))

    def __repr__(self) -> str:
        if not self._bounds:
            return f"{type(self).__name__}(empty=True)"
        return f"{type(self).__name__}({self._lower!r}, {self._upper!r}, {self._bounds!r})"

    def __getstate__(self) -> tuple[Any, Any, str]:
        return self._lower, self._upper, self._bounds

    def __setstate__(self, state: tuple[Any, Any, str]) -> None:
        self._lower, self._upper, self._bounds = state


class Multirange(list):
    """A PostgreSQL multirange: a list of ``Range`` (the server keeps them sorted, apart
    and non-empty)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list.__repr__(self)})"


# -- text decoding -----------------------------------------------------------------------

_QUOTE, _BACKSLASH, _COMMA = ord('"'), ord("\\"), ord(",")
_ENDS = frozenset(b",)]")  # what ends a bound


def _read_bound(data: bytes, pos: int) -> tuple[bytes | None, int]:
    """One bound's text from ``pos`` up to the comma or closing bracket after it (None:
    nothing there, i.e. unbounded), unquoted and unescaped; and where it stopped."""
    if data[pos] in _ENDS:
        return None, pos
    text, _, pos = read_item(data, pos, _ENDS, len(data))
    return text, pos


def _parse_range_at(data: bytes, pos: int, decode: Decoder) -> tuple[Range, int]:
    """The range written at ``pos`` and the position after it."""
    if data.startswith(b"empty", pos):
        return Range(empty=True), pos + 5
    opening = chr(data[pos])
    lower, pos = _read_bound(data, pos + 1)
    if data[pos] != _COMMA:
        raise ValueError(f"malformed range text: {data[:80]!r}")
    upper, pos = _read_bound(data, pos + 1)
    bounds = opening + chr(data[pos])
    return Range(None if lower is None else decode(lower),
                 None if upper is None else decode(upper), bounds), pos + 1


def parse_range_text(data: Any, decode: Decoder) -> Range:
    """A range from range_out text, each bound through ``decode`` (bytes -> value)."""
    data = bytes(data)
    if data == b"empty":
        return Range(empty=True)
    if _QUOTE not in data and _BACKSLASH not in data and data.count(b",") == 1:
        lower, upper = data[1:-1].split(b",")
        return Range(decode(lower) if lower else None, decode(upper) if upper else None,
                     chr(data[0]) + chr(data[-1]))
    found, end = _parse_range_at(data, 0, decode)
    if end != len(data):
        raise ValueError(f"malformed range text: {data[:80]!r}")
    return found


def parse_multirange_text(data: Any, decode: Decoder) -> Multirange:
    """A multirange from multirange_out text (``{[1,3),[5,7)}``)."""
    data = bytes(data)
    found = Multirange()
    pos, end = 1, len(data) - 1
    if data[:1] != b"{" or data[end:] != b"}":
        raise ValueError(f"malformed multirange text: {data[:80]!r}")
    while pos < end:
        if data[pos] in b", ":
            pos += 1
            continue
        item, pos = _parse_range_at(data, pos, decode)
        found.append(item)
    return found


# -- binary decoding ---------------------------------------------------------------------


def parse_range_binary(data: Any, decode: Decoder) -> Range:
    """A range from range_send output, each bound through ``decode``."""
    flags = data[0]
    if flags & _EMPTY:
        return Range(empty=True)
    pos = 1
    lower = upper = None
    if not flags & _LB_INF:
        size = _INT4.unpack_from(data, pos)[0]
        lower = decode(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
    if not flags & _UB_INF:
        size = _INT4.unpack_from(data, pos)[0]
        upper = decode(data[pos + 4 : pos + 4 + size])
    bounds = ("[" if flags & _LB_INC else "(") + ("]" if flags & _UB_INC else ")")
    return Range(lower, upper, bounds)


def parse_multirange_binary(data: Any, decode: Decoder) -> Multirange:
    """A multirange from multirange_send output, each range's bounds through ``decode``."""
    count = _INT4.unpack_from(data, 0)[0]
    found = Multirange()
    pos = 4
    for _ in range(count):
        size = _INT4.unpack_from(data, pos)[0]
        found.append(parse_range_binary(data[pos + 4 : pos + 4 + size], decode))
        pos += 4 + size
    return found


def make_range_decoder(decoders: dict[int, Decoder], subtype: int, fallback: Decoder,
                       parse: Callable[[Any, Decoder], Any]) -> Decoder:
    """A decoder of a range (or multirange) type reading its bounds with the decoder of
    ``subtype`` in ``decoders`` at call time (``fallback`` when there is none)."""
    get = decoders.get

    def decode_range(data: Any) -> Any:
        return parse(data, get(subtype, fallback))

    return decode_range


# -- encoding ----------------------------------------------------------------------------

# The range type that holds bounds of these types; int bounds go untyped (the server casts
# neither int4range to int8range nor the other way, so only the context can tell).
RANGE_OF = {oids.NUMERIC: oids.NUMRANGE, oids.DATE: oids.DATERANGE,
            oids.TIMESTAMP: oids.TSRANGE, oids.TIMESTAMPTZ: oids.TSTZRANGE}
MULTIRANGE_OF = {oids.NUMRANGE: oids.NUMMULTIRANGE, oids.DATERANGE: oids.DATEMULTIRANGE,
                 oids.TSRANGE: oids.TSMULTIRANGE, oids.TSTZRANGE: oids.TSTZMULTIRANGE}
_NEEDS_QUOTES = re.compile(r'[\s"\\,()\[\]]|\A\Z')


def _bound_text(text: str) -> str:
    if _NEEDS_QUOTES.search(text) is None:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def dump_range(value: Range, dumper_for: Callable[[type], Dumper]) -> tuple[int, str]:
    """(type oid, input text) of a range: numrange, daterange, tsrange or tstzrange by its
    bounds' type; 0 (the server infers it) for int bounds, others, and empty ranges."""
    if value.isempty:
        return 0, "empty"
    oid = 0
    parts = []
    for bound in (value.lower, value.upper):
        if bound is None:
            parts.append("")
            continue
        bound_oid, text = dumper_for(type(bound))(bound)
        oid = oid or RANGE_OF.get(bound_oid, 0)
        parts.append(_bound_text(text))
    bounds = value.bounds
    return oid, f"{bounds[0]}{parts[0]},{parts[1]}{bounds[1]}"


def dump_multirange(value: Iterable[Range],
                    dumper_for: Callable[[type], Dumper]) -> tuple[int, str]:
    """(type oid, input text) of a multirange (its ranges' type's multirange, else 0)."""
    oid = 0
    parts = []
    for item in value:
        range_oid, text = dump_range(item, dumper_for)
        oid = oid or MULTIRANGE_OF.get(range_oid, 0)
        parts.append(text)
    return oid, "{" + ",".join(parts) + "}"


# The built-in range types: range oid -> subtype oid; multirange oid -> range oid.
BUILTIN_RANGES = {
    oids.INT4RANGE: oids.INT4, oids.INT8RANGE: oids.INT8, oids.NUMRANGE: oids.NUMERIC,
    oids.TSRANGE: oids.TIMESTAMP, oids.TSTZRANGE: oids.TIMESTAMPTZ, oids.DATERANGE: oids.DATE,
}
BUILTIN_MULTIRANGES = {
    oids.INT4MULTIRANGE: oids.INT4RANGE, oids.INT8MULTIRANGE: oids.INT8RANGE,
    oids.NUMMULTIRANGE: oids.NUMRANGE, oids.TSMULTIRANGE: oids.TSRANGE,
    oids.TSTZMULTIRANGE: oids.TSTZRANGE, oids.DATEMULTIRANGE: oids.DATERANGE,
}

__all__ = ["Multirange", "Range", "dump_multirange", "dump_range", "parse_multirange_binary",
           "parse_multirange_text", "parse_range_binary", "parse_range_text"]
