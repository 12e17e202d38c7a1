"""psycopg2's range types: ``Range`` and its built-in subclasses, their adapters and
typecasters, and ``register_range`` for the application's own range types."""

from __future__ import annotations

from typing import Any

from pgmux.psycopg2._adapt import ISQLQuote, adapt, quoted, register_adapter
from pgmux.psycopg2._casters import cast_value, new_array_type, new_type, register_type
from pgmux.psycopg2._exceptions import InterfaceError, ProgrammingError

_BOUNDS = ("[)", "(]", "()", "[]")


class Range:
    """A PostgreSQL range: ``lower``/``upper`` bounds (None: infinite) and their
    inclusivity (``bounds``, such as ``'[)'``), or an empty range."""

    __slots__ = ("_lower", "_upper", "_bounds")

    def __init__(self, lower: Any = None, upper: Any = None, bounds: str = "[)",
                 empty: bool = False) -> None:
        if empty:
            self._lower = self._upper = None
            self._bounds: str | None = None
            return
        if bounds not in _BOUNDS:
            raise ValueError(f"bound flags not valid: {bounds!r}")
        self._lower, self._upper, self._bounds = lower, upper, bounds

    def __repr__(self) -> str:
        if self._bounds is None:
            return f"{type(self).__name__}(empty=True)"
        return f"{type(self).__name__}({self._lower!r}, {self._upper!r}, {self._bounds!r})"

    def __str__(self) -> str:
        if self._bounds is None:
            return "empty"
        return f"{self._bounds[0]}{self._lower}, {self._upper}{self._bounds[1]}"

    @property
    def lower(self) -> Any:
        return self._lower

    @property
    def upper(self) -> Any:
        return self._upper

    @property
    def isempty(self) -> bool:
        return self._bounds is None

    @property
    def lower_inf(self) -> bool:
        return self._bounds is not None and self._lower is None

    @property
    def upper_inf(self) -> bool:
        return self._bounds is not None and self._upper is None

    @property
    def lower_inc(self) -> bool:
        return (self._bounds is not None and self._lower is not None
                and self._bounds[0] == "[")

    @property
    def upper_inc(self) -> bool:
        return (self._bounds is not None and self._upper is not None
                and self._bounds[1] == "]")

    def __contains__(self, x: Any) -> bool:
        if self._bounds is None:
            return False
        if self._lower is not None:
            if self._bounds[0] == "[" and x < self._lower:
                return False
            if self._bounds[0] == "(" and x <= self._lower:
                return False
        if self._upper is not None:
            if self._bounds[1] == "]" and x > self._upper:
                return False
            if self._bounds[1] == ")" and x >= self._upper:
                return False
        return True

    def __bool__(self) -> bool:
        return self._bounds is not None

    def _key(self) -> tuple[Any, ...]:
        return (self._lower, self._upper, self._bounds)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Range):
            return False
        return self._key() == other._key()

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self._key())

    # Ranges sort as their (lower, upper, bounds), None before anything (psycopg2's order).
    def __lt__(self, other: Any) -> bool:
        if not isinstance(other, Range):
            return NotImplemented
        for mine, theirs in zip(self._key(), other._key(), strict=True):
            if mine == theirs:
                continue
            if mine is None:
                return True
            if theirs is None:
                return False
            return bool(mine < theirs)
        return False

    def __le__(self, other: Any) -> bool:
        return self == other or self.__lt__(other)

    def __gt__(self, other: Any) -> bool:
        if not isinstance(other, Range):
            return NotImplemented
        return other.__lt__(self)

    def __ge__(self, other: Any) -> bool:
        return self == other or self.__gt__(other)

    def __getstate__(self) -> dict[str, Any]:
        return {"_lower": self._lower, "_upper": self._upper, "_bounds": self._bounds}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)


class NumericRange(Range):
    """int4range, int8range, numrange."""

    __slots__ = ()


class DateRange(Range):
    """daterange."""

    __slots__ = ()


class DateTimeRange(Range):
    """tsrange."""

    __slots__ = ()


class DateTimeTZRange(Range):
    """tstzrange."""

    __slots__ = ()


class RangeAdapter:
    """A range as ``name(lower, upper, 'bounds')`` (``name``: the range type)."""

    name: str | None = None

    def __init__(self, adapted: Range) -> None:
        self.adapted = adapted
        self._conn: Any = None

    def __conform__(self, proto: Any) -> Any:
        return self if proto is ISQLQuote else None

    def prepare(self, conn: Any) -> None:
        self._conn = conn

    def getquoted(self) -> bytes:
        if self.name is None:
            raise NotImplementedError("RangeAdapter must be subclassed overriding its name "
                                      "or the getquoted() method")
        r = self.adapted
        if r.isempty:
            return b"'empty'::" + self.name.encode()
        bounds = r._bounds or "[)"
        lower = b"NULL" if r.lower is None else quoted(r.lower, self._conn)
        upper = b"NULL" if r.upper is None else quoted(r.upper, self._conn)
        return (self.name.encode() + b"(" + lower + b", " + upper + b", '"
                + bounds.encode() + b"')")


class NumberRangeAdapter(RangeAdapter):
    """A numeric range as an untyped literal: the server picks int4range, int8range or
    numrange from the context."""

    def getquoted(self) -> bytes:
        r = self.adapted
        if r.isempty:
            return b"'empty'"
        lower = b"" if r.lower_inf else adapt(r.lower).getquoted().strip()
        upper = b"" if r.upper_inf else adapt(r.upper).getquoted().strip()
        bounds = (r._bounds or "[)").encode()
        return b"'" + bounds[:1] + lower + b"," + upper + bounds[1:] + b"'"


def _adapter_for(name: str) -> type[RangeAdapter]:
    return type(f"{name}Adapter", (RangeAdapter,), {"name": name})


register_adapter(NumericRange, NumberRangeAdapter)
register_adapter(DateRange, _adapter_for("daterange"))
register_adapter(DateTimeRange, _adapter_for("tsrange"))
register_adapter(DateTimeTZRange, _adapter_for("tstzrange"))

def _bound_text(text: str) -> str | None:
    """One bound of a range's text: None when empty (infinite), else unquoted."""
    if not text:
        return None
    if not text.startswith('"'):
        return text.replace("\\", "") if "\\" in text else text
    out, i, end = [], 1, len(text) - 1
    while i < end:
        char = text[i]
        if char == "\\" or (char == '"' and text[i + 1:i + 2] == '"'):
            i += 1
            char = text[i]
        out.append(char)
        i += 1
    return "".join(out)


def split_range_text(text: str) -> tuple[str, str | None, str | None, str] | None:
    """(lower flag, lower text, upper text, upper flag) of a range's text, or None."""
    if len(text) < 3 or text[0] not in "[(" or text[-1] not in ")]":
        return None
    body, quoted, i = text[1:-1], False, 0
    while i < len(body):
        char = body[i]
        if char == "\\":
            i += 1
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            return text[0], _bound_text(body[:i]), _bound_text(body[i + 1:]), text[-1]
        i += 1
    return None


class RangeCaster:
    """Reads range type ``pgrange`` as ``pyrange`` (a ``Range`` subclass, or a name for a
    new one), its bounds with the typecaster of ``subtype_oid``; ``typecaster`` and
    ``array_typecaster`` are registered with ``register_type``."""

    def __init__(self, pgrange: Any, pyrange: Any, oid: int, subtype_oid: int,
                 array_oid: int | None = None) -> None:
        self.subtype_oid = subtype_oid
        self._create_ranges(pgrange, pyrange)
        name = self.adapter.name or self.adapter.__class__.__name__
        self.typecaster = new_type((oid,), name, self.parse)
        self.array_typecaster = (new_array_type((array_oid,), f"{name}ARRAY", self.typecaster)
                                 if array_oid else None)

    def _create_ranges(self, pgrange: Any, pyrange: Any) -> None:
        self.adapter: Any = None
        if isinstance(pgrange, str):
            self.adapter = _adapter_for(pgrange)
        else:
            try:
                if issubclass(pgrange, RangeAdapter) and pgrange is not RangeAdapter:
                    self.adapter = pgrange
            except TypeError:
                pass
        if self.adapter is None:
            raise TypeError("pgrange must be a string or a RangeAdapter strict subclass")
        self.range: Any = None
        try:
            if isinstance(pyrange, str):
                self.range = type(pyrange, (Range,), {"__slots__": ()})
            if issubclass(pyrange, Range) and pyrange is not Range:
                self.range = pyrange
        except TypeError:
            pass
        if self.range is None:
            raise TypeError("pyrange must be a type or a Range strict subclass")

    def parse(self, s: str | None, cur: Any = None) -> Any:
        if s is None:
            return None
        if s == "empty":
            return self.range(empty=True)
        parts = split_range_text(s)
        if parts is None:
            raise InterfaceError(f"failed to parse range: '{s}'")
        low_flag, lower, upper, high_flag = parts
        if lower is not None:
            lower = cast_value(self.subtype_oid, lower, cur)
        if upper is not None:
            upper = cast_value(self.subtype_oid, upper, cur)
        return self.range(lower, upper, low_flag + high_flag)

    @classmethod
    def _from_db(cls, name: str, pyrange: Any, conn_or_curs: Any) -> RangeCaster:
        from pgmux.psycopg2._scope import catalog_rows, split_name

        schema, bare = split_name(name)
        sql = ("SELECT t.oid, r.rngsubtype, t.typarray FROM pg_type t "
               "JOIN pg_range r ON r.rngtypid = t.oid "
               "JOIN pg_namespace n ON n.oid = t.typnamespace "
               "WHERE t.typname = %s AND "
               + ("n.nspname = %s" if schema else "pg_type_is_visible(t.oid)"))
        rows = catalog_rows(conn_or_curs, sql, (bare, schema) if schema else (bare,))
        row = rows[0] if rows else None
        if row is None:
            raise ProgrammingError(f"PostgreSQL range '{name}' not found")
        oid, subtype, array_oid = row
        return cls(name, pyrange, oid, subtype, array_oid)


def register_range(pgrange: str, pyrange: Any, conn_or_curs: Any,
                   globally: bool = False) -> RangeCaster:
    """Read and send range type ``pgrange`` as ``pyrange`` (a name: a new ``Range``
    subclass); registered on ``conn_or_curs`` only, or everywhere with ``globally``."""
    caster = RangeCaster._from_db(pgrange, pyrange, conn_or_curs)
    scope = None if globally else conn_or_curs
    register_type(caster.typecaster, scope)
    if caster.array_typecaster is not None:
        register_type(caster.array_typecaster, scope)
    register_adapter(caster.range, caster.adapter)
    return caster


def _register_builtin_ranges() -> None:
    """psycopg2 reads the built-in range types as these classes by default."""
    from pgmux.psycopg2 import _casters

    for name, pyrange, oid, subtype, array_oid in (
            ("int4range", NumericRange, 3904, 23, 3905),
            ("int8range", NumericRange, 3926, 20, 3927),
            ("numrange", NumericRange, 3906, 1700, 3907),
            ("daterange", DateRange, 3912, 1082, 3913),
            ("tsrange", DateTimeRange, 3908, 1114, 3909),
            ("tstzrange", DateTimeTZRange, 3910, 1184, 3911)):
        caster = RangeCaster(name, pyrange, oid, subtype, array_oid)
        for typecaster in (caster.typecaster, caster.array_typecaster):
            assert typecaster is not None
            for value in typecaster.values:
                _casters.DEFAULTS[value] = typecaster
                _casters.string_types[value] = typecaster
        BUILTIN_CASTERS[oid] = caster


BUILTIN_CASTERS: dict[int, RangeCaster] = {}
_register_builtin_ranges()
int4range_caster = BUILTIN_CASTERS[3904]
int8range_caster = BUILTIN_CASTERS[3926]
numrange_caster = BUILTIN_CASTERS[3906]
daterange_caster = BUILTIN_CASTERS[3912]
tsrange_caster = BUILTIN_CASTERS[3908]
tstzrange_caster = BUILTIN_CASTERS[3910]
