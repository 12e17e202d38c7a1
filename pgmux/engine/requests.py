"""Request building: every byte a connection sends once it is set up, and the statement
lifecycle behind it.

Statements are cached per connection under content-addressed names, and a statement is
described before its first execution unless the client-wide ``Descriptions`` already know
what it returns, so every execution asks for the same result formats (binary where a
binary decoder exists) and decodes to the same values. ``Requests`` is the half of the
``Engine`` (``pgmux.engine.core``) that builds; the other half reads the replies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pgmux._native import adopt
from pgmux.cache import put_bounded
from pgmux.engine.exchanges import (
    CopyExchange,
    DescribeExchange,
    Exchange,
    PortalExchange,
    QueryExchange,
    Reply,
    ScriptExchange,
    SyncExchange,
    TextExchange,
    TypeLookupExchange,
)
from pgmux.engine.params import adapt_params
from pgmux.engine.settings import ServerSettings
from pgmux.engine.shapes import ShapeFactory
from pgmux.engine.statements import (
    CATALOG_PREFIX,
    Description,
    Descriptions,
    Statement,
    StatementCache,
    StatementKey,
    statement_name,
)
from pgmux.engine.units import UnitExchange, UnitItem, UnitPiece
from pgmux.errors import InterfaceError
from pgmux.protocol import backend as msg
from pgmux.protocol import frontend
from pgmux.protocol.backend import Column
from pgmux.sql.facts import is_script
from pgmux.types.introspect import lookup_sql
from pgmux.types.registry import TypeRegistry

EXECUTE_SYNC = frontend.EXECUTE_SYNC
EXECUTE_UNNAMED = frontend.EXECUTE_UNNAMED
DESCRIBE_PORTAL = frontend.DESCRIBE_UNNAMED_PORTAL
SYNC = frontend.SYNC
_bind_statement = frontend.bind_statement  # (the compiled twin, when it runs)
# A Bind sent with its statement's Parse gets what the server parses now, which may not be
# what was learned (a column added, a type changed): it asks for one format for every
# column (``Statement.parse_codes``), so no format list can fail to fit the columns, and
# values of a type not known yet are kept and decoded once it is looked up. Later
# executions (Bind only) use the learned formats, which the server checks against its plan
# (0A000 when the result changed: the statement is prepared again).
UNNAMED_KNOWN_LIMIT = 512  # unnamed statements whose Parse bytes are kept
# The simple queries every transaction sends, built once.
_TRANSACTION_SCRIPTS = {sql: frontend.query(sql) for sql in ("BEGIN", "COMMIT", "ROLLBACK")}


class Requests:
    """The request-building half of an ``Engine`` (its state is set up there)."""

    registry: TypeRegistry
    settings: ServerSettings
    shapes: ShapeFactory
    descriptions: Descriptions
    schema_seen: int  # (pinned) the client's DDL count this connection followed
    named: bool
    statements: StatementCache
    catalog: dict[str, Statement]
    _unnamed_known: dict[StatementKey, Statement]
    _lookups: dict[int, TypeLookupExchange]  # type OID -> its lookup in flight here
    _holding_closes: bool  # building a unit: Close messages wait for its front
    outgoing: list[bytes]

    # -- requests: statements ------------------------------------------------------------------
    def query(self, sql: str, oids: tuple[int, ...], formats: tuple[int, ...],
              values: list[bytes | None], tail: bytes = EXECUTE_SYNC,
              kind: type[Exchange] = QueryExchange, cached: bool = True) -> Exchange:
        """The request for one execution of ``sql`` with encoded parameters.

        A prerequisite when what it returns is not known yet (a ``DescribeExchange``) or
        returns types not known yet (a ``TypeLookupExchange``): send it, wait for it, then
        ask again. ``tail`` follows Bind (Execute and Sync by default); ``kind`` is built
        by ``Exchange.__init__`` (``Exchange.new``).
        ``cached=False``: through the unnamed statement, not the statement cache.
        """
        cache = self.statements
        if cached and cache.capacity > 0:
            key = (sql, oids)
            entries = cache.entries
            statement = entries.get(key)  # (cache.get, inline)
            if statement is not None and statement is not cache.newest:
                entries.move_to_end(key)
                cache.newest = statement
            if statement is not None and statement.columns is not None:
                stamp = statement.stamp  # built for this registry and these settings?
                if (stamp is None or stamp[0] != self.registry.version
                        or stamp[1] != self.settings.epoch):
                    self.shapes.fit(statement)
                    if statement.shape.unknown:  # type: ignore[union-attr]
                        return self._type_lookup(statement.columns)
                data = _bind_statement(statement.bind_prefix, formats, values,
                                       statement.result_codes, tail)
                if cache.to_close and not self._holding_closes:
                    data = cache.take_closes() + data
                return Exchange.new(kind, data, Reply.new(statement.shape), statement, False)
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
        if description is not None:
            lookup = self._types_for(description.columns)
            if lookup is not None:
                return lookup
        statement = cache.add(sql, oids)
        try:
            exchange = self._parse_and_run(statement, description, formats, values, tail, kind)
        except BaseException:  # refused by the encoder: never sent, so never prepared
            cache.discard(statement, close=False)
            raise
        if cache.to_close and not self._holding_closes:
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
        if description is not None:
            lookup = self._types_for(description.columns)
            if lookup is not None:
                return lookup
        statement = self._unnamed_known.get(key)
        if statement is None:
            statement = Statement(b"", sql, oids)
            if description is not None:
                self._learn(statement, description)
            put_bounded(self._unnamed_known, key, statement, UNNAMED_KNOWN_LIMIT)
        return self._parse_and_run(statement, None, formats, values, tail, kind)

    def _parse_and_run(self, statement: Statement, description: Description | None,
                       formats: tuple[int, ...], values: list[bytes | None], tail: bytes,
                       kind: type[Exchange]) -> Exchange:
        """Parse ``statement`` and run it (one result format: see ``parse_codes``), or
        describe it first when what it returns is not known: its types are then known (or
        looked up) before it runs, so a type dropped meanwhile cannot leave values
        pgmux has no way to read."""
        parse = statement.parse_message()
        if description is not None:
            self._learn(statement, description)
        elif statement.columns is None:
            frontend.check_bind(values)  # refused now, not after a round trip
            data = parse + frontend.describe_statement(statement.name) + SYNC
            return self._describing(data, statement, True)
        elif statement.columns is not None and statement.stamp is not self.shapes.current():
            self.shapes.fit(statement)
        data = (parse + frontend.bind_statement(statement.bind_prefix, formats, values,
                                                statement.parse_codes)
                + DESCRIBE_PORTAL + tail)
        return kind(data, Reply(), statement, True)

    def _types_for(self, columns: tuple[Column, ...]) -> TypeLookupExchange | None:
        """The lookup of the types of ``columns`` the registry does not know, if any."""
        knows = self.registry.knows
        if all(knows(column.type_oid) for column in columns):
            return None
        return self._type_lookup(columns)

    def _type_lookup(self, columns: tuple[Column, ...] | None) -> TypeLookupExchange:
        """A lookup of the unknown types among ``columns`` (the one in flight here, if it
        covers one of them: the rest are asked for once it is answered)."""
        knows = self.registry.knows
        missing = tuple(sorted({c.type_oid for c in columns or () if not knows(c.type_oid)}))
        for oid in missing:
            pending = self._lookups.get(oid)
            if pending is not None and not pending.done:
                return pending
        sql = lookup_sql(missing, multiranges=self.settings.server_major >= 14)
        exchange = TypeLookupExchange(frontend.query(sql), missing)
        for oid in missing:
            self._lookups[oid] = exchange
        return exchange

    def is_described(self, sql: str, oids: tuple[int, ...]) -> bool:
        """Whether the result types of (sql, oids) are known, here or client-wide."""
        statement = self.statements.get((sql, oids)) if self.statements.capacity > 0 else None
        if statement is not None and statement.columns is not None:
            return True
        return self.descriptions.get((sql, oids)) is not None

    def types_of(self, sql: str, oids: tuple[int, ...]) -> TypeLookupExchange | None:
        """The lookup of the types a described (sql, oids) returns that are not known yet."""
        description = self.descriptions.get((sql, oids))
        return None if description is None else self._types_for(description.columns)

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
                         params: Sequence[Any], tail: bytes = EXECUTE_SYNC,
                         kind: type[Exchange] = QueryExchange) -> Exchange:
        statement = self.catalog.get(name)
        if statement is not None and statement.columns is not None:
            shapes = self.shapes
            if statement.stamp is not shapes.current():
                shapes.fit(statement)
                if statement.shape.unknown:  # type: ignore[union-attr]
                    return self._type_lookup(statement.columns)
            formats, values = self._adapt(statement, params)
            data = frontend.bind_statement(statement.bind_prefix, formats, values,
                                           statement.result_codes, tail)
            return Exchange.new(kind, data, Reply.new(statement.shape), statement, False)
        if statement is not None:  # its description is on its way
            return self._follow_description(statement)
        description = self.descriptions.get((sql, oids))
        if description is None:
            describing = self.catalog_describe(name, sql, oids)
            if describing is not None:
                return describing
            return self._catalog_request(name, sql, oids, params, tail, kind)
        lookup = self._types_for(description.columns)
        if lookup is not None:
            return lookup
        server_name = statement_name(CATALOG_PREFIX, sql, oids) if self.named else b""
        statement = Statement(server_name, sql, oids)
        self._learn(statement, description)
        formats, values = self._adapt(statement, params)
        exchange = self._parse_and_run(statement, description, formats, values, tail, kind)
        if self.named:
            self.catalog[name] = statement
        return exchange

    # -- requests: atomic units ------------------------------------------------------------------
    def unit(self, items: Sequence[UnitItem], leading: Sequence[str] = ()) -> Exchange:
        """One atomic unit (``pgmux.engine.units``): ``leading`` statements of pgmux's own
        (no parameters), then ``items``, one Sync. A prerequisite instead when a statement
        needs one first (its description, or a type lookup): send it, then ask again."""
        for item in items:
            first = self._prerequisite(item)
            if first is not None:
                return first
        self._holding_closes = True  # Closes go first: none may be skipped after an error
        try:
            pieces = [self.query(sql, (), (), [], EXECUTE_UNNAMED, UnitPiece, cached=False)
                      for sql in leading]
            pieces += [self._piece(item) for item in items]
        finally:
            self._holding_closes = False
        for piece in pieces:
            if piece.describes:  # (the check above saw no need for it)
                return piece
        data = b"".join([piece.data for piece in pieces])
        return UnitExchange(self.statements.take_closes() + data + SYNC, pieces, len(leading))

    def _piece(self, item: UnitItem) -> Exchange:
        if item.prepared is not None:
            return self._catalog_request(item.prepared, item.sql, item.oids, item.params,
                                         EXECUTE_UNNAMED, UnitPiece)
        return self.query(item.sql, item.oids, item.formats, item.values, EXECUTE_UNNAMED,
                          UnitPiece)

    def _prerequisite(self, item: UnitItem) -> Exchange | None:
        """What must run before ``item`` can be a piece of a unit, if anything: the
        decision ``query`` (or ``catalog_query``) makes, without building the piece."""
        key = (item.sql, item.oids)
        if item.prepared is not None:
            statement = self.catalog.get(item.prepared)
            if statement is None and self.descriptions.get(key) is None:
                return self.catalog_describe(item.prepared, item.sql, item.oids)
        elif self.statements.capacity > 0:
            statement = self.statements.entries.get(key)  # (the piece built next moves it)
            if statement is None and not self.statements.is_parked(key) and (
                    self.descriptions.get(key) is None):
                return self._first_execution(item.sql, item.oids, item.formats, item.values,
                                             EXECUTE_SYNC, QueryExchange, None)
        else:
            statement = None
            if self.descriptions.get(key) is None:  # described through the unnamed one
                return self.describe(item.sql, item.oids)
        if statement is not None:
            if statement.columns is None:
                return self._follow_description(statement)
            if statement.stamp is not self.shapes.current():
                self.shapes.fit(statement)
            return self._types_for(statement.columns)
        description = self.descriptions.get(key)
        return None if description is None else self._types_for(description.columns)

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

    def text_of(self, target: Reply, column: int, rows: list[int], values: list[Any],
                type_oid: int) -> TextExchange:
        """A request giving the server's text of binary ``values`` of type ``type_oid``
        (column ``column`` of the ``target`` reply, at its ``rows``): one statement that
        casts each, sent as a parameter of that type, to text."""
        count = max(len(values), 1)
        sql = "SELECT " + ", ".join(f"${n}::pg_catalog.text" for n in range(1, count + 1))
        params: list[bytes | None] = list(values) if values else [None]
        data = (frontend.parse(b"", sql, (type_oid,) * count)
                + frontend.bind(b"", b"", (1,), params) + DESCRIBE_PORTAL + EXECUTE_SYNC)
        return TextExchange(data, target, column, rows)

    # -- requests of a session (pinned connection) ----------------------------------------------
    def statement(self, sql: str, params: Sequence[Any] = ()) -> Exchange:
        """One statement of a session: a script without parameters (several statements
        allowed) as a simple Query, anything else through the extended protocol, with the
        same formats and values as on the multiplexed path (statements without parameters
        through the unnamed statement)."""
        if not params and is_script(sql, self.settings.standard_conforming_strings):
            return self.script(sql)
        if self.schema_seen != self.descriptions.schema_changes:
            self.follow_schema()
        oids, formats, values = self.registry.encode_params(params)
        return self.query(sql, oids, formats, values, cached=bool(params))

    def follow_schema(self) -> None:
        """(A pinned connection) DDL ran on another connection of the client since this one
        last looked: close the cached statements, whose plans it may have made stale."""
        self.schema_seen = self.descriptions.schema_changes
        self.statements.close_all()

    def stream(self, sql: str, oids: tuple[int, ...], formats: tuple[int, ...],
               values: list[bytes | None], batch: int) -> Exchange:
        """The first batch of a stream: a portal over ``sql`` run for ``batch`` rows, then
        Flush (no Sync: the portal stays open); ``more(batch)`` asks for the next batch."""
        if self.schema_seen != self.descriptions.schema_changes:
            self.follow_schema()
        return self.query(sql, oids, formats, values, self._portal_rows(batch),
                          PortalExchange, cached=bool(values))

    def more(self, batch: int, reply: Reply) -> PortalExchange:
        """The next batch of an open stream, into a fresh ``Reply`` of the same shape."""
        return PortalExchange(self._portal_rows(batch), Reply(reply.shape))

    @staticmethod
    def _portal_rows(batch: int) -> bytes:
        return frontend.execute(b"", batch) + frontend.FLUSH

    def close_portal(self) -> SyncExchange:
        """Close the unnamed portal (a stream left early), then Sync."""
        return SyncExchange(frontend.close_portal(b"") + SYNC)

    def script(self, sql: str) -> ScriptExchange:
        """A simple Query: one statement or several, text results."""
        data = _TRANSACTION_SCRIPTS.get(sql)
        return ScriptExchange(data if data is not None else frontend.query(sql))

    def copy_in(self, sql: str) -> CopyExchange:
        """``COPY ... FROM STDIN`` by simple Query."""
        return CopyExchange(frontend.query(sql), msg.COPY_IN_RESPONSE)

    def copy_out(self, sql: str) -> CopyExchange:
        """``COPY ... TO STDOUT`` by simple Query."""
        return CopyExchange(frontend.query(sql), msg.COPY_OUT_RESPONSE)

    @staticmethod
    def copy_data(data: bytes) -> bytes:
        """One CopyData message of a COPY FROM STDIN."""
        return frontend.copy_data(data)

    @staticmethod
    def copy_done() -> bytes:
        return frontend.COPY_DONE

    @staticmethod
    def copy_fail(reason: str) -> bytes:
        """End a COPY FROM STDIN with an error: the server rolls it back."""
        return frontend.copy_fail(reason)

    def sync(self) -> SyncExchange:
        return SyncExchange(SYNC)

    @staticmethod
    def flush() -> bytes:
        """Flush: have the server send what it has for a group not yet synced."""
        return frontend.FLUSH

    def take_outgoing(self) -> bytes:
        """What the engine itself must send next (a CopyFail), for the I/O layer to write."""
        data = b"".join(self.outgoing)
        self.outgoing = []
        return data

adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
