"""psycopg2's adaptation: ``adapt(value)`` gives an object whose ``getquoted()`` is the
value as an SQL literal (bytes); ``register_adapter`` adds or replaces one for a class.

The statement path (``pgmux.psycopg2._query``) sends the values of built-in types as real
parameters and splices only what an adapter of the application's renders; this module is
the reference for what every value renders as, for ``mogrify``, ``cursor.query`` and the
values spliced.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

from pgmux.psycopg2._exceptions import ProgrammingError


class VersionedDict(dict):
    """A dict that counts its changes (applications write ``adapters`` and
    ``string_types`` directly; whoever caches what they hold checks ``version``)."""

    version = 0

    def _changed(self) -> None:
        VersionedDict.version += 1  # one counter for all: any change invalidates

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self._changed()

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        self._changed()

    def clear(self) -> None:
        super().clear()
        self._changed()

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self._changed()

    def pop(self, *args: Any) -> Any:
        value = super().pop(*args)
        self._changed()
        return value

    def popitem(self) -> Any:
        item = super().popitem()
        self._changed()
        return item

    def setdefault(self, key: Any, default: Any = None) -> Any:
        value = super().setdefault(key, default)
        self._changed()
        return value


class ISQLQuote:
    """The adaptation protocol: an adapter wraps a value and ``getquoted()`` returns it as
    SQL (bytes). The key of ``adapters`` entries, ``(class, ISQLQuote)``."""

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    def getquoted(self) -> bytes:
        raise NotImplementedError

    def getbinary(self) -> bytes:
        raise NotImplementedError

    def getbuffer(self) -> bytes:
        raise NotImplementedError


adapters: VersionedDict = VersionedDict()


def adapt(obj: Any, protocol: Any = ISQLQuote, alternate: Any = None) -> Any:
    """The adapter of ``obj``: the one registered for its class (or the nearest base
    class), else ``obj.__conform__(protocol)``, else ``protocol.__adapt__(obj)``, else
    ``alternate(obj)``; ProgrammingError when there is none."""
    cls = type(obj)
    factory = adapters.get((cls, protocol))
    if factory is not None:
        return factory(obj)
    if protocol is ISQLQuote and isinstance(obj, ISQLQuote):
        return obj
    conform = getattr(obj, "__conform__", None)
    if conform is not None:
        adapted = conform(protocol)
        if adapted is not None:
            return adapted
    adapt_ = getattr(protocol, "__adapt__", None)
    if adapt_ is not None:
        adapted = adapt_(obj)
        if adapted is not None:
            return adapted
    for base in cls.__mro__[1:]:
        factory = adapters.get((base, protocol))
        if factory is not None:
            return factory(obj)
    if alternate is not None:
        return alternate(obj)
    raise ProgrammingError(f"can't adapt type '{cls.__name__}'")


def register_adapter(typ: type, callable: Any) -> None:  # noqa: A002  (psycopg2's name)
    """Adapt instances of ``typ`` with ``callable(value)`` (an ``ISQLQuote``)."""
    adapters[(typ, ISQLQuote)] = callable


def quoted(value: Any, connection: Any = None) -> bytes:
    """``value`` as the SQL literal psycopg2 sends: its adapter, prepared for
    ``connection`` when it can be, quoted; bytes. None is always NULL (as in psycopg2,
    whatever adapter is registered for it)."""
    if value is None:
        return b"NULL"
    adapter = adapt(value)
    prepare = getattr(adapter, "prepare", None)
    if prepare is not None and connection is not None:
        prepare(connection)
    result = adapter.getquoted()
    if type(result) is bytes:
        return result
    if isinstance(result, str):
        return result.encode(_encoding(connection))
    if isinstance(result, (bytes, bytearray, memoryview)):
        return bytes(result)
    raise ValueError(f"only bytes values expected, got {type(result).__name__}")


def _encoding(connection: Any) -> str:
    return getattr(connection, "pgmux_encoding", "utf-8") if connection is not None else "utf-8"


# -- the built-in adapters -------------------------------------------------------------------

class AsIs:
    """A value rendered as its ``str()``, unquoted (numbers, SQL the caller built)."""

    def __init__(self, obj: Any) -> None:
        self._wrapped = obj

    @property
    def adapted(self) -> Any:
        return self._wrapped

    def getquoted(self) -> bytes:
        obj = self._wrapped
        if obj is None:
            return b"NULL"
        return obj if isinstance(obj, bytes) else str(obj).encode()

    def __conform__(self, proto: Any) -> Any:
        return self if proto is ISQLQuote else None

    def __str__(self) -> str:
        return self.getquoted().decode()


class NoneAdapter(AsIs):
    """None as NULL."""

    def getquoted(self, _null: bytes = b"NULL") -> bytes:
        return _null


class Boolean(AsIs):
    """A bool as ``true`` or ``false``."""

    def getquoted(self) -> bytes:
        return b"true" if self._wrapped else b"false"


class Int(AsIs):
    """An integer as its digits (a negative one with a leading space, as psycopg2)."""

    def getquoted(self) -> bytes:
        text = int.__repr__(int(self._wrapped)).encode()
        return b" " + text if text.startswith(b"-") else text


class Float(AsIs):
    """A float as its ``repr`` (a negative one with a leading space); infinities and NaN
    as quoted ``'...'::float`` literals."""

    def getquoted(self) -> bytes:
        value = float(self._wrapped)
        if math.isnan(value):
            return b"'NaN'::float"
        if math.isinf(value):
            return b"'Infinity'::float" if value > 0 else b"'-Infinity'::float"
        text = float.__repr__(value).encode()
        return b" " + text if text.startswith(b"-") else text


class Decimal(AsIs):
    def getquoted(self) -> bytes:
        value = self._wrapped
        if not value.is_finite():  # psycopg2 sends every non-finite Decimal as NaN
            return b"'NaN'::numeric"
        text = str(value).encode()
        return b" " + text if text.startswith(b"-") else text


class QuotedString:
    """A string as a quoted literal; ``prepare(conn)`` quotes for that connection (its
    encoding, standard_conforming_strings)."""

    def __init__(self, obj: Any) -> None:
        self._wrapped = obj
        self.encoding = "latin1"
        self._standard = True

    @property
    def adapted(self) -> Any:
        return self._wrapped

    @property
    def buffer(self) -> Any:
        return self._wrapped

    def prepare(self, conn: Any) -> None:
        self.encoding = getattr(conn, "pgmux_encoding", "utf_8")
        self._standard = getattr(conn, "pgmux_standard_strings", True)

    def getquoted(self) -> bytes:
        value = self._wrapped
        if isinstance(value, str):
            data = value.encode(self.encoding)
        elif isinstance(value, bytes):
            data = value
        else:
            raise TypeError(f"can't quote type '{type(value).__name__}'")
        if b"\x00" in data:
            raise ValueError("A string literal cannot contain NUL (0x00) characters.")
        body = data.replace(b"'", b"''")
        if self._standard:
            return b"'" + body + b"'"
        if b"\\" in body:
            return b"E'" + body.replace(b"\\", b"\\\\") + b"'"
        return b"'" + body + b"'"

    def __conform__(self, proto: Any) -> Any:
        return self if proto is ISQLQuote else None

    def __str__(self) -> str:
        return self.getquoted().decode(self.encoding, "replace")


class Binary:
    """Bytes as a bytea literal (hex format once prepared for a connection)."""

    def __init__(self, obj: Any) -> None:
        self._wrapped = obj
        self._conn: Any = None

    @property
    def adapted(self) -> Any:
        """The object it wraps, as given."""
        return self._wrapped

    @property
    def buffer(self) -> Any:
        """The object it wraps (psycopg2's name for the bytes being quoted)."""
        return self._wrapped

    def prepare(self, conn: Any) -> None:
        """Quote for ``conn`` from now on: the hex format every supported server reads."""
        self._conn = conn

    def getquoted(self) -> bytes:
        """The SQL literal, as bytes: ``'\\x...'::bytea`` once prepared, libpq's escape
        format before; ``NULL`` for None."""
        data = self._wrapped
        if data is None:
            return b"NULL"
        data = bytes(data)
        if self._conn is not None:
            return b"'\\x" + data.hex().encode() + b"'::bytea"
        return b"'" + _escape_bytea(data) + b"'::bytea"

    def __conform__(self, proto: Any) -> Any:
        return self if proto is ISQLQuote else None

    def __str__(self) -> str:
        return self.getquoted().decode("ascii", "replace")


def _escape_bytea(data: bytes) -> bytes:
    """libpq's escape format without a connection (backslashes doubled)."""
    out = bytearray()
    for byte in data:
        if byte == 0x27:
            out += b"''"
        elif byte == 0x5C:
            out += b"\\\\\\\\"
        elif byte < 0x20 or byte > 0x7E:
            out += b"\\\\%03o" % byte
        else:
            out.append(byte)
    return bytes(out)


class DateTime:
    """A date, time, datetime or timedelta as a typed literal."""

    def __init__(self, obj: Any, kind: str | None = None) -> None:
        self._wrapped = obj
        self._kind = kind

    @property
    def adapted(self) -> Any:
        return self._wrapped

    def getquoted(self) -> bytes:
        value = self._wrapped
        if isinstance(value, dt.datetime):
            aware = value.tzinfo is not None and value.utcoffset() is not None
            cast = "timestamptz" if aware else "timestamp"
            return f"'{value.isoformat()}'::{cast}".encode()
        if isinstance(value, dt.date):
            return f"'{value.isoformat()}'::date".encode()
        if isinstance(value, dt.time):
            cast = "timetz" if value.tzinfo is not None and value.utcoffset() is not None \
                else "time"
            return f"'{value.isoformat()}'::{cast}".encode()
        if isinstance(value, dt.timedelta):
            return (f"'{value.days} days {value.seconds}.{value.microseconds:06d} seconds'"
                    f"::interval").encode()
        raise ProgrammingError(f"can't adapt type '{type(value).__name__}'")

    def __conform__(self, proto: Any) -> Any:
        return self if proto is ISQLQuote else None

    def __str__(self) -> str:
        return self.getquoted().decode()


def _all_null(items: list[Any]) -> bool:
    """Whether ``items`` holds NULLs only (at every depth, at least one)."""
    return bool(items) and all(_all_null(i) if isinstance(i, list) else i is None
                               for i in items)


def _null_array(items: list[Any]) -> str:
    return "{" + ",".join(_null_array(i) if isinstance(i, list) else "NULL"
                          for i in items) + "}"


class List:
    """A list as an ARRAY[...] constructor: '{}' when empty, a '{NULL,...}' literal when
    it holds only NULLs (the server gives those their type from the context)."""

    def __init__(self, obj: Any) -> None:
        self._wrapped = obj
        self._conn: Any = None

    def prepare(self, conn: Any) -> None:
        self._conn = conn

    def getquoted(self) -> bytes:
        items = self._wrapped
        if not items:
            return b"'{}'"
        if _all_null(items):
            return ("'" + _null_array(items) + "'").encode()
        return self._array(items)

    def _array(self, items: list[Any]) -> bytes:
        if not items:
            return b"ARRAY[]"
        return b"ARRAY[" + b",".join(
            self._array(item) if isinstance(item, list) else quoted(item, self._conn)
            for item in items) + b"]"

    def __conform__(self, proto: Any) -> Any:
        return self if proto is ISQLQuote else None

    def __str__(self) -> str:
        return self.getquoted().decode()


class SQL_IN:  # noqa: N801  (psycopg2's name)
    """A tuple as a parenthesised list, for ``IN %s``."""

    def __init__(self, seq: Any) -> None:
        self._seq = seq
        self._conn: Any = None

    def prepare(self, conn: Any) -> None:
        self._conn = conn

    def getquoted(self) -> bytes:
        return b"(" + b", ".join(quoted(item, self._conn) for item in self._seq) + b")"

    def __str__(self) -> str:
        return self.getquoted().decode()


def DateFromPy(value: dt.date) -> DateTime:  # noqa: N802
    """A ``datetime.date`` as a ``'...'::date`` literal adapter."""
    return DateTime(value)


def TimeFromPy(value: dt.time) -> DateTime:  # noqa: N802
    """A ``datetime.time`` as a ``'...'::time`` (or ``timetz``) literal adapter."""
    return DateTime(value)


def TimestampFromPy(value: dt.datetime) -> DateTime:  # noqa: N802
    """A ``datetime.datetime`` as a ``'...'::timestamp`` (or ``timestamptz``) literal
    adapter."""
    return DateTime(value)


def IntervalFromPy(value: dt.timedelta) -> DateTime:  # noqa: N802
    """A ``datetime.timedelta`` as a ``'...'::interval`` literal adapter."""
    return DateTime(value)


BUILTIN: dict[type, Any] = {
    type(None): NoneAdapter, bool: Boolean, int: Int, float: Float, decimal.Decimal: Decimal,
    str: QuotedString, bytes: Binary, bytearray: Binary, memoryview: Binary, list: List,
    tuple: SQL_IN, dt.date: DateTime, dt.time: DateTime, dt.datetime: DateTime,
    dt.timedelta: DateTime,
}
for _cls, _factory in BUILTIN.items():
    register_adapter(_cls, _factory)
