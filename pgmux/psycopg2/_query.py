"""psycopg2's ``%s`` / ``%(name)s`` formatting, sent as pgmux sends statements.

psycopg2 formats the statement client-side: each value's adapter renders it as a literal
(``pgmux.psycopg2._adapt``) and the text goes to the server whole. Here a value of a
built-in type whose adapter is psycopg2's own travels as a real parameter instead, typed
so the server reads it as it would read that literal (an int is int4, int8 or numeric by
size, a float a numeric, a str an untyped literal ...): the statement is then one text for
every value, cached and multiplexed. What only the literal can say is spliced as the
literal: values of the application's adapters (or any other type), lists and tuples,
a placeholder inside a quoted string or comment, one that follows a type name
(``DATE %s``) or ``ORDER BY``/``GROUP BY`` (where an int literal names a column), and
every value of a statement that takes no parameters (utility statements, several
statements in one text). ``mogrify`` and ``cursor.query`` are the text psycopg2 sends.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Mapping
from typing import Any

from pgmux.cache import put_bounded
from pgmux.psycopg2._adapt import BUILTIN, ISQLQuote, VersionedDict, adapters, quoted
from pgmux.psycopg2._exceptions import ProgrammingError
from pgmux.sql.scanner import leading_word, mask_sql, several_statements

# Statements that take parameters (the rest render every value client-side).
_PARAMETERISED = frozenset({"select", "insert", "update", "delete", "with", "values",
                            "table", "merge", "call"})
# A word before a placeholder that makes its literal part of the syntax.
_TYPE_WORDS = frozenset({
    "date", "time", "timestamp", "timestamptz", "timetz", "interval", "json", "jsonb",
    "uuid", "text", "varchar", "char", "character", "bpchar", "inet", "cidr", "macaddr",
    "bytea", "numeric", "decimal", "int", "int2", "int4", "int8", "integer", "bigint",
    "smallint", "real", "float", "float4", "float8", "bool", "boolean", "point", "money",
    "xml", "bit", "varbit", "name", "oid", "regclass", "regtype", "regproc", "tsquery",
    "tsvector", "line", "lseg", "box", "path", "polygon", "circle", "zone"})
_WORD_BEFORE = re.compile(r"([A-Za-z_][A-Za-z_0-9]*)\s*$")
_OWN_PARAMETER = re.compile(r"\$\d")  # the caller's own $n: ours would collide
_ORDERING = re.compile(r"\b(?:order|group)\s+by\s*$", re.IGNORECASE)
_FAST_CANDIDATES = (type(None), bool, int, float, decimal.Decimal, str, bytes, bytearray,
                    memoryview, dt.date, dt.datetime, dt.time, dt.timedelta)
_CACHE_SIZE = 4096
_MAX_CACHED = 65536


class Template:
    """One statement text, parsed once: the text between placeholders (``%%`` read),
    each placeholder's key (an index or a name), and whether it may be a parameter."""

    __slots__ = ("parts", "keys", "eligible", "soft", "named", "count", "names", "fast_sql",
                 "format_error", "scan_error")

    def __init__(self, query: str, named: bool) -> None:
        self.named = named
        parts: list[str] = []
        keys: list[Any] = []
        piece: list[str] = []
        self.format_error: Exception | None = None
        self.scan_error: Exception | None = None  # raised before any value is read
        count = 0
        i, size, pos = 0, len(query), 0
        while True:
            i = query.find("%", pos)
            if i < 0:
                piece.append(query[pos:])
                break
            piece.append(query[pos:i])
            nxt = query[i + 1:i + 2]
            if nxt == "%":
                piece.append("%")
                pos = i + 2
                continue
            if nxt == "(":
                close = query.find(")", i + 2)
                if close >= 0 and "%" in query[i + 2:close]:
                    close = -1  # another placeholder starts before this one ends
                if close < 0 and self.scan_error is None:
                    self.scan_error = ProgrammingError(
                        "incomplete placeholder: '%(' without ')'")
                if close < 0 or close + 1 >= size:
                    self._fail(ValueError("incomplete format"))
                    pos = size
                    piece.append(query[i:])
                    continue
                conv = query[close + 1]
                if conv != "s":
                    self._fail(_unsupported(conv, close + 1))
                if not named and self.scan_error is None:
                    self.scan_error = TypeError("{kind} indices must be integers or slices, "
                                                "not str")
                keys.append(query[i + 2:close])
                pos = close + 2
            else:
                if named and self.scan_error is None:
                    self.scan_error = TypeError("dict is not a sequence")
                if not nxt:
                    self._fail(ValueError("incomplete format"))
                elif nxt != "s":
                    self._fail(_unsupported(nxt, i + 1))
                keys.append(count)
                count += 1
                pos = i + 2
            parts.append("".join(piece))
            piece = []
        parts.append("".join(piece))
        self.parts = tuple(parts)
        self.keys = tuple(keys)
        self.count = count
        self.names = tuple(dict.fromkeys(keys)) if named else ()
        self.soft: tuple[bool, ...] = ()
        self.eligible = self._eligible(query)
        self.fast_sql = self._fast_sql() if all(self.eligible) and not any(self.soft) else None

    def _fail(self, error: Exception) -> None:
        if self.format_error is None:
            self.format_error = error

    def _eligible(self, query: str) -> tuple[bool, ...]:
        """Per placeholder: whether its value may go as a parameter."""
        if not self.keys:
            return ()
        try:
            masked_parts, inside = _masked_parts(self.parts)
        except ValueError:  # an unterminated literal: the server will say so
            return (False,) * len(self.keys)
        masked = "".join(masked_parts)
        word = (leading_word(masked) or "").lower()
        if word not in _PARAMETERISED or several_statements(masked) or _OWN_PARAMETER.search(
                masked):
            return (False,) * len(self.keys)
        out, soft = [], []
        for index in range(len(self.keys)):
            before, after = masked_parts[index], masked_parts[index + 1]
            match = _WORD_BEFORE.search(before)
            typed = match is not None and match.group(1).lower() in _TYPE_WORDS
            out.append(not inside[index] and not typed and not _ORDERING.search(before))
            soft.append(_untyped_fails("$".join(masked_parts[:index + 1]), after))
        self.soft = tuple(soft)
        return tuple(out)

    def _fast_sql(self) -> str:
        numbers: dict[Any, int] = {}
        pieces = [self.parts[0]]
        for key, after in zip(self.keys, self.parts[1:], strict=True):
            number = numbers.setdefault(key, len(numbers) + 1)
            pieces.append(f"${number}")
            pieces.append(after)
        return "".join(pieces)


_IS_AFTER = re.compile(r"\s*(?:\)\s*)*is\b", re.IGNORECASE)
_ANY_ARGUMENT_FUNCTIONS = frozenset({
    "json_build_object", "jsonb_build_object", "json_build_array", "jsonb_build_array",
    "concat", "concat_ws", "format", "pg_typeof", "to_json", "to_jsonb", "array_append",
    "array_prepend", "num_nulls", "num_nonnulls", "quote_nullable", "quote_literal"})
_CALL_BEFORE = re.compile(r"([A-Za-z_][A-Za-z_0-9]*)\s*\($")


def _untyped_fails(before: str, after: str) -> bool:
    """Whether an untyped parameter here would leave the server unable to tell its type
    (``%s IS NULL``, an argument of a function taking "any"), where psycopg2's literal
    reads as text: a str or None goes as its literal there."""
    if _IS_AFTER.match(after):
        return True
    depth = 0
    for position in range(len(before) - 1, -1, -1):  # the call this argument is in
        char = before[position]
        if char == ")":
            depth += 1
        elif char == "(":
            if depth == 0:
                match = _CALL_BEFORE.search(before[:position + 1])
                return match is not None and match.group(1).lower() in _ANY_ARGUMENT_FUNCTIONS
            depth -= 1
    return False


def _masked_parts(parts: tuple[str, ...]) -> tuple[list[str], list[bool]]:
    """The parts of a statement masked as one text (literals and comments blanked), and
    per placeholder whether it sits inside a literal or comment."""
    marker = "\x01"
    masked = mask_sql(marker.join(parts))
    out: list[str] = []
    inside: list[bool] = []
    pos = 0
    for part in parts[:-1]:
        end = pos + len(part)
        out.append(masked[pos:end])
        inside.append(masked[end:end + 1] != marker)
        pos = end + 1
    out.append(masked[pos:])
    return out, inside


def _unsupported(char: str, index: int) -> ValueError:
    return ValueError(f"unsupported format character '{char}' (0x{ord(char):x}) "
                      f"at index {index}")


# The parsed texts, one dict per style (a hit hashes no (text, style) tuple).
_positional: dict[str, Template] = {}
_named: dict[str, Template] = {}


def template(query: str, named: bool) -> Template:
    cache = _named if named else _positional
    found = cache.get(query)
    if found is None:
        found = Template(query, named)
        if len(query) <= _MAX_CACHED:
            put_bounded(cache, query, found, _CACHE_SIZE)
    return found


_fast: tuple[int, frozenset[type]] = (-1, frozenset())


def fast_types() -> frozenset[type]:
    """The built-in types whose adapter is still psycopg2's own (sent as parameters)."""
    global _fast
    version, types = _fast
    if version != VersionedDict.version:
        types = frozenset(cls for cls in _FAST_CANDIDATES
                          if adapters.get((cls, ISQLQuote)) is BUILTIN[cls])
        _fast = (VersionedDict.version, types)
    return types


def values_of(tpl: Template, params: Any) -> list[Any]:
    """The value of each distinct placeholder (psycopg2's errors for a mismatch)."""
    error = tpl.scan_error
    if error is not None:
        if isinstance(error, TypeError):
            raise TypeError(str(error).format(kind=type(params).__name__))
        raise error
    if tpl.named:
        return [params[name] for name in tpl.names]
    try:
        given = len(params)
    except TypeError:
        raise TypeError(f"'{type(params).__name__}' object does not support indexing") \
            from None
    if given < tpl.count:
        raise IndexError("tuple index out of range")
    values = list(params)
    if given > tpl.count and tpl.format_error is None:
        raise TypeError("not all arguments converted during string formatting")
    return values


def _check(tpl: Template, params: Any) -> None:
    error = tpl.format_error
    if error is not None:
        raise error


def bind(query: str, params: Any, conn: Any) -> tuple[str, list[Any] | None]:
    """(SQL for the server, its parameter values) for psycopg2's ``execute(query,
    params)``: parameters where they may go, literals where they must."""
    if params is None:
        return query, None
    tpl = _positional.get(query)
    if tpl is not None and (type(params) is tuple or type(params) is list) and len(
            params) == tpl.count and tpl.scan_error is None and tpl.format_error is None:
        values = list(params)  # (values_of's and _check's usual case, inline)
    else:
        # a tuple or list (the usual case) without the ABC check
        named = type(params) is not tuple and type(params) is not list and isinstance(
            params, Mapping)
        tpl = template(query, named)
        values = values_of(tpl, params)
        _check(tpl, params)
    sql = tpl.fast_sql
    if sql is not None:
        version, fast = _fast
        if version != VersionedDict.version:
            fast = fast_types()
        for value in values:
            if type(value) not in fast:
                break
        else:
            return sql, values
    return _mixed(tpl, values, conn)


def _mixed(tpl: Template, values: list[Any], conn: Any) -> tuple[str, list[Any]]:
    """Parameters for the values that may be, literals for the others."""
    fast = fast_types()
    key_index = {key: i for i, key in enumerate(tpl.names)} if tpl.named else None
    rendered: dict[int, str] = {}
    sent: list[Any] = []
    numbers: dict[int, int] = {}
    encoding = getattr(conn, "pgmux_encoding", "utf-8")
    pieces = [tpl.parts[0]]
    soft = tpl.soft or (False,) * len(tpl.keys)
    for key, eligible, untyped_fails, after in zip(tpl.keys, tpl.eligible, soft,
                                                   tpl.parts[1:], strict=True):
        index = key_index[key] if key_index is not None else key
        value = values[index]
        if eligible and type(value) in fast and not (
                untyped_fails and (value is None or type(value) is str)):
            number = numbers.get(index)
            if number is None:
                sent.append(value)
                number = numbers[index] = len(sent)
            pieces.append(f"${number}")
        else:
            text = rendered.get(index)
            if text is None:
                text = rendered[index] = quoted(value, conn).decode(encoding)
            pieces.append(text)
        pieces.append(after)
    return "".join(pieces), sent


def render(query: str, params: Any, conn: Any) -> bytes:
    """The statement with every value as its literal, encoded: what psycopg2 sends."""
    encoding = getattr(conn, "pgmux_encoding", "utf-8")
    if params is None:
        return query.encode(encoding)
    # a tuple or list (the usual case) without the ABC check
    named = type(params) is not tuple and type(params) is not list and isinstance(
        params, Mapping)
    tpl = template(query, named)
    values = values_of(tpl, params)
    literals = [quoted(value, conn) for value in values]
    _check(tpl, params)
    key_index = {key: i for i, key in enumerate(tpl.names)} if tpl.named else None
    pieces = [tpl.parts[0].encode(encoding)]
    for key, after in zip(tpl.keys, tpl.parts[1:], strict=True):
        pieces.append(literals[key_index[key] if key_index is not None else key])
        pieces.append(after.encode(encoding))
    return b"".join(pieces)
