"""Per-connection prepared statements: the automatic LRU cache and the named catalog."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from pgmux.errors import DatabaseError
from pgmux.protocol import frontend
from pgmux.protocol.backend import Column
from pgmux.protocol.result import Reply, RowShape

StatementKey = tuple[str, tuple[int, ...]]


class Statement:
    """A statement prepared (or being prepared) on one connection.

    ``shape`` and ``result_formats`` are known once a RowDescription (or NoData)
    for it has been read; until then every execution also describes its portal.
    """

    __slots__ = ("name", "sql", "param_oids", "shape", "result_formats", "result_codes",
                 "bind_prefix", "parse_error")

    def __init__(self, name: bytes, sql: str, param_oids: tuple[int, ...]):
        self.name = name
        self.sql = sql
        self.param_oids = param_oids
        self.shape: RowShape | None = None
        self.result_formats: tuple[int, ...] = ()
        self.result_codes = frontend.format_codes(())
        # Bind's leading fields: the unnamed portal, then this statement's name.
        self.bind_prefix = b"\x00" + name + b"\x00"
        self.parse_error: dict[str, str] | None = None  # fields of a failed Parse

    def parse_message(self) -> bytes:
        return frontend.parse(self.name, self.sql, self.param_oids)


def is_stale_statement_error(error: BaseException | None) -> bool:
    """True for the errors that mean a cached statement must be prepared again.

    26000: the statement does not exist (a replaced connection, DISCARD, a failed Parse
    ahead of us). 0A000 from RevalidateCachedQuery: the schema changed under a cached
    plan so that its result type differs. Decided by SQLSTATE and routine, not by text.
    """
    if not isinstance(error, DatabaseError):
        return False
    if error.sqlstate == "26000":
        return True
    return error.sqlstate == "0A000" and error.routine == "RevalidateCachedQuery"


class StatementCache:
    """An LRU of statements keyed by (SQL, parameter OIDs), bounded by ``capacity``.

    Evicted statements are queued for Close; the owner sends those Close messages
    ahead of its next unit (``take_closes``), so a Close never overtakes a Bind that
    was queued before it.
    """

    def __init__(self, capacity: int, name_prefix: bytes = b"pgmux_s"):
        self.capacity = capacity
        self._entries: OrderedDict[StatementKey, Statement] = OrderedDict()
        self._prefix = name_prefix
        self._counter = 0
        self._to_close: list[bytes] = []

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: StatementKey) -> Statement | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def add(self, sql: str, param_oids: tuple[int, ...]) -> Statement:
        self._counter += 1
        statement = Statement(b"%s%d" % (self._prefix, self._counter), sql, param_oids)
        self._entries[(sql, param_oids)] = statement
        while len(self._entries) > self.capacity:
            _, old = self._entries.popitem(last=False)
            self._to_close.append(old.name)
        return statement

    def discard(self, statement: Statement, close: bool) -> None:
        """Forget ``statement`` if it is still the cached one for its key."""
        key = (statement.sql, statement.param_oids)
        if self._entries.get(key) is statement:
            del self._entries[key]
            if close:
                self._to_close.append(statement.name)

    def record_error(self, reply: Reply, statement: Statement | None, parses: bool,
                     fields: dict[str, str]) -> str | None:
        """Fail ``reply`` with ErrorResponse ``fields`` (its first error wins) and update
        the cache for the statement it used, if any; see ``after_error``."""
        if reply.error is None:
            reply.fail(fields)
        if statement is None:
            return None
        return self.after_error(statement, parses, reply, fields)

    def after_error(self, statement: Statement, parses: bool, reply: Reply,
                    fields: dict[str, str]) -> str | None:
        """Update the cache after a unit using ``statement`` got ErrorResponse ``fields``.

        Returns ``"absent"`` when the statement does not exist on the server (its own
        Parse failed), ``"stale"`` when it exists but must be prepared again, else None;
        the owner drops any other reference to it accordingly. A unit that relied on a
        Parse that failed ahead of it gets that Parse's error instead of 26000.
        """
        if parses:  # Parse itself failed: the statement does not exist on the server
            statement.parse_error = fields
            self.discard(statement, close=False)
            return "absent"
        if fields.get("C") == "26000" and statement.parse_error is not None:
            reply.fail(statement.parse_error)
            return None
        if is_stale_statement_error(reply.error):
            exists = fields.get("C") != "26000"
            self.discard(statement, close=exists)
            return "stale" if exists else "absent"
        return None

    def close_later(self, name: bytes) -> None:
        """Queue a Close for a statement this cache does not hold (a stale catalog entry)."""
        self._to_close.append(name)

    def take_closes(self) -> bytes:
        """Close messages for evicted statements, to prefix to the next unit."""
        if not self._to_close:
            return b""
        names, self._to_close = self._to_close, []
        return b"".join(frontend.close_statement(name) for name in names)

    def clear(self) -> None:
        """Forget everything (the server side was dropped, e.g. by DISCARD ALL)."""
        self._entries.clear()
        self._to_close.clear()

    def statements(self) -> list[Statement]:
        return list(self._entries.values())


def learn_shape(statement: Statement, columns: tuple[Column, ...],
                make_shape: Callable[[tuple[Column, ...], tuple[int, ...]], RowShape],
                preferred_format: Callable[[int], int]) -> None:
    """Record what ``statement`` returns and the result formats to ask for from now on."""
    formats = tuple(preferred_format(c.type_oid) for c in columns)
    if not any(formats):
        formats = ()  # all text: send no format codes at all
    statement.result_formats = formats
    statement.result_codes = frontend.format_codes(formats)
    statement.shape = make_shape(columns, formats)
