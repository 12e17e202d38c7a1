"""The ``postgresql+pgmux`` SQLAlchemy dialect: pgmux.dbapi under SQLAlchemy's PGDialect.

``create_engine("postgresql+pgmux://user:pw@host/db")``. Work under the ``AUTOCOMMIT``
isolation level is multiplexed; transactions run on pinned connections that go back to
pgmux's pool at commit/rollback. URL query arguments are ``pgmux.Client`` options
(``?pipeline_size=4&pinned_size=8``) or connection keywords.

The pool: a DB-API connection of pgmux is a cheap handle on the process's shared client,
which pools the server connections itself. ``HandlePool`` keeps idle handles (so session
state a handle holds, e.g. after SET, survives checkouts as with any pool) and never makes
a checkout wait: the waiting, if any, happens in pgmux's pinned pool. A handle holding
session state keeps its own pinned connection while it sits in the pool: ``pinned_size``
must cover those (settings for every connection belong in the DSN's ``options``).
"""

from __future__ import annotations

import contextlib
import decimal
import logging
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import exc as sa_exc
from sqlalchemy import pool as sa_pool
from sqlalchemy import types as sqltypes
from sqlalchemy import util
from sqlalchemy.dialects.postgresql import ranges as sa_ranges
from sqlalchemy.dialects.postgresql.array import ARRAY as PGARRAY
from sqlalchemy.dialects.postgresql.base import (
    _DECIMAL_TYPES,
    _FLOAT_TYPES,
    _INT_TYPES,
    PGDialect,
    PGExecutionContext,
)
from sqlalchemy.dialects.postgresql.hstore import HSTORE
from sqlalchemy.dialects.postgresql.json import JSON, JSONB, JSONPathType
from sqlalchemy.dialects.postgresql.pg_catalog import INT2VECTOR, OIDVECTOR, _SpaceVector
from sqlalchemy.dialects.postgresql.types import CITEXT, INTERVAL, REGCONFIG
from sqlalchemy.engine import processors

import pgmux.dbapi
from pgmux import errors
from pgmux.types import Hstore, Multirange, Range, TypeRegistry, default_registry, oids
from pgmux.types.introspect import lookup_sql, parse_lookup
from pgmux.types.text import decode_str

if TYPE_CHECKING:
    from sqlalchemy.engine.interfaces import IsolationLevel

__all__ = ["HandlePool", "PGDialect_pgmux", "dialect"]

_server_side_id = util.counter()
_log = logging.getLogger("sqlalchemy.dialects.postgresql")

# Errors after which the DB-API connection (a handle) is discarded and a new one made.
_DISCONNECT_ERRORS = (errors.ProtocolError, errors.IndeterminateResultError,
                      errors.NotDispatchedError)
_DISCONNECT_SQLSTATES = ("57P01", "57P02", "57P03")
_DISCONNECT_MESSAGES = ("the connection is unusable", "the server closed the connection",
                        "the server ended the connection", "the connection is closed")


class HandlePool(sa_pool.QueuePool):
    """A QueuePool that never makes a checkout wait (``max_overflow=-1``) and keeps up to
    ``pool_size`` idle handles: handles are cheap, pgmux's own pools bound the server
    connections."""

    def __init__(self, creator: Any, pool_size: int = 64, max_overflow: int = -1,
                 **kw: Any):
        super().__init__(creator, pool_size=pool_size, max_overflow=max_overflow, **kw)


class _PGNumericCommon(sqltypes.NumericCommon):
    """pgmux returns Decimal for numeric and float for float4/float8, as psycopg does."""

    def bind_processor(self, dialect: Any) -> None:
        return None

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        if self.asdecimal:
            if coltype in _FLOAT_TYPES:
                return processors.to_decimal_processor_factory(
                    decimal.Decimal, self._effective_decimal_return_scale)
            if coltype in _DECIMAL_TYPES or coltype in _INT_TYPES:
                return None
        else:
            if coltype in _FLOAT_TYPES:
                return None
            if coltype in _DECIMAL_TYPES or coltype in _INT_TYPES:
                return processors.to_float
        raise sa_exc.InvalidRequestError(f"Unknown PG numeric type: {coltype}")


class _PGNumeric(_PGNumericCommon, sqltypes.Numeric):
    pass


class _PGFloat(_PGNumericCommon, sqltypes.Float):
    pass


class _PGJSON(JSON):
    render_bind_cast = True

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        if dialect._json_deserializer is not None:  # pgmux then hands over the text
            return super().result_processor(dialect, coltype)
        return None  # pgmux decodes json itself


class _PGJSONB(JSONB):
    render_bind_cast = True

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        if dialect._json_deserializer is not None:
            return super().result_processor(dialect, coltype)
        return None


class _PGJSONIntIndexType(sqltypes.JSON.JSONIntIndexType):
    __visit_name__ = "json_int_index"
    render_bind_cast = True


class _PGJSONStrIndexType(sqltypes.JSON.JSONStrIndexType):
    __visit_name__ = "json_str_index"
    render_bind_cast = True


class _PGJSONPathType(JSONPathType):
    pass


class _PGInterval(INTERVAL):
    render_bind_cast = True


class _PGARRAY(PGARRAY):
    render_bind_cast = True


class _PGRange(sa_ranges.AbstractSingleRangeImpl):
    """Ranges: SQLAlchemy's Range <-> pgmux.types.Range; text passes through."""

    render_bind_cast = True

    def bind_processor(self, dialect: Any) -> Any:
        return _to_pgmux_range

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        return _to_sa_range


class _PGMultiRange(sa_ranges.AbstractMultiRangeImpl):
    render_bind_cast = True

    def bind_processor(self, dialect: Any) -> Any:
        def to_multirange(value: Any) -> Any:
            if value is None or isinstance(value, (str, Multirange)):
                return value
            return Multirange(_to_pgmux_range(item) for item in value)

        return to_multirange

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        def to_multirange(value: Any) -> Any:
            if isinstance(value, Multirange):
                return sa_ranges.MultiRange(_to_sa_range(item) for item in value)
            return value

        return to_multirange


def _to_pgmux_range(value: Any) -> Any:
    if isinstance(value, sa_ranges.Range):
        return Range(value.lower, value.upper, value.bounds, value.empty)
    return value


def _to_sa_range(value: Any) -> Any:
    if isinstance(value, Range):
        bounds = cast("Any", value.bounds or "[)")  # (one of "()", "[)", "(]", "[]")
        return sa_ranges.Range(value.lower, value.upper, bounds=bounds, empty=value.isempty)
    return value


class _PGHStore(HSTORE):
    """hstore: dicts both ways (pgmux decodes hstore itself; with use_native_hstore=False
    SQLAlchemy's own text serialisation is sent). Text still arrives for an hstore pgmux
    has not met yet: SQLAlchemy's parser reads it."""

    render_bind_cast = True

    def bind_processor(self, dialect: Any) -> Any:
        if not dialect._has_native_hstore:
            return super().bind_processor(dialect)

        def to_hstore(value: Any) -> Any:
            return Hstore(value) if isinstance(value, dict) else value

        return to_hstore

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        parse = super().result_processor(dialect, coltype)

        def from_hstore(value: Any) -> Any:
            return parse(value) if isinstance(value, str) else value

        return from_hstore


def _cast(base: type) -> type:
    """``base`` with its bind parameters cast in the SQL (``%(x)s::VARCHAR``): parameters
    carry types (str as "unknown"), so the server may not infer one, as for psycopg."""
    cls = type(f"_PG{base.__name__}", (base,), {"render_bind_cast": True})
    globals()[cls.__name__] = cls  # a module attribute, so that it pickles
    return cls


class _PGINT2VECTOR(_SpaceVector, INT2VECTOR):
    pass


class _PGOIDVECTOR(_SpaceVector, OIDVECTOR):
    pass


class PGExecutionContext_pgmux(PGExecutionContext):
    def create_server_side_cursor(self) -> Any:
        ident = f"c_{id(self):x}_{_server_side_id():x}"
        return self._dbapi_connection.cursor(ident)


def _instrumentation_span(context: Any) -> Any:
    """The span opentelemetry-instrumentation-sqlalchemy keeps on the execution context for
    this statement, made current; nothing otherwise."""
    span = getattr(context, "_otel_span", None)
    if span is None:
        return contextlib.nullcontext()
    from opentelemetry import trace  # (the instrumentation is on: the API is there)

    return trace.use_span(span, end_on_exit=False)


class PGDialect_pgmux(PGDialect):
    """SQLAlchemy's PostgreSQL dialect on ``pgmux.dbapi``: ``postgresql+pgmux://`` URLs.

    Its pool hands out cheap handles on one shared client (``HandlePool``); statements at
    AUTOCOMMIT are multiplexed, a transaction pins a server connection as it needs one.
    """

    driver = "pgmux"
    supports_statement_cache = True
    supports_server_side_cursors = True
    supports_sane_multi_rowcount = True
    default_paramstyle = "pyformat"
    supports_native_json_serialization = False
    supports_native_json_deserialization = True
    execution_ctx_cls = PGExecutionContext_pgmux

    colspecs = util.update_copy(
        PGDialect.colspecs,
        {
            sqltypes.Numeric: _PGNumeric,
            sqltypes.Float: _PGFloat,
            JSON: _PGJSON,
            sqltypes.JSON: _PGJSON,
            JSONB: _PGJSONB,
            sqltypes.JSON.JSONPathType: _PGJSONPathType,
            sqltypes.JSON.JSONIntIndexType: _PGJSONIntIndexType,
            sqltypes.JSON.JSONStrIndexType: _PGJSONStrIndexType,
            sqltypes.Interval: _PGInterval,
            INTERVAL: _PGInterval,
            sqltypes.ARRAY: _PGARRAY,
            sqltypes.String: _cast(sqltypes.String),
            REGCONFIG: _cast(REGCONFIG),
            CITEXT: CITEXT,
            sqltypes.Date: _cast(sqltypes.Date),
            sqltypes.DateTime: _cast(sqltypes.DateTime),
            sqltypes.Time: _cast(sqltypes.Time),
            sqltypes.Integer: _cast(sqltypes.Integer),
            sqltypes.SmallInteger: _cast(sqltypes.SmallInteger),
            sqltypes.BigInteger: _cast(sqltypes.BigInteger),
            INT2VECTOR: _PGINT2VECTOR,
            OIDVECTOR: _PGOIDVECTOR,
            sa_ranges.AbstractSingleRange: _PGRange,
            sa_ranges.AbstractMultiRange: _PGMultiRange,
            HSTORE: _PGHStore,
        },
    )

    _has_native_hstore = True

    def __init__(self, use_native_hstore: bool = True, **kwargs: Any):
        super().__init__(**kwargs)
        self.use_native_hstore = self._has_native_hstore = bool(use_native_hstore)
        self._types: TypeRegistry | None = None
        as_text = []  # types this engine's client reads as str (its own registry)
        if self._json_deserializer is not None:  # json and jsonb arrive as text for it
            as_text += [oids.JSON, oids.JSONB]
        if self._native_inet_types is False:  # create_engine(..., native_inet_types=False)
            as_text += [oids.INET, oids.CIDR]
        if as_text or not self.use_native_hstore:
            self._types = default_registry.copy()
            for oid in as_text:
                self._types.register(oid, text_decoder=decode_str)

    @classmethod
    def import_dbapi(cls) -> Any:
        """The DB-API module SQLAlchemy connects with: ``pgmux.dbapi``."""
        return pgmux.dbapi

    @classmethod
    def get_pool_class(cls, url: Any) -> type[sa_pool.Pool]:
        """``HandlePool``, whatever the URL: the shared client is the pool."""
        return HandlePool

    @classmethod
    def load_provisioning(cls) -> None:
        """SQLAlchemy's test suite: load the PostgreSQL provisioning (create/drop
        database, temp-table options ...), which it loads only for its own drivers."""
        import sqlalchemy.dialects.postgresql.provision  # noqa: F401

    # SQLAlchemy's own OpenTelemetry instrumentation, when on, opens a span per statement but
    # does not make it current while the DB-API call runs: make it current, so that pgmux
    # adds its attributes to that span rather than opening a second one for the statement.
    def do_execute(self, cursor: Any, statement: str, parameters: Any,
                   context: Any = None) -> None:
        with _instrumentation_span(context):
            cursor.execute(statement, parameters)

    def do_execute_no_params(self, cursor: Any, statement: str, context: Any = None) -> None:
        with _instrumentation_span(context):
            cursor.execute(statement)

    def do_executemany(self, cursor: Any, statement: str, parameters: Any,
                       context: Any = None) -> None:
        with _instrumentation_span(context):
            cursor.executemany(statement, parameters)

    def create_connect_args(self, url: Any) -> tuple[list[Any], dict[str, Any]]:
        """``pgmux.dbapi.connect()``'s keywords from the URL: user, password, hosts and
        ports (several for a multi-host URL), database, and each query parameter as a
        connection or client option."""
        options: dict[str, Any] = url.translate_connect_args(username="user",
                                                             database="dbname")
        options.update({key: _option(key, value) for key, value in url.query.items()})
        hosts, ports = self._split_multihost_from_url(url)  # ?host=a:1&host=b, ?host=a,b
        if hosts:
            options["host"] = ",".join(host or "" for host in hosts)
            if ports and any(ports):
                options["port"] = ",".join(str(p) if p else "" for p in ports)
        if self._types is not None:
            options["types"] = self._types
        options.setdefault("notice_handler", log_notice)
        return [], options

    def initialize(self, connection: Any) -> None:
        """Its queries are read-only: run them multiplexed, not on a pinned connection."""
        dbapi_connection = connection.connection.dbapi_connection
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True
        try:
            super().initialize(connection)
            client = dbapi_connection.client
            if self.use_native_hstore:  # an extension type: looked up now, as psycopg's
                learn_types(client, ["hstore"])  # register_hstore does
            else:  # hstore as its text (this engine's own registry), for SQLAlchemy to parse
                read_as_text(client, "hstore")
        finally:
            dbapi_connection.autocommit = autocommit

    def _set_backslash_escapes(self, connection: Any) -> None:
        setting = connection.exec_driver_sql(  # SHOW would need a pinned connection
            "SELECT current_setting('standard_conforming_strings')").scalar()
        self._backslash_escapes = setting == "off"

    def get_default_isolation_level(self, dbapi_connection: Any) -> IsolationLevel:
        """The connection's level (create_engine(isolation_level=...) is set by now), else
        the server's; never AUTOCOMMIT."""
        level = dbapi_connection.isolation_level or dbapi_connection.server_isolation_level()
        return cast("IsolationLevel", level.upper())  # (one of the server's levels)

    # -- isolation, read only, deferrable -----------------------------------------------
    def get_isolation_level_values(self, dbapi_connection: Any) -> tuple[IsolationLevel, ...]:
        return ("AUTOCOMMIT", "READ COMMITTED", "READ UNCOMMITTED", "REPEATABLE READ",
                "SERIALIZABLE")

    def set_isolation_level(self, dbapi_connection: Any, level: str) -> None:
        if level == "AUTOCOMMIT":
            dbapi_connection.autocommit = True
            dbapi_connection.isolation_level = None
        else:
            dbapi_connection.autocommit = False
            dbapi_connection.isolation_level = level

    def get_isolation_level(self, dbapi_connection: Any) -> IsolationLevel:
        if dbapi_connection.autocommit:
            return "AUTOCOMMIT"
        if dbapi_connection.isolation_level is not None:
            return dbapi_connection.isolation_level.upper()
        return dbapi_connection.server_isolation_level().upper()

    def detect_autocommit_setting(self, dbapi_connection: Any) -> bool:
        return bool(dbapi_connection.autocommit)

    def _do_autocommit(self, dbapi_connection: Any, value: bool) -> None:
        dbapi_connection.autocommit = value

    def set_readonly(self, dbapi_connection: Any, value: bool) -> None:
        dbapi_connection.read_only = value

    def get_readonly(self, dbapi_connection: Any) -> bool:
        return dbapi_connection.read_only

    def set_deferrable(self, dbapi_connection: Any, value: bool) -> None:
        dbapi_connection.deferrable = value

    def get_deferrable(self, dbapi_connection: Any) -> bool:
        return dbapi_connection.deferrable

    # -- two-phase commit (pgmux.dbapi's tpc_* methods) ----------------------------------
    def do_begin_twophase(self, connection: Any, xid: Any) -> None:
        connection.connection.tpc_begin(xid)

    def do_prepare_twophase(self, connection: Any, xid: Any) -> None:
        connection.connection.tpc_prepare()

    def do_commit_twophase(self, connection: Any, xid: Any, is_prepared: bool = True,
                           recover: bool = False) -> None:
        self._finish_twophase(connection, xid, recover, commit=True)

    def do_rollback_twophase(self, connection: Any, xid: Any, is_prepared: bool = True,
                             recover: bool = False) -> None:
        self._finish_twophase(connection, xid, recover, commit=False)

    def do_recover_twophase(self, connection: Any) -> list[str]:
        return [str(xid) for xid in connection.connection.tpc_recover()]

    def _finish_twophase(self, connection: Any, xid: Any, recover: bool, commit: bool) -> None:
        """COMMIT/ROLLBACK PREPARED run outside any transaction block: a recovering
        connection's open transaction (SQLAlchemy began one) is rolled back first."""
        dbapi_connection = connection.connection.dbapi_connection
        if recover:
            if dbapi_connection.in_transaction:
                dbapi_connection.rollback()
            finish = dbapi_connection.tpc_commit if commit else dbapi_connection.tpc_rollback
            finish(xid)
        else:
            (dbapi_connection.tpc_commit if commit else dbapi_connection.tpc_rollback)()

    # -- liveness --------------------------------------------------------------------------
    def do_ping(self, dbapi_connection: Any) -> bool:
        dbapi_connection.ping()
        return True

    def is_disconnect(self, e: Exception, connection: Any, cursor: Any) -> bool:
        if not isinstance(e, errors.Error):
            return False
        if connection is not None and (connection.closed or connection.broken):
            return True
        if isinstance(e, _DISCONNECT_ERRORS):
            return True
        sqlstate = getattr(e, "sqlstate", None) or ""
        if sqlstate.startswith("08") or sqlstate in _DISCONNECT_SQLSTATES:
            return True
        text = str(e)
        return any(message in text for message in _DISCONNECT_MESSAGES)



def learn_types(client: Any, names: list[str]) -> None:
    """Teach ``client``'s registry the types of these names (those the server has), with
    the pg_type lookup pgmux makes for a type it meets in a result."""
    types = client.types
    listed = ", ".join(f"pg_catalog.to_regtype('{name}')::pg_catalog.oid" for name in names)
    found = [oid for oid in _read(client, f"SELECT {listed}").rows[0] if oid]
    if found and not all(types.knows(oid) for oid in found):
        version = _read(client, "SELECT current_setting('server_version_num')::int").rows[0][0]
        rows = _read(client, lookup_sql(found, multiranges=version >= 140000)).rows
        types.learn(parse_lookup(rows), found)


def read_as_text(client: Any, name: str) -> None:
    """Make ``client``'s registry read the type ``name`` (if the server has it) as ``str``,
    and its arrays as lists of ``str``, whatever it would learn of it."""
    row = _read(client, "SELECT t.oid, t.typarray FROM pg_catalog.pg_type t "
                        f"WHERE t.oid = pg_catalog.to_regtype('{name}')").rows
    if row:
        oid, array_oid = row[0]
        client.types.register(oid, text_decoder=decode_str)
        if array_oid:
            client.types.register_array(array_oid, oid)


def log_notice(fields: dict[str, str]) -> None:
    """The server's notices on SQLAlchemy's PostgreSQL logger, as its psycopg dialects
    log them (``logging.getLogger("sqlalchemy.dialects.postgresql")`` at INFO)."""
    _log.info("%s: %s", fields.get("S", "NOTICE"), fields.get("M", ""))


def _read(client: Any, sql: str) -> Any:
    """A read-only query's result: multiplexed, or on a pinned connection without them."""
    if client.pipeline_size:
        return client.query(sql)
    with client.session() as session:
        return session.query(sql)


_INT_OPTIONS = frozenset({"pipeline_size", "pinned_size", "max_in_flight",
                          "statement_cache_size"})
_FLOAT_OPTIONS = frozenset({"connect_timeout", "acquire_timeout", "probe_interval",
                            "probe_timeout", "cancel_grace", "reset_timeout",
                            "idle_in_transaction_timeout", "max_lifetime"})


def _option(key: str, value: Any) -> Any:
    """A URL query value as ``pgmux.Client`` takes it (numbers for sizes and timeouts)."""
    if isinstance(value, tuple):
        value = value[-1]
    if key in _INT_OPTIONS:
        return int(value)
    if key in _FLOAT_OPTIONS:
        return float(value)
    return value


dialect = PGDialect_pgmux
