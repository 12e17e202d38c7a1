"""Types met at run time: what ``pg_type`` says of an OID, the query that asks, and its rows.

A result column whose type OID the registry does not know (a user's enum, domain,
composite, range, an extension's type, or an array of one) is looked up once per client:
``lookup_sql`` asks for the type and everything it is built from (a domain's base, an
array's element, a range's subtype, a composite's fields) and their array types, ``parse_lookup`` turns the
answer into ``TypeInfo`` records, and ``TypeRegistry.learn`` installs their codecs. The
query is a simple Query with the OIDs written into it, so its own result (built-in types
only, text format) needs no description and no lookup.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

FIRST_USER_OID = 16384  # PostgreSQL's FirstNormalObjectId: below it, built-in objects only
LOOKUP_LIMIT = 1000  # types one lookup may return (a composite of composites is bounded)

# typtype values
BASE, COMPOSITE, DOMAIN, ENUM, PSEUDO, RANGE, MULTIRANGE = "b", "c", "d", "e", "p", "r", "m"
ARRAY_CATEGORY = "A"


@dataclass(frozen=True)
class TypeInfo:
    """One row of ``pg_type`` and what the type is made of."""

    oid: int
    name: str  # typname
    kind: str  # typtype: BASE, COMPOSITE, DOMAIN, ENUM, PSEUDO, RANGE, MULTIRANGE
    category: str  # typcategory ("A" for arrays)
    element: int = 0  # an array's element type (typelem)
    array: int = 0  # the type's array type (typarray)
    base: int = 0  # a domain's base type (typbasetype)
    subtype: int = 0  # a range's element type, a multirange's range type
    delimiter: str = ","  # typdelim, between array elements
    fields: tuple[tuple[str, int], ...] = ()  # a composite's attributes: (name, type oid)

    @property
    def is_array(self) -> bool:
        return self.category == ARRAY_CATEGORY and self.element != 0


def lookup_sql(oids: Iterable[int], multiranges: bool = True) -> str:
    """The query describing ``oids`` and every type they are built from (text results,
    columns as ``parse_lookup`` reads them). ``multiranges``: the server has them (14+)."""
    wanted = ",".join(str(int(oid)) for oid in sorted(set(oids)))
    multi_parts = ("UNION ALL SELECT m.rngtypid FROM pg_catalog.pg_range m "
                   "WHERE m.rngmultitypid = t.oid ") if multiranges else ""
    multi_join = ("LEFT JOIN pg_catalog.pg_range m ON m.rngmultitypid = t.oid "
                  if multiranges else "")
    multi_subtype = "m.rngtypid" if multiranges else "NULL::oid"
    return (
        "WITH RECURSIVE wanted(oid) AS ("
        f"SELECT unnest('{{{wanted}}}'::pg_catalog.oid[]) "
        "UNION SELECT part.oid FROM wanted w JOIN pg_catalog.pg_type t ON t.oid = w.oid, "
        "LATERAL (SELECT t.typelem UNION ALL SELECT t.typbasetype UNION ALL SELECT t.typarray "
        "UNION ALL SELECT r.rngsubtype FROM pg_catalog.pg_range r WHERE r.rngtypid = t.oid "
        f"{multi_parts}"
        "UNION ALL SELECT a.atttypid FROM pg_catalog.pg_attribute a "
        "WHERE a.attrelid = t.typrelid AND t.typrelid <> 0 AND a.attnum > 0 "
        "AND NOT a.attisdropped) AS part(oid) WHERE part.oid <> 0) "
        "SELECT t.oid, t.typname, t.typtype, t.typcategory, t.typelem, t.typarray, "
        "t.typbasetype, t.typdelim, "
        f"coalesce(r.rngsubtype, {multi_subtype}, 0), "
        "(SELECT pg_catalog.array_agg(a.attname::text ORDER BY a.attnum) "
        " FROM pg_catalog.pg_attribute a WHERE a.attrelid = t.typrelid AND t.typrelid <> 0 "
        " AND a.attnum > 0 AND NOT a.attisdropped), "
        "(SELECT pg_catalog.array_agg(a.atttypid ORDER BY a.attnum) "
        " FROM pg_catalog.pg_attribute a WHERE a.attrelid = t.typrelid AND t.typrelid <> 0 "
        " AND a.attnum > 0 AND NOT a.attisdropped) "
        "FROM pg_catalog.pg_type t "
        "LEFT JOIN pg_catalog.pg_range r ON r.rngtypid = t.oid "
        f"{multi_join}"
        f"WHERE t.oid IN (SELECT oid FROM wanted) LIMIT {LOOKUP_LIMIT}"
    )


def parse_lookup(rows: Sequence[Sequence[Any]]) -> list[TypeInfo]:
    """The ``TypeInfo`` of each row of ``lookup_sql``'s answer (values as the built-in
    text decoders give them: ints, strs, lists)."""
    infos = []
    for (oid, name, kind, category, element, array, base, delimiter, subtype, names,
         field_oids) in rows:
        fields = tuple(zip(names or (), map(int, field_oids or ()), strict=True))
        infos.append(TypeInfo(int(oid), str(name), str(kind), str(category), int(element),
                              int(array), int(base), int(subtype), str(delimiter or ","),
                              fields))
    return infos
