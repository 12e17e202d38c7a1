"""The codecs of the Django backend's clients: values as Django's PostgreSQL code expects them.

Django's PostgreSQL modules are written against psycopg, and they expect its values:

* jsonb, inet and cidr arrive as text (Django's fields parse them: JSONField with its own
  decoder, the IP address fields as strings), as Django configures psycopg to give them;
* range types arrive as psycopg's ``Range`` (the classes of
  ``django.db.backends.postgresql.psycopg_any``), parsed from their text;
* the parameters Django makes with psycopg's wrappers are sent as psycopg would send
  them: ``Int2`` / ``Int4`` / ``Int8`` (integer fields) as those types, ``Jsonb`` /
  ``Json`` as jsonb / json, ranges as range literals the server types from the context,
  a ``timedelta`` as days, seconds and microseconds (``-1 day +82800 second``, Python's
  own split of it, as psycopg sends it, which PostgreSQL keeps: ``EXTRACT`` sees it).

Each database gets a registry of its own (``registry_for``): what contrib.postgres
registers for its hstore type names that database's OID.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Hashable
from typing import Any

from django.db.backends.postgresql import psycopg_any

from pgmux.dbapi.quoting import is_range
from pgmux.types import TypeRegistry, default_registry, oids
from pgmux.types.text import decode_str

# range type OID -> the OID of its bounds
RANGE_BOUNDS = {
    oids.TYPES["int4range"][0]: oids.INT4,
    oids.TYPES["int8range"][0]: oids.INT8,
    oids.TYPES["numrange"][0]: oids.NUMERIC,
    oids.TYPES["daterange"][0]: oids.DATE,
    oids.TYPES["tsrange"][0]: oids.TIMESTAMP,
    oids.TYPES["tstzrange"][0]: oids.TIMESTAMPTZ,
}


def range_text(value: Any) -> str:
    """The input text of a psycopg-style range (``[1,10)``, ``empty``)."""
    if value.isempty:
        return "empty"
    lower = "" if value.lower is None else _bound_text(value.lower)
    upper = "" if value.upper is None else _bound_text(value.upper)
    return (("[" if value.lower_inc else "(") + lower + "," + upper
            + ("]" if value.upper_inc else ")"))


def _bound_text(bound: Any) -> str:
    text = default_registry.encode_text(bound) or ""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_range(text: str, bound: Callable[[bytes], Any], make: type) -> Any:
    """A range's output text (``[1,10)``, ``("2024-01-01 00:00:00+00",)``, ``empty``)."""
    if text == "empty":
        return make(empty=True)
    lower_text, upper_text = _split_bounds(text[1:-1])
    lower = None if lower_text is None else bound(lower_text.encode())
    upper = None if upper_text is None else bound(upper_text.encode())
    return make(lower, upper, text[0] + text[-1])


def _split_bounds(body: str) -> tuple[str | None, str | None]:
    """The two bounds of a range's text between its brackets (None: unbounded)."""
    bounds: list[str | None] = []
    i = 0
    for _ in range(2):
        if i >= len(body) or body[i] == ",":
            bounds.append(None)
        elif body[i] == '"':
            chars, i = [], i + 1
            while body[i] != '"' or body[i + 1:i + 2] == '"':
                if body[i] == "\\" or body[i] == '"':
                    i += 1
                chars.append(body[i])
                i += 1
            bounds.append("".join(chars))
            i += 1
        else:
            end = body.find(",", i)
            end = len(body) if end == -1 else end
            bounds.append(body[i:end])
            i = end
        i += 1  # past the comma
    return bounds[0], bounds[1]


def _range_decoder(registry: TypeRegistry, bound_oid: int) -> Callable[[Any], Any]:
    make = psycopg_any.Range if hasattr(psycopg_any, "Range") else psycopg_any.NumericRange

    def decode(data: Any) -> Any:
        return parse_range(str(data, "utf-8"), registry.text_decoder(bound_oid), make)

    return decode


def interval_text(value: dt.timedelta) -> str:
    """A timedelta as psycopg sends it: its own days, seconds and microseconds, signed."""
    return f"{value.days:+d} day {value.seconds:+d} second {value.microseconds:+d} microsecond"


def _json_text(value: Any) -> str:
    return (value.dumps or json.dumps)(value.obj)


def _register_psycopg_wrappers(registry: TypeRegistry) -> None:
    """psycopg's parameter wrappers, when psycopg (3) is what Django imports."""
    try:
        from psycopg.types.json import Json, Jsonb
        from psycopg.types.numeric import Int2, Int4, Int8
    except ImportError:
        return
    for cls, oid in ((Int2, oids.INT2), (Int4, oids.INT4), (Int8, oids.INT8)):
        registry.register(oid, python_type=cls, encoder=int.__repr__)
    registry.register(oids.JSONB, python_type=Jsonb, encoder=_json_text)
    registry.register(oids.JSON, python_type=Json, encoder=_json_text)


def build_registry() -> TypeRegistry:
    registry = default_registry.copy()
    for oid in (oids.JSONB, oids.INET, oids.CIDR):
        registry.register(oid, text_decoder=decode_str)
    for range_oid, bound_oid in RANGE_BOUNDS.items():
        registry.register(range_oid, text_decoder=_range_decoder(registry, bound_oid))
    for cls in psycopg_any.RANGE_TYPES:
        if is_range(cls(empty=True)):
            registry.register(0, python_type=cls, encoder=range_text)  # typed by the server
    registry.register(oids.INTERVAL, python_type=dt.timedelta, encoder=interval_text)
    _register_psycopg_wrappers(registry)
    return registry


registry = build_registry()  # the encoders: for literals (no database's types in it)
_registries: dict[Hashable, TypeRegistry] = {}


def registry_for(database: Hashable) -> TypeRegistry:
    """The registry of the clients of one database (host, port, name)."""
    found = _registries.get(database)
    if found is None:
        found = _registries[database] = registry.copy()
    return found
