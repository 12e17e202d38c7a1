"""psycopg2._json: the ``Json`` adapter and the json/jsonb typecasters."""

from __future__ import annotations

import json
from typing import Any

from pgmux.psycopg2._adapt import ISQLQuote, QuotedString
from pgmux.psycopg2._casters import Typecaster, new_array_type, new_type, register_type
from pgmux.psycopg2._exceptions import ProgrammingError

JSON_OID, JSONARRAY_OID = 114, 199
JSONB_OID, JSONBARRAY_OID = 3802, 3807


class Json:
    """An object sent as JSON: ``dumps(adapted)`` (``json.dumps`` unless given, or a
    subclass's ``dumps``) quoted as a string literal."""

    def __init__(self, adapted: Any, dumps: Any = None) -> None:
        self.adapted = adapted
        self._conn: Any = None
        self._dumps = dumps or json.dumps

    def __conform__(self, proto: Any) -> Any:
        return self if proto is ISQLQuote else None

    def dumps(self, obj: Any) -> str:
        return self._dumps(obj)

    def prepare(self, conn: Any) -> None:
        self._conn = conn

    def getquoted(self) -> bytes:
        text = self.dumps(self.adapted)
        quoted = QuotedString(text)
        if self._conn is not None:
            quoted.prepare(self._conn)
        return quoted.getquoted()

    def __str__(self) -> str:
        return self.getquoted().decode("ascii", "replace")


def _create_json_typecasters(oid: int, array_oid: int | None, loads: Any = None,
                             name: str = "JSON") -> tuple[Typecaster, Typecaster | None]:
    loads = loads or json.loads

    def typecast_json(s: str | None, cur: Any) -> Any:
        return None if s is None else loads(s)

    caster = new_type((oid,), name, typecast_json)
    array = new_array_type((array_oid,), f"{name}ARRAY", caster) if array_oid else None
    return caster, array


def _get_json_oids(conn_or_curs: Any, name: str = "json") -> tuple[int, int | None]:
    from pgmux.psycopg2._scope import catalog_rows

    rows = catalog_rows(conn_or_curs, "SELECT t.oid, typarray FROM pg_type t "
                        "WHERE t.typname = %s AND pg_type_is_visible(t.oid)", (name,))
    if not rows:
        raise ProgrammingError(f"{name} data type not found")
    return rows[0][0], rows[0][1] or None


def register_json(conn_or_curs: Any = None, globally: bool = False, loads: Any = None,
                  oid: int | None = None, array_oid: int | None = None,
                  name: str = "json") -> tuple[Typecaster, Typecaster | None]:
    """Read json (or the type ``name``) with ``loads``; on ``conn_or_curs``, or
    everywhere (``globally``, or no connection given)."""
    if oid is None:
        if conn_or_curs is None:
            raise ProgrammingError("the oid of the json type is needed without a connection")
        oid, array_oid = _get_json_oids(conn_or_curs, name)
    caster, array = _create_json_typecasters(oid, array_oid, loads=loads, name=name.upper())
    scope = None if globally or conn_or_curs is None else conn_or_curs
    register_type(caster, scope)
    if array is not None:
        register_type(array, scope)
    return caster, array


def register_default_json(conn_or_curs: Any = None, globally: bool = False,
                          loads: Any = None) -> tuple[Typecaster, Typecaster | None]:
    """``register_json()`` for the server's ``json`` type (and its array), with ``loads``."""
    return register_json(conn_or_curs=conn_or_curs, globally=globally, loads=loads,
                         oid=JSON_OID, array_oid=JSONARRAY_OID)


def register_default_jsonb(conn_or_curs: Any = None, globally: bool = False,
                           loads: Any = None) -> tuple[Typecaster, Typecaster | None]:
    """``register_json()`` for the server's ``jsonb`` type (and its array), with ``loads``."""
    return register_json(conn_or_curs=conn_or_curs, globally=globally, loads=loads,
                         oid=JSONB_OID, array_oid=JSONBARRAY_OID, name="jsonb")
