"""pyformat parameters (psycopg2's rules) turned into PostgreSQL's ``$n``, once per SQL text.

``%s`` is the next positional parameter, ``%(name)s`` a named one (a name used twice is
one ``$n``), ``%%`` a literal percent sign. Placeholders are found only in SQL proper:
inside string literals, quoted identifiers, comments and dollar quotes (the SQL scanner's
``mask_sql`` tells them apart) ``%s`` stays text and only ``%%`` becomes ``%``, as psycopg2's
interpolation would leave it. The values go to the server as real parameters, never
spliced into the text. Without parameters (``None``) the SQL is sent as it is.
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


_cache: dict[tuple[str, bool], Converted] = {}


def convert(sql: str, named: bool) -> Converted:
    """``sql`` with its placeholders numbered (cached per text and style)."""
    key = (sql, named)
    try:
        return _cache[key]
    except KeyError:
        pass
    converted = _convert(sql, named)
    if len(sql) <= _MAX_CACHED_SQL:
        put_bounded(_cache, key, converted, _CACHE_SIZE)
    return converted


def bind(sql: str, params: Any) -> tuple[str, list[Any] | None]:
    """(SQL for the server, its parameter values); values None when ``params`` is None."""
    if params is None:
        return sql, None
    if isinstance(params, Mapping):
        converted = convert(sql, True)
        try:
            return converted.sql, [params[name] for name in converted.names or ()]
        except KeyError as exc:
            raise ProgrammingError(f"no value for the parameter %({exc.args[0]})s") from None
    if isinstance(params, (str, bytes)) or not isinstance(params, Sequence):
        raise ProgrammingError("parameters must be a sequence (for %s) or a mapping (for "
                               f"%(name)s), not {type(params).__name__}")
    converted = convert(sql, False)
    if len(params) != converted.placeholders:
        raise ProgrammingError(f"the statement has {converted.placeholders} %s placeholders but "
                               f"{len(params)} parameters were given")
    return converted.sql, list(params)


def _convert(sql: str, named: bool) -> Converted:
    if "%" not in sql:
        return Converted(sql, () if named else None, 0)
    try:
        masked = mask_sql(sql)
    except ValueError:  # an unterminated literal: the server will say so
        masked = sql
    pieces: list[str] = []
    numbers: dict[str, int] = {}
    count = 0
    pos = 0
    for match in _TOKEN.finditer(sql):
        start, end = match.span()
        pieces.append(sql[pos:start])
        pos = end
        name, kind = match.groups()
        if masked[start:end] != sql[start:end]:  # inside a literal or comment
            pieces.append("%" if match.group() == "%%" else sql[start:end])
            continue
        if name is None and kind == "%":
            pieces.append("%")
        elif kind != "s":
            raise ProgrammingError(f"unsupported placeholder {match.group()!r} at offset "
                                   f"{start}; write %% for a literal percent sign")
        elif (name is not None) != named:
            raise ProgrammingError("mixed placeholder styles: use %s with a sequence of "
                                   "parameters, %(name)s with a mapping")
        elif name is None:
            count += 1
            pieces.append(f"${count}")
        else:
            number = numbers.get(name)
            if number is None:
                number = numbers[name] = len(numbers) + 1
            pieces.append(f"${number}")
    pieces.append(sql[pos:])
    text = "".join(pieces)
    if named:
        return Converted(text, tuple(numbers), len(numbers))
    return Converted(text, None, count)
