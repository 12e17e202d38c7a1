"""psycopg2.extras' type support: uuid, inet (``Inet``), hstore and composite types."""

from __future__ import annotations

import re
import uuid
from collections import namedtuple
from typing import Any

from pgmux.psycopg2._adapt import ISQLQuote, adapt, quoted, register_adapter
from pgmux.psycopg2._casters import new_array_type, new_type, register_type
from pgmux.psycopg2._exceptions import DataError, InterfaceError, ProgrammingError
from pgmux.psycopg2._scope import catalog_rows, split_name
from pgmux.psycopg2._textparse import parse_hstore
from pgmux.types.composites import split_record_text


class UUID_adapter:  # noqa: N801
    """A UUID as ``'...'::uuid``."""

    def __init__(self, uuid: uuid.UUID) -> None:
        self._uuid = uuid

    def __conform__(self, proto: Any) -> Any:
        return self if proto is ISQLQuote else None

    def getquoted(self) -> bytes:
        return f"'{self._uuid}'::uuid".encode()

    def __str__(self) -> str:
        return f"'{self._uuid}'::uuid"


def register_uuid(oids: Any = None, conn_or_curs: Any = None) -> Any:
    """Read uuid (and uuid[]) as ``uuid.UUID`` and send ``uuid.UUID`` values."""
    if not oids:
        oid1, oid2 = 2950, 2951
    elif isinstance(oids, (list, tuple)):
        oid1, oid2 = oids
    else:
        oid1, oid2 = oids, 2951
    caster = new_type((oid1,), "UUID",
                      lambda data, cursor: None if data is None else uuid.UUID(data))
    array = new_array_type((oid2,), "UUID[]", caster)
    register_type(caster, conn_or_curs)
    register_type(array, conn_or_curs)
    register_adapter(uuid.UUID, UUID_adapter)
    return caster


class Inet:
    """An address sent as ``'...'::inet`` (the value is kept as given)."""

    def __init__(self, addr: Any) -> None:
        self.addr = addr

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.addr!r})"

    def prepare(self, conn: Any) -> None:
        self._conn = conn

    def getquoted(self) -> bytes:
        obj = adapt(self.addr)
        if hasattr(obj, "prepare") and getattr(self, "_conn", None) is not None:
            obj.prepare(self._conn)
        return obj.getquoted() + b"::inet"

    def __conform__(self, proto: Any) -> Any:
        return self if proto is ISQLQuote else None

    def __str__(self) -> str:
        return str(self.addr)


def register_inet(oid: Any = None, conn_or_curs: Any = None) -> Any:
    """Read inet (and inet[]) as ``Inet`` (deprecated in psycopg2: see register_ipaddress)."""
    import warnings

    warnings.warn("the inet adapter is deprecated, it's not very useful",
                  DeprecationWarning, stacklevel=2)
    if not oid:
        oid1, oid2 = 869, 1041
    elif isinstance(oid, (list, tuple)):
        oid1, oid2 = oid
    else:
        oid1, oid2 = oid, 1041
    caster = new_type((oid1,), "INET", lambda data, cursor: data and Inet(data) or None)
    array = new_array_type((oid2,), "INETARRAY", caster)
    register_type(caster, conn_or_curs)
    register_type(array, conn_or_curs)
    return caster


# -- hstore -------------------------------------------------------------------------------------

class HstoreAdapter:
    """A dict as an hstore: ``hstore(ARRAY[keys], ARRAY[values])``."""

    def __init__(self, wrapped: dict[Any, Any]) -> None:
        self.wrapped = wrapped
        self.conn: Any = None

    def prepare(self, conn: Any) -> None:
        self.conn = conn

    def getquoted(self) -> bytes:
        if not self.wrapped:
            return b"''::hstore"
        keys = [quoted(str(key), self.conn) for key in self.wrapped]
        values = [b"NULL" if value is None else quoted(str(value), self.conn)
                  for value in self.wrapped.values()]
        return (b"hstore(ARRAY[" + b",".join(keys) + b"], ARRAY[" + b",".join(values)
                + b"])")

    @classmethod
    def parse(cls, s: str | None, cur: Any = None) -> Any:
        """An hstore's text as a dict (InterfaceError if it is not one)."""
        if s is None:
            return None
        try:
            return parse_hstore(s)
        except (ValueError, IndexError) as error:
            raise InterfaceError(f"error parsing hstore: {error}") from None

    @classmethod
    def parse_unicode(cls, s: str | None, cur: Any) -> Any:
        return cls.parse(s, cur)

    @classmethod
    def get_oids(cls, conn_or_curs: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
        rows = catalog_rows(conn_or_curs, "SELECT t.oid, typarray FROM pg_type t "
                            "JOIN pg_namespace ns ON typnamespace = ns.oid "
                            "WHERE typname = 'hstore'", None)
        return tuple(row[0] for row in rows), tuple(row[1] for row in rows if row[1])


def register_hstore(conn_or_curs: Any, globally: bool = False, unicode: bool = False,
                    oid: Any = None, array_oid: Any = None) -> None:
    """Read hstore as dict and send dicts as hstore (on ``conn_or_curs`` or everywhere)."""
    if oid is None:
        oid = HstoreAdapter.get_oids(conn_or_curs)
        if oid is None or not oid[0]:
            raise ProgrammingError("hstore type not found in the database. please "
                                   "install it from your 'contrib/hstore.sql' file")
        array_oid = oid[1]
        oid = oid[0]
    if isinstance(oid, int):
        oid = (oid,)
    if array_oid is not None:
        array_oid = (array_oid,) if isinstance(array_oid, int) else tuple(
            a for a in array_oid if a)
    caster = new_type(tuple(oid), "HSTORE", HstoreAdapter.parse)
    scope = None if globally else conn_or_curs
    register_type(caster, scope)
    if array_oid:
        register_type(new_array_type(array_oid, "HSTOREARRAY", caster), scope)
    register_adapter(dict, HstoreAdapter)


# -- composite types ----------------------------------------------------------------------------

class CompositeCaster:
    """Reads composite type ``name`` as ``type`` (a namedtuple of its attributes, or what
    ``make`` returns in a subclass)."""

    def __init__(self, name: str, oid: int, attrs: list[tuple[str, int]],
                 array_oid: int | None = None, schema: str | None = None) -> None:
        self.name = name
        self.schema = schema
        self.oid = oid
        self.array_oid = array_oid
        self.attnames = [a[0] for a in attrs]
        self.atttypes = [a[1] for a in attrs]
        self._create_type(name, self.attnames)
        self.typecaster = new_type((oid,), name.upper(), self.parse)
        self.array_typecaster = (new_array_type((array_oid,), f"{name.upper()}ARRAY",
                                                self.typecaster) if array_oid else None)

    def parse(self, s: str | None, curs: Any) -> Any:
        if s is None:
            return None
        tokens = self.tokenize(s)
        if len(tokens) != len(self.atttypes):
            raise DataError(f"expecting {len(self.atttypes)} components for the type "
                            f"{self.name}, {len(tokens)} found instead")
        values = [curs.cast(oid, token) for oid, token in zip(self.atttypes, tokens,
                                                               strict=True)]
        return self.make(values)

    def make(self, values: list[Any]) -> Any:
        return self._ctor(values)

    @classmethod
    def tokenize(cls, s: str) -> list[str | None]:
        """The fields of a record's text (None for NULL)."""
        try:
            return [None if field is None else field.decode()
                    for field in split_record_text(s.encode())]
        except Exception as error:
            raise InterfaceError(f"can't parse type: {s!r} ({error})") from None

    def _create_type(self, name: str, attnames: list[str]) -> None:
        name = re.sub(r"[^a-zA-Z0-9_]", "_", name)
        record: Any = namedtuple(name, attnames, rename=True)  # type: ignore[misc]
        self.type = record
        self._ctor = record._make

    @classmethod
    def _from_db(cls, name: str, conn_or_curs: Any) -> CompositeCaster:
        schema, tname = split_name(name)
        if schema is None:
            rows = catalog_rows(conn_or_curs, """
SELECT t.oid, t.typarray, attname, atttypid, nspname
FROM pg_type t JOIN pg_namespace ns ON typnamespace = ns.oid
JOIN pg_attribute a ON attrelid = typrelid
WHERE typname = %s AND pg_type_is_visible(t.oid)
  AND attnum > 0 AND NOT attisdropped
ORDER BY attnum""", (tname,))
        else:
            rows = catalog_rows(conn_or_curs, """
SELECT t.oid, t.typarray, attname, atttypid, nspname
FROM pg_type t JOIN pg_namespace ns ON typnamespace = ns.oid
JOIN pg_attribute a ON attrelid = typrelid
WHERE typname = %s AND nspname = %s
  AND attnum > 0 AND NOT attisdropped
ORDER BY attnum""", (tname, schema))
        if not rows:
            raise ProgrammingError(f"PostgreSQL type '{name}' not found")
        type_oid, array_oid, schema = rows[0][0], rows[0][1], rows[0][4]
        attrs = [(row[2], row[3]) for row in rows]
        return cls(tname, type_oid, attrs, array_oid=array_oid, schema=schema)


def register_composite(name: str, conn_or_curs: Any, globally: bool = False,
                       factory: Any = None) -> CompositeCaster:
    """Read composite type ``name`` as a namedtuple (or ``factory``'s kind)."""
    if factory is None:
        factory = CompositeCaster
    caster = factory._from_db(name, conn_or_curs)
    scope = None if globally else conn_or_curs
    register_type(caster.typecaster, scope)
    if caster.array_typecaster is not None:
        register_type(caster.array_typecaster, scope)
    return caster
