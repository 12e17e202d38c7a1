"""psycopg2's typecasters: ``new_type``, ``new_array_type``, ``register_type`` (everywhere,
on a connection, on a cursor) and the built-in ones (``INTEGER``, ``DECIMAL``, ``DATE``...).

Theory of operation
-------------------
Results are decoded by the drop-in's type registry (``pgmux.psycopg2._types``), which
gives psycopg2's values for psycopg2's built-in casters at pgmux's speed. A type OID for
which any scope holds a caster other than the built-in one is *claimed*: the cursor calls
the caster that wins for it (the cursor's, else the connection's, else the global one)
with ``(text or None, cursor)``, as psycopg2 does. The text is the server's: for the types
whose decoded value gives their text back exactly (integers, oid, bool, the text types)
it is rendered from the value; for every other claimed type the registry asks the server
for the text and hands it on untouched (*raw*), with the arrays of that type (which keep
their built-in caster). An OID is claimed while a global caster replaces its built-in one
(``string_types``, written by the application directly too) or once a connection or cursor
registered one for it. (pgmux's own queries on the drop-in's clients read integers, bools
and text: claiming those never changes what they read.)
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections.abc import Callable
from typing import Any

from pgmux.psycopg2 import _textparse as parse
from pgmux.psycopg2._adapt import VersionedDict
from pgmux.types import oids


class Typecaster:
    """A typecaster: ``values`` (the type OIDs it reads) and ``name``; called with a
    value's text (or None for NULL) and the cursor, it returns the Python value. It
    compares equal to each of its OIDs (DB-API type objects)."""

    def __init__(self, values: tuple[int, ...], name: str,
                 cast: Callable[[str | None, Any], Any] | None = None,
                 base: Typecaster | None = None) -> None:
        self.values = tuple(values)
        self.name = name
        self._cast = cast
        self.base = base

    def __call__(self, value: Any, cursor: Any = None) -> Any:
        if isinstance(value, (bytes, bytearray, memoryview)):
            value = bytes(value).decode()
        if self.base is not None:  # an array of ``base``
            if value is None:
                return None
            base = self.base
            return parse.parse_array(value, lambda item: base(item, cursor))
        if self._cast is None:
            return value
        return self._cast(value, cursor)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Typecaster):
            return self is other
        if isinstance(other, int):
            return other in self.values
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"<pgmux.psycopg2 type '{self.name}' at 0x{id(self):x}>"


def new_type(values: Any, name: str, castobj: Callable[[str | None, Any], Any] | None = None,
             ) -> Typecaster:
    """A typecaster for type OIDs ``values``: ``castobj(text or None, cursor)``."""
    values = tuple(values)
    if not all(isinstance(v, int) for v in values):
        raise TypeError("new_type() values must be a sequence of integers")
    if castobj is not None and not callable(castobj):
        raise TypeError("new_type() castobj must be callable")
    return Typecaster(values, name, castobj)


def new_array_type(values: Any, name: str, baseobj: Typecaster) -> Typecaster:
    """A typecaster for arrays (type OIDs ``values``) of what ``baseobj`` reads."""
    if not isinstance(baseobj, Typecaster):
        raise TypeError("new_array_type() baseobj must be a typecaster")
    return Typecaster(tuple(values), name, base=baseobj)


def _none_safe(func: Callable[[str], Any]) -> Callable[[str | None, Any], Any]:
    def cast(value: str | None, cursor: Any) -> Any:
        return None if value is None else func(value)
    return cast


def _datetimetz(value: str | None, cursor: Any) -> Any:
    if value is None:
        return None
    factory = getattr(cursor, "tzinfo_factory", dt.timezone) if cursor is not None \
        else dt.timezone
    return parse.parse_timestamp(value, factory, aware=True)


def _time(value: str | None, cursor: Any) -> Any:
    if value is None:
        return None
    factory = getattr(cursor, "tzinfo_factory", dt.timezone) if cursor is not None \
        else dt.timezone
    return parse.parse_time(value, factory)


def _json(value: str | None, cursor: Any) -> Any:
    return None if value is None else json.loads(value)


_T = oids.TYPES
INTEGER = Typecaster((oids.INT2, oids.INT4), "INTEGER", _none_safe(int))
LONGINTEGER = Typecaster((oids.INT8,), "LONGINTEGER", _none_safe(int))
FLOAT = Typecaster((oids.FLOAT4, oids.FLOAT8), "FLOAT", _none_safe(float))
DECIMAL = Typecaster((oids.NUMERIC,), "DECIMAL", _none_safe(decimal.Decimal))
STRING = Typecaster((oids.CHAR, oids.NAME, oids.TEXT, oids.BPCHAR, oids.VARCHAR), "STRING")
UNICODE = Typecaster(STRING.values, "UNICODE")
BYTES = Typecaster(STRING.values, "BYTES",
                   lambda value, cursor: None if value is None else value.encode())
BOOLEAN = Typecaster((oids.BOOL,), "BOOLEAN", _none_safe(parse.parse_bool))
BINARY = Typecaster((oids.BYTEA,), "BINARY", _none_safe(parse.parse_bytea))
ROWID = Typecaster((oids.OID,), "ROWID", _none_safe(int))
PYDATE = Typecaster((oids.DATE,), "DATE", _none_safe(parse.parse_date))
PYTIME = Typecaster((oids.TIME, oids.TIMETZ), "TIME", _time)
PYDATETIME = Typecaster((oids.TIMESTAMP,), "DATETIME", _none_safe(parse.parse_timestamp))
PYDATETIMETZ = Typecaster((oids.TIMESTAMPTZ,), "DATETIMETZ", _datetimetz)
PYINTERVAL = Typecaster((oids.INTERVAL, 1186), "INTERVAL", _none_safe(parse.parse_interval))
DATE, TIME, DATETIME, DATETIMETZ, INTERVAL = PYDATE, PYTIME, PYDATETIME, PYDATETIMETZ, PYINTERVAL
UNKNOWN = Typecaster((705,), "UNKNOWN")
JSON = Typecaster((oids.JSON,), "JSON", _json)
JSONB = Typecaster((oids.JSONB,), "JSONB", _json)


def _array(base: Typecaster, name: str, *array_oids: int) -> Typecaster:
    return Typecaster(array_oids, name, base=base)


INTEGERARRAY = _array(INTEGER, "INTEGERARRAY", 1005, 1006, 1007)
LONGINTEGERARRAY = _array(LONGINTEGER, "LONGINTEGERARRAY", 1016)
FLOATARRAY = _array(FLOAT, "FLOATARRAY", 1021, 1022)
DECIMALARRAY = _array(DECIMAL, "DECIMALARRAY", 1231)
STRINGARRAY = _array(STRING, "STRINGARRAY", 1002, 1003, 1009, 1014, 1015)
UNICODEARRAY = _array(UNICODE, "UNICODEARRAY", *STRINGARRAY.values)
BYTESARRAY = _array(BYTES, "BYTESARRAY", *STRINGARRAY.values)
BOOLEANARRAY = _array(BOOLEAN, "BOOLEANARRAY", 1000)
BINARYARRAY = _array(BINARY, "BINARYARRAY", 1001)
ROWIDARRAY = _array(ROWID, "ROWIDARRAY", 1013, 1028)
DATEARRAY = PYDATEARRAY = _array(PYDATE, "DATEARRAY", 1182)
TIMEARRAY = PYTIMEARRAY = _array(PYTIME, "TIMEARRAY", 1183, 1270)
DATETIMEARRAY = PYDATETIMEARRAY = _array(PYDATETIME, "DATETIMEARRAY", 1115)
DATETIMETZARRAY = PYDATETIMETZARRAY = _array(PYDATETIMETZ, "DATETIMETZARRAY", 1185)
INTERVALARRAY = PYINTERVALARRAY = _array(PYINTERVAL, "INTERVALARRAY", 1187)
JSONARRAY = _array(JSON, "JSONARRAY", 199)
JSONBARRAY = _array(JSONB, "JSONBARRAY", 3807)
INETARRAY = _array(STRING, "INETARRAY", 1041)
CIDRARRAY = _array(STRING, "CIDRARRAY", 651)
MACADDRARRAY = _array(STRING, "MACADDRARRAY", 1040)

# What a column of each OID reads as by default (psycopg2's string_types at import).
_DEFAULT_CASTERS = (INTEGER, LONGINTEGER, FLOAT, DECIMAL, UNICODE, BOOLEAN, BINARY, ROWID,
                    PYDATE, PYTIME, PYDATETIME, PYDATETIMETZ, PYINTERVAL, UNKNOWN, JSON, JSONB,
                    INTEGERARRAY, LONGINTEGERARRAY, FLOATARRAY, DECIMALARRAY, UNICODEARRAY,
                    BOOLEANARRAY, BINARYARRAY, ROWIDARRAY, DATEARRAY, TIMEARRAY,
                    DATETIMEARRAY, DATETIMETZARRAY, INTERVALARRAY, JSONARRAY, JSONBARRAY,
                    INETARRAY, CIDRARRAY, MACADDRARRAY)
DEFAULTS: dict[int, Typecaster] = {}
for _caster in _DEFAULT_CASTERS:
    for _oid in _caster.values:
        DEFAULTS[_oid] = _caster

string_types: VersionedDict = VersionedDict()
binary_types: VersionedDict = VersionedDict()  # psycopg2 has no binary typecasters: empty

# OIDs a connection or cursor registered a caster for (claimed from then on).
_scoped: set[int] = set()


def register_type(obj: Typecaster, scope: Any = None) -> None:
    """Use typecaster ``obj`` for its OIDs: everywhere (``scope`` None), or only on a
    connection or a cursor (``scope``)."""
    if not isinstance(obj, Typecaster):
        raise TypeError("register_type() argument 1 must be a typecaster")
    if scope is None:
        for oid in obj.values:
            string_types[oid] = obj
        return
    table = getattr(scope, "string_types", None)
    if not isinstance(table, dict):
        raise TypeError("register_type() argument 2 must be a connection, a cursor or None")
    before = len(_scoped)
    for oid in obj.values:
        table[oid] = obj
        if DEFAULTS.get(oid) is not obj:
            _scoped.add(oid)
    if len(_scoped) != before:
        VersionedDict.version += 1


def claimed_oids() -> set[int]:
    """The OIDs the server must send as text and a caster read (see the module's text)."""
    claimed = set(_scoped)
    for oid, caster in string_types.items():
        if DEFAULTS.get(oid) is not caster:
            claimed.add(oid)
    return claimed


def raw_oids(claimed: set[int]) -> set[int]:
    """Of the claimed OIDs, those whose text must come from the server, and the arrays of
    those (read by their built-in caster from the text too)."""
    raw = {oid for oid in claimed if oid not in RENDERED}
    for oid in [oid for oid in raw if oid in DEFAULTS]:
        raw.update(_ARRAYS_OF.get(oid, ()))
    return raw


def _bool_text(value: bool) -> str:
    return "t" if value else "f"


# Types whose decoded value renders back to the server's text exactly.
RENDERED: dict[int, Callable[[Any], str]] = {
    **dict.fromkeys((oids.INT2, oids.INT4, oids.INT8, oids.OID), str),
    oids.BOOL: _bool_text,
    **dict.fromkeys((oids.TEXT, oids.VARCHAR, oids.BPCHAR, oids.NAME, oids.CHAR, 705,
                     oids.XID, oids.CID), str),
}


_ARRAYS_OF: dict[int, tuple[int, ...]] = {}
for _array_caster in _DEFAULT_CASTERS:
    if _array_caster.base is not None:
        for _element in _array_caster.base.values:
            _ARRAYS_OF[_element] = _ARRAYS_OF.get(_element, ()) + _array_caster.values


def caster_for(oid: int, cursor: Any) -> Typecaster | None:
    """The caster that wins for ``oid`` on ``cursor`` (None: the text as it is)."""
    found = cursor.string_types.get(oid) if cursor is not None else None
    if found is None and cursor is not None:
        conn = getattr(cursor, "connection", None)
        if conn is not None:
            found = conn.string_types.get(oid)
    if found is None:
        found = string_types.get(oid)
    if found is None:
        found = DEFAULTS.get(oid)
    return found


def cast_value(oid: int, text: str | None, cursor: Any) -> Any:
    """``text`` of a value of type ``oid`` read by the caster that wins on ``cursor``."""
    caster = caster_for(oid, cursor)
    if caster is None:
        return text
    return caster(text, cursor)


string_types.update(DEFAULTS)
