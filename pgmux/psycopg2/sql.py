"""psycopg2.sql: SQL built from parts, with identifiers and values quoted safely."""

from __future__ import annotations

import string
from collections.abc import Iterator
from typing import Any

from pgmux.psycopg2._adapt import quoted

_formatter = string.Formatter()


def _encoding(context: Any) -> str:
    conn = getattr(context, "connection", context)
    return getattr(conn, "pgmux_encoding", "utf-8")


class Composable:
    """Something that becomes SQL text with ``as_string(context)`` (a connection or a
    cursor): add two to compose them, multiply one to repeat it."""

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self._wrapped!r})"

    def as_string(self, context: Any) -> str:
        raise NotImplementedError

    def __add__(self, other: Any) -> Composed:
        if isinstance(other, Composed):
            return Composed([self]) + other
        if isinstance(other, Composable):
            return Composed([self]) + Composed([other])
        return NotImplemented

    def __mul__(self, n: int) -> Composed:
        return Composed([self] * n)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._wrapped == other._wrapped

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]


class Composed(Composable):
    """A sequence of Composables, joined with nothing between them."""

    def __init__(self, seq: Any) -> None:
        wrapped = []
        for item in seq:
            if not isinstance(item, Composable):
                raise TypeError(f"Composed elements must be Composable, got {item!r} "
                                "instead")
            wrapped.append(item)
        super().__init__(wrapped)

    @property
    def seq(self) -> list[Composable]:
        return list(self._wrapped)

    def as_string(self, context: Any) -> str:
        return "".join(item.as_string(context) for item in self._wrapped)

    def __iter__(self) -> Iterator[Composable]:
        return iter(self._wrapped)

    def __add__(self, other: Any) -> Composed:
        if isinstance(other, Composed):
            return Composed(self._wrapped + other._wrapped)
        if isinstance(other, Composable):
            return Composed(self._wrapped + [other])
        return NotImplemented

    def join(self, joiner: Any) -> Composed:
        """The items with ``joiner`` (a str or an SQL) between each two."""
        if isinstance(joiner, str):
            joiner = SQL(joiner)
        elif not isinstance(joiner, SQL):
            raise TypeError("Composed.join() argument must be a string or an SQL")
        return joiner.join(self)


class SQL(Composable):
    """SQL text as it is (never quoted): keywords, operators, a template for ``format``."""

    def __init__(self, string: str) -> None:
        if not isinstance(string, str):
            raise TypeError("SQL values must be strings")
        super().__init__(string)

    @property
    def string(self) -> str:
        return self._wrapped

    def as_string(self, context: Any) -> str:
        return self._wrapped

    def format(self, *args: Any, **kwargs: Any) -> Composed:
        """The text with its ``{}``, ``{0}`` and ``{name}`` fields replaced by the
        Composables given (``{{`` and ``}}`` are braces)."""
        rv: list[Composable] = []
        autonum: int | None = 0
        for pre, name, spec, conv in _formatter.parse(self._wrapped):
            if spec:
                raise ValueError("no format specification supported by SQL")
            if conv:
                raise ValueError("no format conversion supported by SQL")
            if pre:
                rv.append(SQL(pre))
            if name is None:
                continue
            if name.isdigit():
                if autonum:
                    raise ValueError("cannot switch from automatic field numbering to "
                                     "manual")
                rv.append(args[int(name)])
                autonum = None
            elif not name:
                if autonum is None:
                    raise ValueError("cannot switch from manual field numbering to "
                                     "automatic")
                rv.append(args[autonum])
                autonum += 1
            else:
                rv.append(kwargs[name])
        return Composed(rv)

    def join(self, seq: Any) -> Composed:
        """The Composables of ``seq`` with this text between each two."""
        rv: list[Composable] = []
        it = iter(seq)
        try:
            rv.append(next(it))
        except StopIteration:
            pass
        else:
            for item in it:
                rv.append(self)
                rv.append(item)
        return Composed(rv)


class Identifier(Composable):
    """A quoted identifier, or a dotted name of several (``Identifier("s", "t")``)."""

    def __init__(self, *strings: str) -> None:
        if not strings:
            raise TypeError("Identifier cannot be empty")
        for s in strings:
            if not isinstance(s, str):
                raise TypeError("SQL identifier parts must be strings")
        super().__init__(strings)

    @property
    def strings(self) -> tuple[str, ...]:
        return self._wrapped

    @property
    def string(self) -> str:
        if len(self._wrapped) == 1:
            return self._wrapped[0]
        raise AttributeError("the Identifier has more than one component")

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({', '.join(map(repr, self._wrapped))})"

    def as_string(self, context: Any) -> str:
        return ".".join('"' + s.replace('"', '""') + '"' for s in self._wrapped)


class Literal(Composable):
    """A value as the literal its adapter renders."""

    @property
    def wrapped(self) -> Any:
        return self._wrapped

    def as_string(self, context: Any) -> str:
        conn = getattr(context, "connection", context)
        if not hasattr(conn, "pgmux_handle"):
            raise TypeError("context must be a connection or a cursor")
        return quoted(self._wrapped, conn).decode(_encoding(conn))


class Placeholder(Composable):
    """A ``%s`` (or ``%(name)s``) placeholder."""

    def __init__(self, name: str | None = None) -> None:
        if isinstance(name, str):
            if ")" in name:
                raise ValueError(f"invalid name: {name!r}")
        elif name is not None:
            raise TypeError(f"expected string or None as name, got {name!r}")
        super().__init__(name)

    @property
    def name(self) -> str | None:
        return self._wrapped

    def __repr__(self) -> str:
        return f"Placeholder({self._wrapped if self._wrapped is not None else ''!r})" \
            if self._wrapped is not None else "Placeholder()"

    def as_string(self, context: Any) -> str:
        return "%s" if self._wrapped is None else f"%({self._wrapped})s"


NULL = SQL("NULL")
DEFAULT = SQL("DEFAULT")

__all__ = ["Composable", "Composed", "DEFAULT", "Identifier", "Literal", "NULL", "Placeholder",
           "SQL"]
