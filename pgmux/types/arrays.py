"""Array codecs: the text form (``{1,NULL,"a,b"}``, nested, with bounds), binary, and encoding.

Text output rules (array_out): elements are separated by the element type's delimiter
(``,`` for all but box, which uses ``;``); an element is double-quoted when it is empty,
equals NULL case-insensitively, or contains a brace, quote, backslash, whitespace or the
delimiter, and inside quotes ``"`` and ``\\`` are backslash-escaped; an unquoted NULL is
the SQL NULL; an array whose lower bounds are not 1 starts with ``[lo:hi]...=``. Arrays
decode to (nested) lists; the bounds are dropped.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from math import prod
from typing import Any

from pgmux.errors import InterfaceError
from pgmux.types import binary, oids
from pgmux.types.text import Decoder, Dumper

# -- text decoding ---------------------------------------------------------------------------

# A brace, the delimiter (@), a quoted element, an unquoted element, or blanks.
_TOKEN_TEMPLATE = rb'[{}]|@|"(?:[^"\\]|\\.)*"|[^{}"\s@](?:[^{}"@]*[^{}"\s@])?|\s+'
_TOKEN_CACHE: dict[bytes, re.Pattern[bytes]] = {}
_OPEN, _CLOSE, _QUOTE = ord("{"), ord("}"), ord('"')
_UNESCAPE = re.compile(rb"\\(.)", re.DOTALL)


def _token_pattern(delim: bytes) -> re.Pattern[bytes]:
    pattern = _TOKEN_CACHE.get(delim)
    if pattern is None:
        pattern = re.compile(_TOKEN_TEMPLATE.replace(b"@", re.escape(delim)), re.DOTALL)
        _TOKEN_CACHE[delim] = pattern
    return pattern


_N, _SPACE = ord("N"), ord(" ")


def parse_text_array(data: Any, decode: Decoder, delim: bytes = b",") -> list[Any]:
    """Decode array text into nested lists, each element through ``decode`` (bytes -> value)."""
    if type(data) is not bytes:
        data = bytes(data)
    if data[0] != _OPEN:  # explicit bounds: "[0:1]={1,2}"
        data = data[data.index(b"=") + 1 :]
    # (membership of an int byte is several times faster than of a one-byte bytes)
    if data[1] == _OPEN or _QUOTE in data or _SPACE in data:  # nested, quoted or spaced
        return _parse_general(data, decode, delim)
    if len(data) == 2:
        return []
    items = data[1:-1].split(delim)
    if _N not in data:  # no NULL
        return list(map(decode, items))
    return [None if item == b"NULL" else decode(item) for item in items]


def _parse_general(data: bytes, decode: Decoder, delim: bytes) -> list[Any]:
    delim_char = delim[0]
    stack: list[list[Any]] = []
    current: list[Any] | None = None
    root: list[Any] = []
    for token in _token_pattern(delim).findall(data):
        first = token[0]
        if first == _OPEN:
            child: list[Any] = []
            if current is None:
                root = child
            else:
                current.append(child)
                stack.append(current)
            current = child
        elif first == _CLOSE:
            current = stack.pop() if stack else None
        elif first == delim_char or token.isspace():
            continue
        elif current is None:
            raise ValueError(f"malformed array text: {data[:80]!r}")
        elif first == _QUOTE:
            inner = token[1:-1]
            current.append(decode(_UNESCAPE.sub(rb"\1", inner) if b"\\" in inner else inner))
        else:
            current.append(None if token.upper() == b"NULL" else decode(token))
    return root


def make_text_array_decoder(
    decoders: dict[int, Decoder], element_oid: int, delim: bytes, fallback: Decoder
) -> Decoder:
    """A decoder for an array type that looks its element decoder up at call time."""
    get = decoders.get

    def decode_array(data: Any) -> list[Any]:
        return parse_text_array(data, get(element_oid, fallback), delim)

    return decode_array


# -- binary decoding -------------------------------------------------------------------------

_HEAD = struct.Struct("!iiIi")  # ndim, has-nulls flag, element oid, first dimension's size
_MAX_BULK = 100_000  # elements read in one unpack at most (its tuple holds two per element)
_INT4 = struct.Struct("!i")


def parse_binary_array(data: Any, decoder_for: Callable[[int], Decoder | None]) -> list[Any]:
    """Decode array_send output; elements through the binary decoder of the sent element oid."""
    if len(data) == 12:  # no dimensions: an empty array
        return []
    ndim, has_nulls, element_oid, count = _HEAD.unpack_from(data)  # count: the first size
    if ndim == 0:
        return []
    if ndim != 1:
        dims = [_INT4.unpack_from(data, 12 + 8 * i)[0] for i in range(ndim)]  # (size, lower)
        count = prod(dims)
    decode = decoder_for(element_oid) or bytes
    pos = 12 + 8 * ndim
    fixed = None if has_nulls else binary.fixed_width(decode)
    flat = _fixed_elements(data, pos, count, fixed) if fixed else None
    if flat is None:
        flat = _elements(data, pos, count, decode)
    return _reshape(flat, dims) if ndim != 1 else flat


def _fixed_elements(data: Any, pos: int, count: int, fixed: tuple) -> list[Any] | None:
    """Fixed-width elements in one unpack (length, value, length, value...); None if a
    length is not the width (a NULL, or not this type after all)."""
    code, width, convert = fixed
    if count > _MAX_BULK or len(data) != pos + count * (4 + width):
        return None
    fields = struct.unpack_from("!" + ("i" + code) * count, data, pos)
    if fields[0::2].count(width) != count:
        return None
    values = fields[1::2]
    return list(values) if convert is None else list(map(convert, values))


def _elements(data: Any, pos: int, count: int, decode: Decoder) -> list[Any]:
    unpack_len = _INT4.unpack_from
    flat: list[Any] = []
    append = flat.append
    for _ in range(count):
        size = unpack_len(data, pos)[0]
        pos += 4
        if size < 0:
            append(None)
        else:
            append(decode(data[pos : pos + size]))
            pos += size
    return flat


def _reshape(flat: list[Any], dims: list[int]) -> list[Any]:
    for size in reversed(dims[1:]):
        flat = [flat[i : i + size] for i in range(0, len(flat), size)]
    return flat


def make_binary_array_decoder(decoders: dict[int, Decoder]) -> Decoder:
    get = decoders.get

    def decode_array(data: Any) -> list[Any]:
        return parse_binary_array(data, get)

    return decode_array


# -- encoding --------------------------------------------------------------------------------

_QUOTE_CACHE: dict[str, re.Pattern[str]] = {}


def _needs_quotes(delim: str) -> re.Pattern[str]:
    pattern = _QUOTE_CACHE.get(delim)
    if pattern is None:
        pattern = re.compile(r'[{}"\\\s' + re.escape(delim) + r"]|\A\Z|\Anull\Z", re.IGNORECASE)
        _QUOTE_CACHE[delim] = pattern
    return pattern


def quote_element(text: str, delim: str = ",") -> str:
    """An element's text as array_in reads it back verbatim."""
    if _needs_quotes(delim).search(text) is None:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


_NUMBER_LADDER = frozenset({oids.INT4, oids.INT8, oids.FLOAT8, oids.NUMERIC})


def common_element_oid(element_oids: set[int]) -> int:
    """The element type of a list whose elements dumped as these types; 0 if they disagree."""
    if len(element_oids) == 1:
        return next(iter(element_oids))
    if not element_oids or not element_oids <= _NUMBER_LADDER:
        return 0
    if oids.NUMERIC in element_oids or {oids.INT8, oids.FLOAT8} <= element_oids:
        return oids.NUMERIC
    return oids.FLOAT8 if oids.FLOAT8 in element_oids else oids.INT8


def _first_leaf(items: list[Any]) -> Any:
    for item in items:
        if isinstance(item, list):
            item = _first_leaf(item)
        if item is not None:
            return item
    return None


def dump_array(
    value: list[Any], dumper_for: Callable[[type], Dumper], delimiter_of: Callable[[int], str]
) -> tuple[int, str]:
    """(element type oid, array text) of a list; nested lists are further dimensions.

    The element type comes from the elements (ints widen to int8 / numeric as needed);
    ``[]`` and all-NULL lists give element oid 0, and so do elements of unrelated types.
    """
    leaf = _first_leaf(value)
    delim = "," if leaf is None else delimiter_of(dumper_for(type(leaf))(leaf)[0])
    element_oids: set[int] = set()
    text = _render(value, dumper_for, delim, _needs_quotes(delim).search, element_oids)
    return common_element_oid(element_oids), text


def _render(items, dumper_for, delim, needs_quotes, element_oids) -> str:
    parts = []
    for item in items:
        if item is None:
            parts.append("NULL")
        elif isinstance(item, list):
            parts.append(_render(item, dumper_for, delim, needs_quotes, element_oids))
        else:
            oid, text = dumper_for(type(item))(item)
            element_oids.add(oid)
            if needs_quotes(text) is not None:
                text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
            parts.append(text)
    return "{" + delim.join(parts) + "}"


def check_no_nul(text: str) -> str:
    if "\x00" in text:
        raise InterfaceError("a list parameter contains a str with a NUL character (\\x00)")
    return text
