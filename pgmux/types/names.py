"""Type names users write (``"int"``, ``"text[]"``, ``"timestamp with time zone"``) -> OIDs."""

from __future__ import annotations

from pgmux.errors import InterfaceError
from pgmux.types.oids import TYPES

ALIASES = {
    "int": "int4", "integer": "int4", "smallint": "int2", "bigint": "int8",
    "real": "float4", "double precision": "float8", "boolean": "bool",
    "character varying": "varchar", "character": "bpchar", "decimal": "numeric",
    "timestamp without time zone": "timestamp", "timestamp with time zone": "timestamptz",
    "time without time zone": "time", "time with time zone": "timetz",
}


def type_oid(name: str) -> int:
    """The OID of a built-in type given by name (``"int"``, ``"text[]"``, ``"timestamptz"``)."""
    text = " ".join(name.lower().split())
    array = text.endswith("[]")
    base = text[:-2].strip() if array else text
    entry = TYPES.get(ALIASES.get(base, base))
    if entry is None or (array and not entry[1]):
        raise InterfaceError(f"unknown type name {name!r}; pass its OID instead")
    return entry[1] if array else entry[0]
