"""pyformat parameters (psycopg2's rules) turned into PostgreSQL's ``$n``, once per SQL text.

``%s`` is the next positional parameter, ``%(name)s`` a named one (a name used twice is
one ``$n``), ``%%`` a literal percent sign. Placeholders are found only in SQL proper:
inside string literals, quoted identifiers, comments and dollar quotes (the SQL scanner's
``mask_sql`` tells them apart) ``%s`` stays text and only ``%%`` becomes ``%``, as psycopg2's
interpolation would leave it. The values go to the server as real parameters, never
spliced into the text. Without parameters (``None``) the SQL is sent as it is.

A tuple value fills its placeholder with a parenthesised list of parameters, one per item
(``WHERE id IN %s`` with ``(1, 2, 3)`` becomes ``WHERE id IN ($1, $2, $3)``), as psycopg2
renders it; nested tuples nest. A list stays one parameter: an array.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from pgmux.cache import put_bounded
from pgmux.errors import ProgrammingError
from pgmux.sql.scanner import mask_sql

_CACHE_SIZE = 4096
_MAX_CACHED_SQL = 65536
_TOKEN = re.compile(r"%(?:\(([^)]*)\))?(.?)", re.DOTALL)


class Converted(NamedTuple):
    """One SQL text in ``$n`` form and what fills its parameters."""

    sql: str
    names: tuple[str, ...] | None  # named style: the name of $1, $2, ...; None: positional
    placeholders: int  # how many parameters the statement takes
    # The text between placeholders (one more than ``slots``) and, for each placeholder in
    # order, the 0-based parameter it stands for: what tuple expansion and mogrify rebuild.
    parts: tuple[str, ...] = ("",)
    slots: tuple[int, ...] = ()


# The conversions, by text, one dict per style (a hit hashes no (text, style) tuple).
_positional: dict[str, Converted] = {}
_named: dict[str, Converted] = {}


def convert(sql: str, named: bool) -> Converted:
    """``sql`` with its placeholders numbered (cached per text and style)."""
    cache = _named if named else _positional
    converted = cache.get(sql)
    if converted is None:
        converted = _convert(sql, named)
        if len(sql) <= _MAX_CACHED_SQL:
            put_bounded(cache, sql, converted, _CACHE_SIZE)
    return converted


def bind(sql: str, params: Any) -> tuple[str, list[Any] | None]:
    """(SQL for the server, its parameter values); values None when ``params`` is None."""
    if params is None:
        return sql, None
    converted = _positional.get(sql)
    if converted is not None and (type(params) is tuple or type(params) is list) and len(
            params) == converted.placeholders:  # (values_for's usual case, inline)
        values = list(params)
    else:
        converted, values = values_for(sql, params)
    for value in values:
        if type(value) is tuple:
            return expand_tuples(converted, values)
    return converted.sql, values


def values_for(sql: str, params: Any) -> tuple[Converted, list[Any]]:
    """The converted text of ``sql`` and the value of each of its parameters, in order."""
    if type(params) is not tuple and type(params) is not list:  # (the usual: no ABC checks)
        if isinstance(params, Mapping):
            converted = convert(sql, True)
            try:
                return converted, [params[name] for name in converted.names or ()]
            except KeyError as exc:
                raise ProgrammingError(
                    f"no value for the parameter %({exc.args[0]})s") from None
        if isinstance(params, (str, bytes)) or not isinstance(params, Sequence):
            raise ProgrammingError("parameters must be a sequence (for %s) or a mapping (for "
                                   f"%(name)s), not {type(params).__name__}")
    converted = convert(sql, False)
    if len(params) != converted.placeholders:
        raise ProgrammingError(f"the statement has {converted.placeholders} %s placeholders "
                               f"but {len(params)} parameters were given")
    return converted, list(params)


def expand_tuples(converted: Converted, values: list[Any]) -> tuple[str, list[Any]]:
    """The statement with each tuple value spread over a parenthesised list of parameters."""
    flat: list[Any] = []
    texts: dict[int, str] = {}  # parameter index -> its text, once per parameter

    def render(value: Any) -> str:
        if type(value) is not tuple:
            flat.append(value)
            return f"${len(flat)}"
        if not value:
            raise ProgrammingError("an empty tuple cannot fill a placeholder: SQL has no "
                                   "empty list (test for it, or pass a list to = ANY(%s))")
        return "(" + ", ".join(render(item) for item in value) + ")"

    pieces = [converted.parts[0]]
    for slot, text in zip(converted.slots, converted.parts[1:], strict=True):
        if slot not in texts:
            texts[slot] = render(values[slot])
        pieces.append(texts[slot])
        pieces.append(text)
    return "".join(pieces), flat


def _convert(sql: str, named: bool) -> Converted:
    if "%" not in sql:
        return Converted(sql, () if named else None, 0, (sql,))
    try:
        masked = mask_sql(sql)
    except ValueError:  # an unterminated literal: the server will say so
        masked = sql
    parts: list[str] = []  # the finished text between placeholders
    piece: list[str] = []  # the text since the last placeholder
    slots: list[int] = []
    numbers: dict[str, int] = {}
    count = 0
    pos = 0
    for match in _TOKEN.finditer(sql):
        start, end = match.span()
        piece.append(sql[pos:start])
        pos = end
        name, kind = match.groups()
        if masked[start:end] != sql[start:end]:  # inside a literal or comment
            piece.append("%" if match.group() == "%%" else sql[start:end])
            continue
        if name is None and kind == "%":
            piece.append("%")
        elif kind != "s":
            raise ProgrammingError(f"unsupported placeholder {match.group()!r} at offset "
                                   f"{start}; write %% for a literal percent sign")
        elif (name is not None) != named:
            raise ProgrammingError("mixed placeholder styles: use %s with a sequence of "
                                   "parameters, %(name)s with a mapping")
        else:
            if name is None:
                count += 1
                number = count
            else:
                number = numbers.get(name) or numbers.setdefault(name, len(numbers) + 1)
            parts.append("".join(piece))
            piece = []
            slots.append(number - 1)
    piece.append(sql[pos:])
    parts.append("".join(piece))
    text = parts[0] + "".join(f"${slot + 1}{after}" for slot, after
                              in zip(slots, parts[1:], strict=True))
    if named:
        return Converted(text, tuple(numbers), len(numbers), tuple(parts), tuple(slots))
    return Converted(text, None, count, tuple(parts), tuple(slots))


def holds_nul(values: Sequence[Any]) -> bool:
    """Whether a str among ``values`` (or in their lists and tuples) holds a NUL character."""
    for value in values:
        if type(value) is str:
            if "\x00" in value:
                return True
        elif isinstance(value, (list, tuple)) and holds_nul(value):
            return True
    return False
