"""What ``django.contrib.postgres`` registers with psycopg, done in pgmux's codecs instead.

On every new connection contrib.postgres registers the hstore and citext types it finds
in the database with the connection's psycopg adapters (``TypeInfo.register``,
``register_hstore``). A backend connection of pgmux offers an ``adapters`` object that
takes those calls and registers pgmux codecs instead: hstore values as ``dict`` (and
dicts sent as hstore), citext[] as a list of str. Each type (name and OIDs) is registered
once; a new OID (the extension created again) replaces the old.
"""

from __future__ import annotations

import re
import weakref
from typing import Any

import pgmux.dbapi
from pgmux.types import TypeRegistry, oids

_HSTORE_PAIR = re.compile(
    r'\s*"((?:[^"\\]|\\.)*)"\s*=>\s*(?:"((?:[^"\\]|\\.)*)"|(NULL))\s*(?:,|$)', re.DOTALL)
_UNESCAPE = re.compile(r"\\(.)", re.DOTALL)


def parse_hstore(text: str) -> dict[str, str | None]:
    """hstore output text (``"a"=>"1", "b"=>NULL``) as a dict."""
    found: dict[str, str | None] = {}
    position = 0
    while position < len(text):
        match = _HSTORE_PAIR.match(text, position)
        if match is None:
            raise ValueError(f"not hstore text: {text[position:position + 40]!r}")
        key, value, null = match.groups()
        found[_UNESCAPE.sub(r"\1", key)] = None if null else _UNESCAPE.sub(r"\1", value)
        position = match.end()
    return found


def _decode_hstore(data: Any) -> dict[str, str | None]:
    return parse_hstore(str(data, "utf-8"))


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def hstore_text(value: dict[Any, Any]) -> str:
    """A dict as hstore input text (keys and values as str; None is NULL)."""
    return ", ".join(f"{_quote(str(key))}=>{'NULL' if item is None else _quote(str(item))}"
                     for key, item in value.items())


class _Types:
    """``adapters.types``: what ``TypeInfo.register`` adds lands in pgmux's registry."""

    def __init__(self, registry: TypeRegistry, done: set[tuple[str, int, int]]):
        self._registry = registry
        self._done = done

    def add(self, info: Any) -> None:
        key = (info.name, info.oid, info.array_oid)
        if key in self._done:
            return
        self._done.add(key)
        registry = self._registry
        if info.name == "hstore":  # (the registry is this database's: see types.registry_for)
            registry.register(info.oid, text_decoder=_decode_hstore, python_type=dict,
                              encoder=hstore_text)  # typed, as psycopg sends it: hstore casts
            if info.array_oid:
                registry.register_array(info.array_oid, info.oid)
        elif info.name == "citext" and info.array_oid:
            # Decoded as text[] is; lists of str are still sent as text[] (register_array
            # would send them as citext[]).
            registry.register(info.array_oid,
                              text_decoder=registry.text_decoder(oids.TEXT_ARRAY))


class PsycopgAdapters:
    """The part of psycopg's ``AdaptersMap`` contrib.postgres uses; loaders and dumpers
    are psycopg's own and are not needed: the type's name says what to register."""

    def __init__(self, registry: TypeRegistry, done: set[tuple[str, int, int]]):
        self.types = _Types(registry, done)

    def register_loader(self, oid: Any, loader: Any) -> None:
        """Done by ``types.add``."""

    def register_dumper(self, cls: Any, dumper: Any) -> None:
        """Done by ``types.add``."""


# What each registry has had registered: (type name, oid, array oid).
_registered: weakref.WeakKeyDictionary[TypeRegistry, set[tuple[str, int, int]]] = (
    weakref.WeakKeyDictionary())


class BackendConnection(pgmux.dbapi.Connection):
    """A ``pgmux.dbapi`` handle with the psycopg ``adapters`` contrib.postgres registers
    its types with."""

    @property
    def adapters(self) -> PsycopgAdapters:
        registry = self.client.types
        return PsycopgAdapters(registry, _registered.setdefault(registry, set()))
