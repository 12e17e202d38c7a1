"""Deferred pinning: which statements of a client's DB-API transactions may run multiplexed.

A DB-API transaction at READ COMMITTED starts unpinned: its plain reads
(``pgmux.sql.reads``) go multiplexed, and the first statement that needs the transaction
takes a pinned connection, with BEGIN written in front of it. What the text cannot tell,
the server can: whether a function the statement calls is volatile (``pg_proc``), whether
a relation it names is a view that calls a volatile function or the clock (through other
views too: ``pg_rewrite``, ``pg_depend``) or a foreign table (``pg_class``), and whether
the server's default isolation is READ COMMITTED (asked once per client). Names are looked
up on the multiplexed path the first time they are met, all the unknown ones of a
statement in one query, and again after ``LOOKUP_TTL``, so that a function or view
replaced is noticed; a statement found plain is then known as such, per SQL text, until
the first of its names is due again (a dict look-up per statement). One ``Deferral`` serves
every handle of a client.
"""

from __future__ import annotations

import weakref
from time import monotonic as monotonic  # (routing reads the clock here too)
from typing import Any

from pgmux.cache import put_bounded
from pgmux.client import Client
from pgmux.sql.facts import CACHE_SIZE, remember
from pgmux.sql.reads import ReadCheck, read_check
from pgmux.sql.relations import Relation

LOOKUP_TTL = 60.0  # seconds a looked-up function or relation is trusted
# One row per name: ('f', '', function name, whether any function of that name is volatile;
# a name pg_proc does not have is volatile: it could be an alias list, or made later) and
# ('r', schema or '', relation name, whether a relation of that name pins: a foreign
# table, or a view whose definition, or that of a view it reads, calls a volatile
# function, now() or the SQL clock, as the rule's node tree says; a name pg_class does not
# have is no relation). No backslash: standard_conforming_strings may be off.
LOOKUP_SQL = """WITH RECURSIVE named(nsp, rel, oid, relkind) AS (
    SELECT w.nsp, w.rel, c.oid, c.relkind
    FROM unnest($2::text[], $3::text[]) AS w(nsp, rel)
    JOIN pg_catalog.pg_class c ON c.relname = w.rel
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE w.nsp = '' OR n.nspname = w.nsp
  UNION
    SELECT r.nsp, r.rel, c.oid, c.relkind FROM named r
    JOIN pg_catalog.pg_rewrite w ON w.ev_class = r.oid
    JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
        AND d.objid = w.oid AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
    JOIN pg_catalog.pg_class c ON c.oid = d.refobjid
    WHERE r.relkind = 'v' AND c.oid <> r.oid)
SELECT 'r', n.nsp, n.rel, bool_or(n.relkind = 'f' OR coalesce(v.pins, false))
FROM named n LEFT JOIN LATERAL (
    SELECT w.ev_action::text ~ '[{]SQLVALUEFUNCTION :op [0-8] ' OR EXISTS (
        SELECT FROM regexp_matches(w.ev_action::text,
                                   ':(funcid|opno|aggfnoid|winfnoid) ([0-9]+)', 'g') AS m(f)
        JOIN pg_catalog.pg_proc p ON p.oid = CASE WHEN m.f[1] = 'opno' THEN (
            SELECT o.oprcode::oid FROM pg_catalog.pg_operator o WHERE o.oid = m.f[2]::oid)
            ELSE m.f[2]::oid END
        WHERE p.provolatile = 'v' OR p.proname IN ('now', 'transaction_timestamp')) AS pins
    FROM pg_catalog.pg_rewrite w WHERE w.ev_class = n.oid AND n.relkind = 'v') AS v ON true
GROUP BY n.nsp, n.rel
UNION ALL
SELECT 'f', '', p.proname, bool_or(p.provolatile = 'v') FROM pg_catalog.pg_proc p
WHERE p.proname = ANY($1::text[]) GROUP BY p.proname"""
ISOLATION_SQL = "SELECT current_setting('default_transaction_isolation')"
DEFERRABLE_LEVELS = frozenset({"read committed", "read uncommitted"})  # one snapshot each

_deferrals: weakref.WeakKeyDictionary[Client, Deferral] = weakref.WeakKeyDictionary()


def deferral_for(client: Client) -> Deferral:
    """The client's ``Deferral`` (made on first use)."""
    found = _deferrals.get(client)
    if found is None:
        found = _deferrals[client] = Deferral()
    return found


class Deferral:
    """What one client's DB-API transactions may run before they pin (what it learned of
    the server; the client is passed in, so that this cache does not keep it alive)."""

    def __init__(self) -> None:
        # function name -> (volatile, looked up at); relation -> (pins, looked up at);
        # all three bounded as the SQL-text caches are (emptied when full: looked up again)
        self._functions: dict[str, tuple[bool, float]] = {}
        self._relations: dict[Relation, tuple[bool, float]] = {}
        self.plain: dict[str, float] = {}  # SQL found a plain read -> until when
        self._default_defers: bool | None = None

    def level_defers(self, client: Client, isolation: str | None) -> bool:
        """Whether a transaction of ``isolation`` (None: the server's default) has a snapshot
        per statement, so that its plain reads may run outside it."""
        if isolation is not None:
            return _level(isolation) in DEFERRABLE_LEVELS
        if self._default_defers is None:
            level = client.fetchval(ISOLATION_SQL)
            self._default_defers = _level(level) in DEFERRABLE_LEVELS
        return self._default_defers

    def needs_transaction(self, client: Client, sql: str) -> str | None:
        """Why ``sql`` must run in the pinned transaction, or None: it is a plain read."""
        until = self.plain.get(sql)
        if until is not None and until > monotonic():
            return None
        check = read_check(sql)
        if check.needs is not None:
            return check.needs
        return self._judge(client, sql, check)

    def _judge(self, client: Client, sql: str, check: ReadCheck) -> str | None:
        now = monotonic()
        # what is known of its names, read before a look-up (whose stores may empty a cache)
        functions = {name: self._functions.get(name) for name in check.functions}
        relations = {name: self._relations.get(name) for name in check.relations}
        unknown_functions = [name for name, found in functions.items()
                             if found is None or now - found[1] > LOOKUP_TTL]
        unknown_relations = [name for name, seen in relations.items()
                             if seen is None or now - seen[1] > LOOKUP_TTL]
        if unknown_functions or unknown_relations:
            found_functions, found_relations = self._look_up(
                client, unknown_functions, unknown_relations, now)
            functions.update(found_functions)
            relations.update(found_relations)
        return self._verdict(sql, functions, relations, now)

    def _verdict(self, sql: str, functions: dict[str, Any], relations: dict[Relation, Any],
                 now: float) -> str | None:
        """Why the statement pins, from what is known of each of its names; None (and the
        text remembered as plain) if nothing does."""
        for name in sorted(functions):
            if functions[name][0]:
                return f"{name}() is volatile (or not in pg_proc)"
        for relation in sorted(relations):
            if relations[relation][0]:
                shown = ".".join(part for part in relation if part)
                return (f"{shown} is a view that calls a volatile function or the clock, "
                        "or a foreign table")
        looked_up = [seen[1] for seen in functions.values()]
        looked_up.extend(seen[1] for seen in relations.values())
        remember(self.plain, sql, min(looked_up, default=now) + LOOKUP_TTL)
        return None

    def _look_up(self, client: Client, functions: list[str], relations: list[Relation],
                 now: float) -> tuple[dict[str, Any], dict[Relation, Any]]:
        """Ask the server about ``functions`` and ``relations``; what it said of each (kept,
        in bounded caches, for ``LOOKUP_TTL``)."""
        rows = client.query(LOOKUP_SQL, [functions, [schema for schema, _ in relations],
                                         [name for _, name in relations]]).rows
        found: dict[tuple[str, str, str], Any] = {(kind, schema, name): pins
                                                  for kind, schema, name, pins in rows}
        said_functions = {name: (found.get(("f", "", name), True), now) for name in functions}
        said_relations = {(schema, name): (found.get(("r", schema, name), False), now)
                          for schema, name in relations}
        for function, verdict in said_functions.items():
            put_bounded(self._functions, function, verdict, CACHE_SIZE)
        for relation, verdict in said_relations.items():
            put_bounded(self._relations, relation, verdict, CACHE_SIZE)
        return said_functions, said_relations


def _level(name: Any) -> str:
    return " ".join(str(name).lower().replace("_", " ").replace("-", " ").split())
