"""The query engine: one connection's requests and replies, without any I/O.

Theory of operation
-------------------
Both connection kinds drive one ``Engine`` per server connection. The I/O layer
asks it for the bytes of a request (an ``Exchange``), writes them, appends the
exchange to ``fifo`` (in write order) and hands every batch of framed backend
messages to ``receive``. The engine routes each message to the head of the FIFO:

* asynchronous messages first (NoticeResponse, ParameterStatus, NotificationResponse):
  handed to the callbacks or followed by the settings policy (``settings``), never
  to an exchange;
* DataRow on the fast path, decoded inline with the head's row shape;
* ReadyForQuery completes the head (every request is Sync-terminated or a simple
  Query, except the open operations of explicit pipelines and streams, which end
  at their own last message); ``on_done`` is called with each completed exchange;
* an ErrorResponse fails the head only; FATAL ends the connection.

Requests are built here too, with the statement lifecycle: statements are cached
per connection under content-addressed names, and a statement is described before
its first execution unless the client-wide ``Descriptions`` already know what it
returns, so every execution asks for the same result formats (binary where a
binary decoder exists) and decodes to the same values.

What the engine cannot send itself (a CopyFail after a COPY nobody asked for) is
queued in ``outgoing`` for the I/O layer to write next.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from pgmux.cache import put_bounded
from pgmux.engine.exchanges import (
    COPY_IN_MISUSE,
    CopyExchange,
    DescribeExchange,
    Exchange,
    PortalExchange,
    QueryExchange,
    Reply,
    ScriptExchange,
    SyncExchange,
    aborted_by,
)
from pgmux.engine.params import adapt_params
from pgmux.engine.settings import ServerSettings, SettingRefused
from pgmux.engine.shapes import ShapeFactory
from pgmux.engine.statements import (
    CATALOG_PREFIX,
    Description,
    Descriptions,
    Statement,
    StatementCache,
    StatementKey,
    is_stale_statement_error,
    statement_name,
)
from pgmux.errors import DatabaseError, InterfaceError, OperationalError, ProtocolError
from pgmux.protocol import backend as msg
from pgmux.protocol import frontend
from pgmux.types.registry import TypeRegistry

log = logging.getLogger("pgmux")

__all__ = ["Engine", "PoisonedConnection", "ServerEnded", "SettingRefused"]

EXECUTE_SYNC = frontend.EXECUTE_SYNC
EXECUTE_UNNAMED = frontend.EXECUTE_UNNAMED
DESCRIBE_PORTAL = frontend.DESCRIBE_UNNAMED_PORTAL
SYNC = frontend.SYNC
_STATUS = {b"I": "I", b"T": "T", b"E": "E"}  # ReadyForQuery payload -> transaction status
_ASYNC = frozenset((78, 83, 65))  # NoticeResponse, ParameterStatus, NotificationResponse
UNNAMED_KNOWN_LIMIT = 512  # unnamed statements whose Parse and formats are kept
_SCHEMA_TAGS = frozenset(("DROP ", "ALTER"))  # command tags after which statements go

Notify = tuple[int, str, str]  # (sender pid, channel, payload)


class PoisonedConnection(ProtocolError):
    """Session state changed under a shared connection (a transaction left open): no
    request is to blame, but the connection must go."""


class ServerEnded(OperationalError):
    """The server sent a FATAL (or PANIC) error: it is ending the connection."""

    def __init__(self, error: DatabaseError):
        super().__init__(f"the server ended the connection: {error}")
        self.sqlstate = error.sqlstate
        self.__cause__ = error


class Engine:
    """One server connection's request building and reply interpretation (sans-IO)."""

    def __init__(self, parameters: dict[str, str], registry: TypeRegistry, *,
                 shared: bool,
                 descriptions: Descriptions | None = None,
                 statement_cache_size: int = 512,
                 named_statements: bool = True,
                 on_done: Callable[[Exchange], None] | None = None,
                 on_notice: Callable[[dict[str, str]], None] | None = None,
                 on_notification: Callable[[Notify], None] | None = None):
        self.settings = ServerSettings(parameters, shared=shared)
        self._shared = shared
        # A session may DROP or ALTER what a cached statement names, or roll back what
        # one was parsed against: its statements are closed then, as psycopg does (a
        # shared connection runs none of these), so none fails later inside a transaction.
        self._watch_tags = not shared
        self.registry = registry
        self.shapes = ShapeFactory(registry, self.settings)
        self.descriptions = descriptions if descriptions is not None else Descriptions()
        self.named = named_statements  # False behind a transaction pooler: unnamed only
        self.statements = StatementCache(statement_cache_size if named_statements else 0)
        self.catalog: dict[str, Statement] = {}  # Client.prepare name -> statement here
        # Unnamed statements described before, with the description they were fitted to:
        # their Parse bytes and result formats are built once, not per execution.
        self._unnamed_known: dict[StatementKey, tuple[Description, Statement]] = {}
        self.fifo: deque[Exchange] = deque()
        self.status = "I"  # the transaction status of the last ReadyForQuery
        self.outgoing: list[bytes] = []  # to be written next, by the I/O layer
        self.messages = 0  # backend messages received (for stats)
        self._on_done = on_done
        self._on_notice = on_notice
        self._on_notification = on_notification

    # -- requests: statements ------------------------------------------------------------------
    def query(self, sql: str, oids: tuple[int, ...], formats: tuple[int, ...],
              values: list[bytes | None], tail: bytes = EXECUTE_SYNC,
              kind: type[Exchange] = QueryExchange, cached: bool = True) -> Exchange:
        """The request for one execution of ``sql`` with encoded parameters.

        A ``DescribeExchange`` when what it returns is not known yet: send it, wait for
        it, then ask again. ``tail`` follows Bind (Execute and Sync by default).
        ``cached=False``: through the unnamed statement, not the statement cache.
        """
        cache = self.statements
        if cached and cache.capacity > 0:
            statement = cache.get((sql, oids))
            if statement is not None and statement.columns is not None:
                stamp = statement.stamp  # built for this registry and these settings?
                if (stamp is None or stamp[0] != self.registry.version
                        or stamp[1] != self.settings.epoch):
                    self.shapes.fit(statement)
                data = frontend.bind_statement(statement.bind_prefix, formats, values,
                                               statement.result_codes) + tail
                if cache.to_close:
                    data = cache.take_closes() + data
                return kind(data, Reply(statement.shape), statement, False)
            return self._first_execution(sql, oids, formats, values, tail, kind, statement)
        return self._unnamed(sql, oids, formats, values, tail, kind)

    def _first_execution(self, sql: str, oids: tuple[int, ...], formats: tuple[int, ...],
                         values: list[bytes | None], tail: bytes, kind: type[Exchange],
                         statement: Statement | None) -> Exchange:
        cache = self.statements
        if statement is not None:  # being described by a request ahead of this one
            return self._follow_description(statement)
        statement = cache.revive((sql, oids))
        if statement is not None:  # known from before the server dropped it: parse it again
            return self._parse_and_run(statement, None, formats, values, tail, kind)
        description = self.descriptions.get((sql, oids))
        statement = cache.add(sql, oids)
        try:
            exchange = self._parse_and_run(statement, description, formats, values, tail, kind)
        except BaseException:  # refused by the encoder: never sent, so never prepared
            cache.discard(statement, close=False)
            raise
        if cache.to_close:
            exchange.data = cache.take_closes() + exchange.data
        return exchange

    def _follow_description(self, statement: Statement) -> DescribeExchange:
        """The description of ``statement`` already in flight (wait for it, do not send it
        again), else a new one without Parse (the statement exists)."""
        pending = statement.describing
        if pending is not None and not pending.done:
            return pending
        return self._describing(frontend.describe_statement(statement.name) + SYNC,
                                statement, False)

    @staticmethod
    def _describing(data: bytes, statement: Statement, parses: bool) -> DescribeExchange:
        exchange = DescribeExchange(data, statement, parses)
        statement.describing = exchange
        return exchange

    def _unnamed(self, sql: str, oids: tuple[int, ...], formats: tuple[int, ...],
                 values: list[bytes | None], tail: bytes, kind: type[Exchange]) -> Exchange:
        key = (sql, oids)
        description = self.descriptions.get(key)
        if description is None:  # described first, through a statement of its own
            return self._parse_and_run(Statement(b"", sql, oids), None, formats, values,
                                       tail, kind)
        known = self._unnamed_known.get(key)
        if known is not None and known[0] is description:
            statement = known[1]
        else:
            statement = Statement(b"", sql, oids)
            self._learn(statement, description)
            put_bounded(self._unnamed_known, key, (description, statement), UNNAMED_KNOWN_LIMIT)
        return self._parse_and_run(statement, None, formats, values, tail, kind)

    def _parse_and_run(self, statement: Statement, description: Description | None,
                       formats: tuple[int, ...], values: list[bytes | None], tail: bytes,
                       kind: type[Exchange]) -> Exchange:
        """Parse ``statement``, then describe it, or (when its description is known, given
        or its own) run it."""
        parse = statement.parse_message()
        if description is not None:
            self._learn(statement, description)
        elif statement.columns is None:
            frontend.check_bind(values)  # refused now, not after a round trip
            data = parse + frontend.describe_statement(statement.name) + SYNC
            return self._describing(data, statement, True)
        elif statement.stamp is not self.shapes.current():
            self.shapes.fit(statement)
        data = (parse + frontend.bind_statement(statement.bind_prefix, formats, values,
                                                statement.result_codes)
                + DESCRIBE_PORTAL + tail)
        return kind(data, Reply(), statement, True)

    def is_described(self, sql: str, oids: tuple[int, ...]) -> bool:
        """Whether the result types of (sql, oids) are known, here or client-wide."""
        statement = self.statements.get((sql, oids)) if self.statements.capacity > 0 else None
        if statement is not None and statement.columns is not None:
            return True
        return self.descriptions.get((sql, oids)) is not None

    def describe(self, sql: str, oids: tuple[int, ...]) -> DescribeExchange:
        """Describe (sql, oids) through the unnamed statement, to learn what it returns."""
        statement = Statement(b"", sql, oids)
        data = statement.parse_message() + frontend.describe_statement(b"") + SYNC
        return DescribeExchange(data, statement, True)

    def operation(self, sql: str, oids: tuple[int, ...], formats: tuple[int, ...],
                  values: list[bytes | None]) -> PortalExchange:
        """One operation of an explicit pipeline (no Sync of its own), through the unnamed
        statement: its Parse may be skipped with the rest of its group. Described already,
        unless its description failed; it then goes with text results and fails at the
        server as its description did."""
        exchange = self.query(sql, oids, formats, values, EXECUTE_UNNAMED, PortalExchange,
                              cached=False)
        if type(exchange) is DescribeExchange:
            data = (frontend.parse(b"", sql, oids) + frontend.bind(b"", b"", formats, values)
                    + DESCRIBE_PORTAL + EXECUTE_UNNAMED)
            exchange = PortalExchange(data)
        return exchange  # type: ignore[return-value]

    def _learn(self, statement: Statement, description: Description) -> None:
        statement.param_types = description.param_types
        statement.columns = description.columns
        statement.stamp = None
        self.shapes.fit(statement)

    # -- requests: the client's named statements (Client.prepare) -----------------------------
    def catalog_describe(self, name: str, sql: str,
                         oids: tuple[int, ...]) -> DescribeExchange | None:
        """Parse and describe registered statement ``name`` here; None if a statement with
        the same SQL and types is registered here already (it is shared: same name)."""
        existing = self._find_catalog(sql, oids)
        if existing is not None:
            self.catalog[name] = existing
            return None
        server_name = statement_name(CATALOG_PREFIX, sql, oids) if self.named else b""
        statement = Statement(server_name, sql, oids)
        if self.named:
            self.catalog[name] = statement  # its Parse is on its way (forgotten if it fails)
        data = statement.parse_message() + frontend.describe_statement(server_name) + SYNC
        return self._describing(data, statement, True)

    def _find_catalog(self, sql: str, oids: tuple[int, ...]) -> Statement | None:
        for statement in self.catalog.values():
            if statement.sql == sql and statement.param_oids == oids:
                return statement
        return None

    def catalog_query(self, name: str, sql: str, oids: tuple[int, ...],
                      params: Sequence[Any]) -> Exchange:
        """An execution of registered statement ``name``, with parameters encoded for the
        types the server holds for it; a ``DescribeExchange`` first when those are unknown."""
        exchange = self._catalog_request(name, sql, oids, params)
        cache = self.statements
        if cache.to_close:  # before any Parse: a stale copy of the name may be closing
            exchange.data = cache.take_closes() + exchange.data
        return exchange

    def _catalog_request(self, name: str, sql: str, oids: tuple[int, ...],
                         params: Sequence[Any]) -> Exchange:
        statement = self.catalog.get(name)
        if statement is not None and statement.columns is not None:
            shapes = self.shapes
            if statement.stamp is not shapes.current():
                shapes.fit(statement)
            formats, values = self._adapt(statement, params)
            data = frontend.bind_statement(statement.bind_prefix, formats, values,
                                           statement.result_codes) + EXECUTE_SYNC
            return QueryExchange(data, Reply(statement.shape), statement, False)
        if statement is not None:  # its description is on its way
            return self._follow_description(statement)
        description = self.descriptions.get((sql, oids))
        if description is None:
            exchange = self.catalog_describe(name, sql, oids)
            return exchange or self._catalog_request(name, sql, oids, params)
        server_name = statement_name(CATALOG_PREFIX, sql, oids) if self.named else b""
        statement = Statement(server_name, sql, oids)
        self._learn(statement, description)
        formats, values = self._adapt(statement, params)
        exchange = self._parse_and_run(statement, description, formats, values, EXECUTE_SYNC,
                                       QueryExchange)
        if self.named:
            self.catalog[name] = statement
        return exchange

    def _adapt(self, statement: Statement, params: Sequence[Any]) -> tuple[
            tuple[int, ...], list[bytes | None]]:
        types = statement.param_types or ()
        if len(params) != len(types):
            raise InterfaceError(f"the statement takes {len(types)} parameters, "
                                 f"{len(params)} given")
        oids, formats, values = self.registry.encode_params(params)
        if oids == types:
            return formats, values
        return adapt_params(self.registry, params, types, oids, formats, values)

    # -- requests: everything else -------------------------------------------------------------
    def script(self, sql: str) -> ScriptExchange:
        """A simple Query: one statement or several, text results."""
        return ScriptExchange(frontend.query(sql))

    def copy(self, sql: str, direction: int) -> CopyExchange:
        """``COPY`` by simple Query; ``direction`` is 71 (FROM STDIN) or 72 (TO STDOUT)."""
        return CopyExchange(frontend.query(sql), direction)

    def sync(self) -> SyncExchange:
        return SyncExchange(SYNC)

    @staticmethod
    def portal_rows(batch: int) -> bytes:
        """The tail that runs the unnamed portal for ``batch`` rows and flushes (a stream)."""
        return frontend.execute(b"", batch) + frontend.FLUSH

    def close_portal(self) -> SyncExchange:
        """Close the unnamed portal (a stream left early), then Sync."""
        return SyncExchange(frontend.close_portal(b"") + SYNC)

    def take_outgoing(self) -> bytes:
        data = b"".join(self.outgoing)
        self.outgoing = []
        return data

    @property
    def head(self) -> Exchange | None:
        return self.fifo[0] if self.fifo else None

    # -- replies ---------------------------------------------------------------------------------
    def receive(self, messages: list[tuple[int, bytes]]) -> None:
        """Route one batch of framed backend messages (the reader's hot loop)."""
        self.messages += len(messages)
        fifo = self.fifo
        head = fifo[0] if fifo else None
        try:
            for kind, payload in messages:
                if kind == 68:  # DataRow
                    if head.wanted:  # an abandoned exchange's rows are dropped
                        reply = head.reply
                        try:
                            reply.rows.append(reply.shape.decode(payload))
                        except Exception:
                            reply.add_row(payload)  # the slow path names what went wrong
                elif kind == 90:  # ReadyForQuery
                    head = self._ready(head, payload)
                elif kind == 67:  # CommandComplete
                    tag = msg.parse_command_complete(payload)
                    if head.command_complete(tag):
                        head = self._finish_open()
                    if self._watch_tags and (tag[:5] in _SCHEMA_TAGS or tag == "ROLLBACK"):
                        self.statements.close_all()
                elif kind != 50:  # BindComplete needs nothing
                    head = self._other(head, kind, payload)
        except AttributeError:
            if head is None:
                raise ProtocolError("the server sent a reply while nothing was asked") from None
            raise

    def _ready(self, head: Exchange | None, payload: bytes) -> Exchange | None:
        if head is None:
            raise ProtocolError("ReadyForQuery without a request")
        if not head.ENDS_AT_READY:
            raise ProtocolError("ReadyForQuery inside an operation of a pipeline")
        self.status = status = _STATUS.get(payload) or msg.parse_ready_for_query(payload)
        fifo = self.fifo
        fifo.popleft()
        if type(head) is DescribeExchange:
            head.statement.describing = None
            if head.reply.error is None:
                self._described(head)
        head.done = True
        if self._on_done is not None:
            self._on_done(head)
        if status != "I" and self._shared:
            raise PoisonedConnection(
                f"a shared connection was left in transaction status {status!r}; replacing it")
        return fifo[0] if fifo else None

    def _described(self, exchange: DescribeExchange) -> None:
        statement = exchange.statement
        description = Description(exchange.param_types or (), exchange.columns or ())
        self.descriptions.put(statement.key, description)
        self._learn(statement, description)

    def _finish_open(self) -> Exchange | None:
        fifo = self.fifo
        head = fifo.popleft()
        head.done = True
        if self._on_done is not None:
            self._on_done(head)
        return fifo[0] if fifo else None

    def _other(self, head: Exchange | None, kind: int, payload: bytes) -> Exchange | None:
        if kind in _ASYNC:
            self._async(kind, payload)
            return head
        if head is None:
            if kind == 69:  # an error with nothing in flight: the server is ending us
                raise ServerEnded(DatabaseError.from_fields(msg.parse_fields(payload)))
            raise ProtocolError(f"unexpected message {bytes([kind])!r} while nothing was asked")
        if kind == 84:  # RowDescription
            shape = self.shapes.from_payload(payload)
            head.row_description(shape)
            # Only a request that parsed asks to describe its portal: a RowDescription here
            # says what the statement returns now (its ParseComplete came already).
            if head.statement is not None and type(head) is not DescribeExchange:
                self._check_columns(head.statement, shape.columns)
        elif kind == 49:  # ParseComplete: the statement exists now, whatever follows
            head.parses = False
            if head.statement is not None:
                head.statement.parsed = True
        elif kind == 110:  # NoData
            head.no_data()
        elif kind == 116:  # ParameterDescription
            head.parameter_description(msg.parse_parameter_description(payload))
        elif kind == 69:  # ErrorResponse
            return self._error(head, msg.parse_fields(payload))
        elif kind == 73:  # EmptyQueryResponse
            head.empty_query()
            if not head.ENDS_AT_READY:
                return self._finish_open()
        elif kind == 115:  # PortalSuspended
            head.portal_suspended()
            if not head.ENDS_AT_READY:
                return self._finish_open()
        elif kind in (71, 72, 87):  # CopyIn/CopyOut/CopyBothResponse
            if not head.copy_response(kind) and kind != 72:
                self._copy_in_unasked(head)
        elif kind in (100, 99):  # CopyData, CopyDone
            head.copy_data(payload)
        elif kind != 51:  # CloseComplete needs nothing
            raise ProtocolError(f"unexpected message {bytes([kind])!r} in a reply")
        return head

    def _check_columns(self, statement: Statement, columns: tuple[Any, ...]) -> None:
        """A statement parsed with a known description: did the schema change since?"""
        known = statement.columns
        if known is not None and [c.type_oid for c in known] == [c.type_oid for c in columns]:
            return
        description = Description(statement.param_types or (), columns)
        self.descriptions.put(statement.key, description)
        self._learn(statement, description)

    def _error(self, head: Exchange, fields: dict[str, str]) -> Exchange | None:
        if fields.get("V", fields.get("S")) in ("FATAL", "PANIC"):
            raise ServerEnded(DatabaseError.from_fields(fields))
        head.reply.fail(fields)
        if head.statement is not None:
            self._statement_failed(head, head.statement, fields)
        if head.ENDS_AT_READY:
            return head
        # An open operation: the server now skips everything up to the next Sync.
        error = head.reply.error
        head = self._finish_open()
        fifo = self.fifo
        while head is not None and not head.ENDS_AT_READY:
            fifo.popleft()
            head.abort(aborted_by(error))
            if head.parses and head.statement is not None:  # its Parse was skipped too
                self.statements.discard(head.statement, close=False)
                self._forget_catalog(head.statement)
            if self._on_done is not None:
                self._on_done(head)
            head = fifo[0] if fifo else None
        return head

    def _statement_failed(self, head: Exchange, statement: Statement,
                          fields: dict[str, str]) -> None:
        """Keep the statement cache true after ``head``, which used ``statement``, failed.

        A failed Parse means the statement does not exist on the server, except 42P05:
        behind a pooler the server connection already had this (content-addressed)
        statement. A request that relied on a Parse that failed ahead of it gets that
        Parse's error instead of 26000. A stale statement is forgotten (and closed if it
        still exists), so the retry prepares it again.
        """
        code = fields.get("C")
        cache = self.statements
        if head.parses:
            if code == "42P05" and statement.name:
                statement.parsed = True
                return
            statement.parse_error = fields
            cache.discard(statement, close=False)
            self._forget_catalog(statement)
            return
        if code == "26000" and statement.parse_error is not None:
            head.reply.error = DatabaseError.from_fields(statement.parse_error)
            return
        if is_stale_statement_error(head.reply.error):
            exists = code != "26000"
            cache.discard(statement, close=exists)
            if self._forget_catalog(statement) and exists:
                cache.close_later(statement.name)
            if exists:  # the result type changed: what was described no longer holds
                self.descriptions.forget(statement.key)

    def _forget_catalog(self, statement: Statement) -> bool:
        found = [name for name, entry in self.catalog.items() if entry is statement]
        for name in found:
            del self.catalog[name]
        return bool(found)

    def _copy_in_unasked(self, head: Exchange) -> None:
        """The server waits for COPY data nobody will send: end the COPY, if that is safe.

        During COPY FROM STDIN the server ignores Sync. With nothing written behind the
        COPY, a CopyFail (and, for the extended protocol, a Sync in place of the one it
        swallowed) ends it cleanly. An open operation followed by more operations of its
        group ends by itself: the server fails the COPY on their first message and skips
        to the group's Sync. Anything else would shift every later reply.
        """
        behind = len(self.fifo) - 1
        if behind == 0 or (behind == 1 and not head.ENDS_AT_READY
                           and type(self.fifo[1]) is SyncExchange):
            self.outgoing.append(frontend.copy_fail(COPY_IN_MISUSE)
                                 + (SYNC if head.EXTENDED else b""))
        elif head.ENDS_AT_READY or type(self.fifo[1]) is SyncExchange:
            raise ProtocolError(f"{COPY_IN_MISUSE}; a COPY FROM STDIN among pipelined "
                                "requests cannot be ended safely, so the connection is closed")

    def _async(self, kind: int, payload: bytes) -> None:
        if kind == 83:
            name, value = msg.parse_parameter_status(payload)
            self.settings.update(name, value)
        elif kind == 78:
            if self._on_notice is not None:
                self._on_notice(msg.parse_fields(payload))
        elif self._on_notification is not None:
            self._on_notification(msg.parse_notification(payload))
        else:
            log.warning("pgmux: dropped a notification on a connection that does not LISTEN")
