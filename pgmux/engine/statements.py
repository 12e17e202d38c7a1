"""Prepared statements of one connection: the automatic LRU cache, and what is known of each.

Statement names are content-addressed: a name is a digest of the SQL text and the
parameter types it was parsed with, so one name always stands for one statement,
whichever client or process parsed it. Behind a pooler that shares server
connections between clients, a statement found already present (42P05) is then the
same statement, and one found missing (26000) is simply parsed again.

``Descriptions`` is the client-wide memory of what each (SQL, parameter types)
returns, learned from the server's descriptions: with it, a connection that has
never seen a statement still asks for the right result formats on its first
execution, so the first and every later execution decode the same way.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any, NamedTuple

from pgmux._native import adopt
from pgmux.engine.rowshape import RowShape
from pgmux.errors import DatabaseError
from pgmux.protocol import frontend
from pgmux.protocol.backend import Column

StatementKey = tuple[str, tuple[int, ...]]

AUTO_PREFIX = b"pgmux_s"  # automatically cached statements
CATALOG_PREFIX = b"pgmux_p"  # statements registered with Client.prepare
STALE_TYPE_MESSAGE = "cache lookup failed for type "  # see is_stale_type_error
# Added to a stale type's error when it reaches the caller (inside a transaction block).
STALE_TYPE_HINT = ("a type this cached statement uses was dropped (or dropped and created "
                   "again) since it was prepared; it is prepared again on its next execution")
_DESCRIPTIONS_LIMIT = 4096


def statement_name(prefix: bytes, sql: str, param_oids: tuple[int, ...]) -> bytes:
    """The server-side name for (sql, param_oids): 30 bytes, the same in every process."""
    digest = hashlib.blake2b(sql.encode("utf-8", "surrogatepass"), digest_size=12)
    digest.update(b"\x00" + ",".join(map(str, param_oids)).encode())
    return prefix + b"_" + digest.hexdigest().encode()


class Description(NamedTuple):
    """What the server said a statement takes and returns."""

    param_types: tuple[int, ...]
    columns: tuple[Column, ...]  # () when it returns no rows (NoData)


class Descriptions:
    """(SQL, parameter types) -> Description, shared by a client's connections, bounded
    by ``limit``: when full, the oldest one put is dropped, one at a time. Not emptied
    when full (as the caches of ``pgmux.cache`` are): under more distinct statements than
    it holds, that would drop the descriptions of every statement being described at that
    moment, each then described again. Not an LRU either: a hit is a plain dict look-up
    (it is made per query on the unnamed path, ``statement_cache_size=0`` or a
    transaction pooler; the named path reads its statement cache); a request being
    answered keeps what its descriptions said (``Engine.recall``), and a statement in
    use that is dropped costs one description more, once per ``limit`` new ones."""

    def __init__(self, limit: int = _DESCRIPTIONS_LIMIT):
        self.limit = limit
        self._entries: OrderedDict[StatementKey, Description] = OrderedDict()
        # Commands that may have changed the schema (DDL), seen by any pinned connection of
        # the client: each pinned connection closes its cached statements when this moved.
        self.schema_changes = 0

    def get(self, key: StatementKey) -> Description | None:
        return self._entries.get(key)

    def put(self, key: StatementKey, description: Description) -> None:
        entries = self._entries
        entries[key] = description
        entries.move_to_end(key)  # (a description made again is new)
        if len(entries) > self.limit:
            entries.popitem(last=False)  # the oldest

    def forget(self, key: StatementKey) -> None:
        self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)


class Statement:
    """A statement prepared (or being prepared) on one connection, and what is known of it.

    ``name`` is b"" for the unnamed statement (parsed anew with every execution).
    ``columns`` and ``param_types`` are known once described; ``shape`` and the result
    formats are derived from them for the registry and settings of ``stamp``.
    """

    __slots__ = ("name", "sql", "param_oids", "key", "param_types", "columns", "shape",
                 "stamp", "result_formats", "result_codes", "parse_codes", "bind_prefix",
                 "parse_error",
                 "parsed", "describing", "_parse")

    def __init__(self, name: bytes, sql: str, param_oids: tuple[int, ...]):
        self.name = name
        self.sql = sql
        self.param_oids = param_oids
        self.key: StatementKey = (sql, param_oids)
        self.param_types: tuple[int, ...] | None = None
        self.columns: tuple[Column, ...] | None = None
        self.shape: RowShape | None = None
        self.stamp: tuple[int, int] | None = None  # (registry version, settings epoch)
        self.result_formats: tuple[int, ...] = ()
        self.result_codes = frontend.format_codes(())
        # Sent with the statement's Parse: one format for all columns (see ShapeFactory).
        self.parse_codes = self.result_codes
        # Bind's leading fields: the unnamed portal, then this statement's name.
        self.bind_prefix = b"\x00" + name + b"\x00"
        self.parse_error: dict[str, str] | None = None  # fields of a failed Parse
        self.parsed = False  # the server confirmed (or was sent) its Parse
        self.describing: Any = None  # the DescribeExchange in flight for it, if any
        self._parse: bytes | None = None

    def parse_message(self) -> bytes:
        data = self._parse
        if data is None:  # built once: a statement is parsed again after each reset
            data = self._parse = frontend.parse(self.name, self.sql, self.param_oids)
        return data

    def __repr__(self) -> str:
        return f"<Statement {self.name.decode()} {self.sql[:40]!r}>"


def is_stale_statement_error(error: BaseException | None, cached: bool = True) -> bool:
    """True for the errors that mean a cached statement must be prepared again.

    26000: the statement does not exist (a replaced connection, DISCARD, a pooler's
    other server connection, a failed Parse ahead of us). 0A000 from
    RevalidateCachedQuery: the schema changed under a cached plan so that its result
    type differs. Decided by SQLSTATE and routine, not by text; and, for a statement
    ``cached`` before this request (not parsed by it), a type it names gone
    (``is_stale_type_error``).
    """
    if not isinstance(error, DatabaseError):
        return False
    if error.sqlstate == "26000":
        return True
    if error.sqlstate == "0A000":
        return error.routine == "RevalidateCachedQuery"
    return cached and is_stale_type_error(error)


def is_stale_type_error(error: BaseException | None) -> bool:
    """True for what a prepared statement meets when a type it resolved at Parse was
    dropped since (and perhaps created again, under a new OID): the server invalidates
    no cached plan for that (a composite's, an enum's or a domain's OID folded into a
    constant or a parameter's type), and its Bind then looks up the old OID. XX000 "cache lookup
    failed for type" (an internal error, whose text the server never translates) and
    42704 from lookup_type_cache ("type with OID ... does not exist")."""
    if not isinstance(error, DatabaseError):
        return False
    if error.sqlstate == "XX000":
        return (error.message or "").startswith(STALE_TYPE_MESSAGE)
    return error.sqlstate == "42704" and error.routine == "lookup_type_cache"


def is_duplicate_statement_error(error: BaseException | None) -> bool:
    """42P05 on our own Parse: a pooler's server connection already has this statement."""
    return isinstance(error, DatabaseError) and error.sqlstate == "42P05"


class StatementCache:
    """An LRU of statements keyed by (SQL, parameter OIDs), bounded by ``capacity``.

    Evicted statements are queued for Close; the owner sends those Close messages
    ahead of its next request (``take_closes``), so a Close never overtakes a Bind
    that was queued before it. ``entries`` is the LRU itself (the engine's hot path looks a
    statement up there and, unless it is ``newest`` already, moves it to the end, as ``get``
    does).
    """

    def __init__(self, capacity: int, prefix: bytes = AUTO_PREFIX):
        self.capacity = capacity
        self.entries: OrderedDict[StatementKey, Statement] = OrderedDict()
        self.newest: Statement | None = None  # the last one put or moved to the end
        # Statements the server dropped (DISCARD ALL) whose description is still good:
        # the next execution parses one again instead of building it anew.
        self._parked: dict[StatementKey, Statement] = {}
        self._prefix = prefix
        self.to_close: list[bytes] = []  # evicted names, to Close ahead of the next request

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: StatementKey) -> Statement | None:
        entry = self.entries.get(key)
        if entry is not None and entry is not self.newest:  # to the end: the most recent
            self.entries.move_to_end(key)
            self.newest = entry
        return entry

    def add(self, sql: str, param_oids: tuple[int, ...]) -> Statement:
        name = statement_name(self._prefix, sql, param_oids)
        return self._insert(Statement(name, sql, param_oids))

    def is_parked(self, key: StatementKey) -> bool:
        return key in self._parked

    def revive(self, key: StatementKey) -> Statement | None:
        """The parked statement for ``key``, back in the cache (it needs a Parse), or None."""
        statement = self._parked.pop(key, None)
        if statement is None:
            return None
        statement.parsed = False
        statement.parse_error = None
        return self._insert(statement)

    def _insert(self, statement: Statement) -> Statement:
        entries = self.entries
        entries[statement.key] = statement
        self.newest = statement
        while len(entries) > self.capacity:
            _, old = entries.popitem(last=False)  # the least recently used
            self.to_close.append(old.name)
        return statement

    def park(self) -> None:
        """The server dropped every statement (DISCARD ALL): keep what is known of the
        described ones, to parse them again when next needed."""
        parked = self._parked
        for key, statement in self.entries.items():
            if statement.columns is not None and statement.describing is None:
                parked[key] = statement
        while len(parked) > self.capacity:
            parked.pop(next(iter(parked)))
        self.entries.clear()
        self.to_close.clear()

    def close_all(self) -> None:
        """Forget every statement and Close them on the server (after a DROP or ROLLBACK,
        which can leave a cached plan pointing at what no longer exists)."""
        self.to_close.extend(statement.name for statement in self.entries.values())
        self.entries.clear()
        self._parked.clear()

    def discard(self, statement: Statement, close: bool) -> None:
        """Forget ``statement`` if it is still the cached one for its key."""
        key = statement.key
        if self.entries.get(key) is statement:
            del self.entries[key]
            if close:
                self.to_close.append(statement.name)

    def close_later(self, name: bytes) -> None:
        """Queue a Close for a statement this cache does not hold (a stale catalog entry)."""
        self.to_close.append(name)

    def take_closes(self) -> bytes:
        """Close messages for evicted statements, to prefix to the next request."""
        if not self.to_close:
            return b""
        names, self.to_close = self.to_close, []
        return b"".join(frontend.close_statement(name) for name in names)

    def clear(self) -> None:
        """Forget everything (the server side was dropped)."""
        self.entries.clear()
        self._parked.clear()
        self.to_close.clear()

    def statements(self) -> list[Statement]:
        return list(self.entries.values())

adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
