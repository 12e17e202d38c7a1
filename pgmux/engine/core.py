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
* DataRow on the fast path, decoded inline with the head's row shape; a run of DataRows
  the compiled framing hands out undecoded (``ROW_RUN``) in one call (``decode_rows``);
* ReadyForQuery completes the head (every request is Sync-terminated or a simple
  Query, except the open operations of explicit pipelines and streams, which end
  at their own last message); ``on_done`` is called with each completed exchange
  (the pipelined driver passes a list's ``append`` and wakes the callers once per
  batch); a plain single statement (``Exchange.PLAIN``) is completed inline;
* an ErrorResponse fails the head only; FATAL ends the connection.

Requests are built by the other half of the class (``pgmux.engine.requests``), with the
statement lifecycle. When an exchange completes, ``outcome()`` tells its caller what to do
next (``pgmux.engine.outcome``): every driver asks the engine, none decides by itself.

What the engine cannot send itself (a CopyFail after a COPY nobody asked for) is
queued in ``outgoing`` for the I/O layer to write next.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from pgmux._native import adopt
from pgmux.engine import late
from pgmux.engine.exchanges import (
    COPY_IN_MISUSE,
    DONE,
    SUSPENDED,
    DescribeExchange,
    Exchange,
    SyncExchange,
    TextExchange,
    TypeLookupExchange,
    aborted_by,
)
from pgmux.engine.outcome import AWAITS, CLASH, DESCRIBED, LOST, RESTART, STALE, UNSENT, Outcome
from pgmux.engine.outcome import DONE as ANSWERED
from pgmux.engine.requests import SYNC, Requests
from pgmux.engine.rowshape import decode_rows
from pgmux.engine.settings import ServerSettings, SettingRefused
from pgmux.engine.shapes import ShapeFactory
from pgmux.engine.statements import (
    STALE_TYPE_HINT,
    Description,
    Descriptions,
    Statement,
    StatementCache,
    StatementKey,
    is_duplicate_statement_error,
    is_stale_statement_error,
    is_stale_type_error,
)
from pgmux.errors import DatabaseError, NotDispatchedError, OperationalError, ProtocolError
from pgmux.protocol import backend as msg
from pgmux.protocol import frontend
from pgmux.protocol.framing import ROW_RUN
from pgmux.types.introspect import parse_lookup
from pgmux.types.registry import TypeRegistry

log = logging.getLogger("pgmux")

__all__ = ["Engine", "PoisonedConnection", "ServerEnded", "SettingRefused"]

_STATUS = {b"I": "I", b"T": "T", b"E": "E"}  # ReadyForQuery payload -> transaction status
_ASYNC = frozenset((msg.NOTICE_RESPONSE, msg.PARAMETER_STATUS, msg.NOTIFICATION_RESPONSE))
_COPY_RESPONSES = frozenset((msg.COPY_IN_RESPONSE, msg.COPY_OUT_RESPONSE,
                             msg.COPY_BOTH_RESPONSE))
_COPY_STREAM = frozenset((msg.COPY_DATA, msg.COPY_DONE))
_DATA_ROW = msg.DATA_ROW
_READY_FOR_QUERY = msg.READY_FOR_QUERY
_COMMAND_COMPLETE = msg.COMMAND_COMPLETE
_BIND_COMPLETE = msg.BIND_COMPLETE
_parse_command_complete = msg.parse_command_complete  # (the compiled twin, when it runs)
_ROW_RUN = ROW_RUN
# What a pinned connection's command tags say about its cached statements (``_watch``):
# after DROP or ALTER they may name what is gone; after a ROLLBACK, only if something but
# these commands ran since the transaction began (a CREATE a statement was parsed against).
_SCHEMA_WORDS = frozenset(("DROP", "ALTER"))
_DATA_WORDS = frozenset((
    "SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "FETCH", "MOVE", "COPY", "BEGIN", "START",
    "SAVEPOINT", "RELEASE", "COMMIT", "SET", "RESET", "SHOW", "DECLARE", "CLOSE", "LISTEN",
    "UNLISTEN", "NOTIFY", "LOCK", "DISCARD", "DEALLOCATE", "PREPARE", "EXPLAIN", "TRUNCATE",
    "ANALYZE", "VACUUM", "CHECKPOINT", "REFRESH", "GRANT", "REVOKE", "COMMENT"))
_DROPS_STATEMENTS = frozenset(("DISCARD ALL", "DEALLOCATE ALL"))

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


class Engine(Requests):
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
        self._schema_moved = False  # a command that may change the schema ran (pinned only)
        self._just_begun = False  # the last command was BEGIN (pinned only)
        self.registry = registry
        self.shapes = ShapeFactory(registry, self.settings)
        self.descriptions = descriptions if descriptions is not None else Descriptions()
        self.schema_seen = self.descriptions.schema_changes  # (pinned) the DDL followed
        self.named = named_statements  # False behind a transaction pooler: unnamed only
        self.statements = StatementCache(statement_cache_size if named_statements else 0)
        self.catalog: dict[str, Statement] = {}  # Client.prepare name -> statement here
        # Unnamed statements described before, with the description they were fitted to:
        # their Parse bytes and result formats are built once, not per execution.
        self._unnamed_known: dict[StatementKey, Statement] = {}
        self._lookups: dict[int, TypeLookupExchange] = {}  # type OID -> its lookup in flight
        self._holding_closes = False
        self.fifo: deque[Exchange] = deque()
        self.status = "I"  # the transaction status of the last ReadyForQuery
        self.outgoing: list[bytes] = []  # to be written next, by the I/O layer
        self.messages = 0  # backend messages received (for stats)
        self._on_done = on_done
        self._on_notice = on_notice
        self._on_notification = on_notification

    @property
    def head(self) -> Exchange | None:
        return self.fifo[0] if self.fifo else None

    # -- the decision after a reply --------------------------------------------------------------
    def outcome(self, exchange: Exchange) -> Outcome:
        """What the caller of the completed (or failed) ``exchange`` does next.

        A statement fault (a cached statement the server no longer has, a plan whose result
        type changed, a cached statement naming a type dropped since, a pooler's server
        connection that already had the statement) means the request is built and sent
        again, but only when that is provably safe: nothing of it was kept (the error came
        before execution, or rolled back the implicit transaction it ran in) and no
        transaction block was open, which the error would have aborted; or the block was
        begun in the same write and this is its first statement (RESTART: a pinned
        connection rolls back and begins again, so transactions keep their cached
        statements safely). A failed description of a named statement is a pooler's other
        server connection (the statement was parsed on this one).
        """
        failure = exchange.failure
        if failure is not None:
            return UNSENT if isinstance(failure, NotDispatchedError) else LOST
        error = exchange.reply.error
        if error is None:
            if exchange.describes:
                return DESCRIBED
            if exchange.undecoded:
                return self._decode_late(exchange)
            return ANSWERED
        if exchange.statement is None:
            return ANSWERED
        cached = not exchange.parses  # (a type gone matters only to a cached statement)
        if self.status != "I":
            if (self.status == "E" and self._just_begun and not exchange.describes
                    and is_stale_statement_error(error, cached)):
                return RESTART  # the first statement after BEGIN: nothing else ran
            return ANSWERED
        if is_duplicate_statement_error(error):
            return CLASH
        if is_stale_statement_error(error, cached):
            return CLASH if exchange.describes else STALE
        return ANSWERED

    def learned(self, exchange: Exchange) -> tuple[StatementKey, Description] | None:
        """What ``exchange`` taught, if it is a description answered: its statement's key
        and description, for its request to keep (``recall``) and to judge by
        (``RetryBudget``)."""
        if type(exchange) is DescribeExchange and exchange.description is not None:
            assert exchange.statement is not None  # a description is always of a statement
            return exchange.statement.key, exchange.description
        return None

    def recall(self, learned: dict[StatementKey, Description]) -> None:
        """(Before a request is built again) what its descriptions said, known again where
        the caches dropped it meanwhile (more distinct statements came than they hold), so
        that it runs rather than being described once more. A description the caches
        hold is left alone (another request's, answered meanwhile). One that turned out
        stale is dropped by the engine and by its request (``STALE``, ``CLASH``), so it is
        never recalled; one that a schema change made stale since the request learned it
        comes back ``STALE``, or is corrected when its Parse is answered, as any cached
        description is."""
        descriptions = self.descriptions
        for key, description in learned.items():
            if descriptions.get(key) is None:
                descriptions.put(key, description)

    def follow_up(self, exchange: Exchange) -> Exchange:
        """(After AWAITS) the request ``exchange``'s answer waits for, to be sent on this
        connection: the lookup of a type it met, or the text of binary values of a type
        read only as text (``pgmux.engine.late``)."""
        reply = next(r for r in exchange.answers() if r.undecoded)
        unknown = late.unknown_columns(reply, self.registry)
        if unknown:
            return self._type_lookup(tuple(unknown))
        index = reply.undecoded[0]
        rows, values = late.raw_values(reply, index)
        oid = reply.shape.columns[index].type_oid  # type: ignore[union-attr]
        return self.text_of(reply, index, rows, values, oid)

    def _decode_late(self, exchange: Exchange) -> Outcome:
        """Decode what waits in ``exchange``'s answers, as far as the types are known
        now; AWAITS while anything is left (``follow_up`` says for what)."""
        registry = self.registry
        left = [r for r in exchange.answers() if r.undecoded and not late.decode_known(r, registry)]
        if left:
            return AWAITS
        exchange.undecoded = False
        return ANSWERED

    # -- replies ---------------------------------------------------------------------------------
    def receive(self, messages: list[tuple[int, bytes]]) -> None:
        """Route one batch of framed backend messages (the reader's hot loop)."""
        self.messages += len(messages)
        fifo = self.fifo
        on_done = self._on_done
        # None when nothing is in flight: a reply then fails with AttributeError, below.
        head: Any = fifo[0] if fifo else None
        try:
            for kind, payload in messages:
                if kind == _DATA_ROW:
                    if head.wanted:  # an abandoned exchange's rows are dropped
                        reply = head.reply
                        try:
                            reply.rows.append(reply.shape.decode(payload))
                        except Exception:
                            reply.add_row(payload)  # the slow path names what went wrong
                elif kind == _READY_FOR_QUERY:
                    if payload == b"I" and head is not None and head.plain:  # (inline _ready)
                        self.status = "I"
                        fifo.popleft()
                        head.state = DONE
                        if on_done is not None:
                            on_done(head)
                        head = fifo[0] if fifo else None
                    else:
                        head = self._ready(head, payload)
                elif kind == _COMMAND_COMPLETE:
                    tag = _parse_command_complete(payload)
                    if head.plain:
                        head.reply.command = tag  # (what the base command_complete does)
                    elif head.command_complete(tag):
                        head = self._finish_open()
                    if self._watch_tags:
                        self._watch(tag)
                elif kind == _ROW_RUN:  # DataRows back to back, undecoded (compiled framing)
                    self.messages += len(payload) - 1  # counted as the messages they are
                    if head.wanted:
                        reply = head.reply
                        decode_rows(payload, reply.shape, reply.rows, reply.add_row)
                elif kind != _BIND_COMPLETE:  # (needs nothing)
                    head = self._other(head, kind, payload)
        except AttributeError:
            if head is None:
                raise ProtocolError("the server sent a reply while nothing was asked") from None
            raise

    def _watch(self, tag: str) -> None:
        """(A pinned connection) follow what a command did to the cached statements: close
        them when what they name may have moved (as psycopg does), forget them when the
        server dropped them (DISCARD ALL: parsed again when next needed). DDL is counted in
        the client's ``Descriptions``: every pinned connection of the client closes its
        cached statements before its next statement (``Requests.follow_schema``), so that
        a transaction does not meet a plan the DDL made stale."""
        word = tag.partition(" ")[0]
        self._just_begun = word == "BEGIN" or word == "START"
        if word == "ROLLBACK" or word == "COMMIT":
            if self._schema_moved and word == "ROLLBACK":
                self.statements.close_all()
            self._schema_moved = False
        elif tag in _DROPS_STATEMENTS:
            self.statements.park()
        elif word not in _DATA_WORDS:  # DDL: the other pinned connections follow it too
            self._schema_moved = True
            self.descriptions.schema_changes += 1
            self.schema_seen = self.descriptions.schema_changes
            if word in _SCHEMA_WORDS:
                self.statements.close_all()

    def _ready(self, head: Exchange | None, payload: bytes) -> Exchange | None:
        if head is None:
            raise ProtocolError("ReadyForQuery without a request")
        if not head.ENDS_AT_READY:
            raise ProtocolError("ReadyForQuery inside an operation of a pipeline")
        self.status = status = _STATUS.get(payload) or msg.parse_ready_for_query(payload)
        fifo = self.fifo
        fifo.popleft()
        if head.describes:
            self._prerequisite_done(head)
        head.state = DONE
        if self._on_done is not None:
            self._on_done(head)
        if status != "I" and self._shared:
            raise PoisonedConnection(
                f"a shared connection was left in transaction status {status!r}; replacing it")
        return fifo[0] if fifo else None

    def _prerequisite_done(self, head: Exchange) -> None:
        """A description, a type lookup or a text conversion was answered: learn what it
        says."""
        if type(head) is TextExchange:
            if head.error is None and head.reply.rows:
                late.take_text(head.target, head.column, head.rows, head.reply.rows[0],
                               self.registry)
            return
        if type(head) is TypeLookupExchange:
            for oid in head.asked:
                if self._lookups.get(oid) is head:
                    del self._lookups[oid]
            if head.error is None:
                # (in a transaction block its snapshot may not see a type made since)
                self.registry.learn(parse_lookup(head.result().rows), head.asked,
                                    self.status != "I")
            return
        assert isinstance(head, DescribeExchange) and head.statement is not None
        head.statement.describing = None
        if head.reply.error is None:
            self._described(head)

    def _described(self, exchange: DescribeExchange) -> None:
        statement = exchange.statement
        assert statement is not None  # a description is always of a statement
        description = Description(exchange.param_types or (), exchange.columns or ())
        exchange.description = description
        self.descriptions.put(statement.key, description)
        self._learn(statement, description)

    def _finish_open(self) -> Exchange | None:
        fifo = self.fifo
        head = fifo.popleft()
        if head.state is not SUSPENDED:
            head.state = DONE
        if self._on_done is not None:
            self._on_done(head)
        return fifo[0] if fifo else None

    def _other(self, head: Exchange | None, kind: int, payload: bytes) -> Exchange | None:
        if kind in _ASYNC:
            self._async(kind, payload, head)
            return head
        if head is None:
            if kind == msg.ERROR_RESPONSE:  # with nothing in flight: the server is ending us
                raise ServerEnded(DatabaseError.from_fields(msg.parse_fields(payload)))
            raise ProtocolError(f"unexpected message {bytes([kind])!r} while nothing was asked")
        if kind == msg.ROW_DESCRIPTION:
            shape = self.shapes.from_payload(payload)
            head.row_description(shape)
            # Only a request that parsed asks to describe its portal: a RowDescription here
            # says what the statement returns now (its ParseComplete came already).
            if not head.describes:
                if head.statement is not None:
                    self._check_columns(head.statement, shape.columns)
                if shape.unknown:
                    head.reply.undecoded = shape.unknown
                    head.undecoded = True
        elif kind == msg.PARSE_COMPLETE:  # the statement exists now, whatever follows
            head.parses = False
            if head.statement is not None:
                head.statement.parsed = True
        elif kind == msg.NO_DATA:
            head.no_data()
        elif kind == msg.PARAMETER_DESCRIPTION:
            head.parameter_description(msg.parse_parameter_description(payload))
        elif kind == msg.ERROR_RESPONSE:
            return self._error(head, msg.parse_fields(payload))
        elif kind == msg.EMPTY_QUERY_RESPONSE:
            head.empty_query()
            if not head.ENDS_AT_READY:
                return self._finish_open()
        elif kind == msg.PORTAL_SUSPENDED:
            head.portal_suspended()
            if not head.ENDS_AT_READY:
                return self._finish_open()
        elif kind in _COPY_RESPONSES:
            if not head.copy_response(kind) and kind != msg.COPY_OUT_RESPONSE:
                self._copy_in_unasked(head)
        elif kind in _COPY_STREAM:
            head.copy_data(payload)
        elif kind != msg.CLOSE_COMPLETE:  # (needs nothing)
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
        for statement in head.skipped():  # (of a unit) their Parse never ran
            self.statements.discard(statement, close=False)
            self._forget_catalog(statement)
        if head.ENDS_AT_READY:
            return head
        # An open operation: the server now skips everything up to the next Sync.
        error = head.reply.error
        assert error is not None
        following = self._finish_open()
        fifo = self.fifo
        while following is not None and not following.ENDS_AT_READY:
            fifo.popleft()
            following.abort(aborted_by(error))
            if following.parses and following.statement is not None:  # its Parse was skipped
                self.statements.discard(following.statement, close=False)
                self._forget_catalog(following.statement)
            if self._on_done is not None:
                self._on_done(following)
            following = fifo[0] if fifo else None
        return following

    def _statement_failed(self, head: Exchange, statement: Statement,
                          fields: dict[str, str]) -> None:
        """Keep the statement cache true after ``head``, which used ``statement``, failed.

        A failed Parse means the statement does not exist on the server, except 42P05:
        behind a pooler the server connection already had this (content-addressed)
        statement. A request that relied on a Parse that failed ahead of it gets that
        Parse's error instead of 26000. A stale statement is forgotten (and closed if it
        still exists), so the retry (or, inside a transaction block, the next execution)
        prepares it again; a type gone under it says so in the error's hint, for when the
        caller gets it.
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
        error = head.reply.error
        if is_stale_statement_error(error):
            if is_stale_type_error(error) and isinstance(error, DatabaseError) and not error.hint:
                head.reply.error = DatabaseError.from_fields({**error.fields, "H": STALE_TYPE_HINT})
            exists = code != "26000"
            cache.discard(statement, close=exists)
            if self._forget_catalog(statement) and exists:
                cache.close_later(statement.name)
            if exists:  # its result or a type changed: what was described no longer holds
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

    def _async(self, kind: int, payload: bytes, head: Exchange | None) -> None:
        if kind == msg.PARAMETER_STATUS:
            name, value = msg.parse_parameter_status(payload)
            self.settings.update(name, value)
        elif kind == msg.NOTICE_RESPONSE:
            if self._on_notice is not None:
                fields = msg.parse_fields(payload)
                if head is None or not head.mutes(fields):
                    self._on_notice(fields)
        elif self._on_notification is not None:
            self._on_notification(msg.parse_notification(payload))
        else:
            log.warning("pgmux: dropped a notification on a connection that does not LISTEN")

adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
