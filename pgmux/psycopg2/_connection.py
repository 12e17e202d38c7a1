"""psycopg2's ``connection`` over a ``pgmux.dbapi`` handle on the process's shared client.

A ``connection`` owns no server connection: statements go where ``pgmux.dbapi`` sends
them (multiplexed in autocommit mode and for a READ COMMITTED transaction's plain reads,
on a pinned connection from the first statement that needs the transaction, and for
good once session state is set). What psycopg2 shows of libpq's connection is answered
from there; where a handle must differ (``get_backend_pid()`` before anything pinned it,
``cancel()`` of a multiplexed statement, ``fileno()``) the method's docstring says what
it does.
"""

from __future__ import annotations

import contextvars
import datetime as dt
from collections.abc import Callable
from typing import Any, TypeVar

import gevent
from gevent.hub import getcurrent

from pgmux import errors as pgmux_errors
from pgmux.dbapi import connect as dbapi_connect
from pgmux.dbapi.twophase import Xid
from pgmux.psycopg2 import _exceptions as exc
from pgmux.psycopg2 import errors as _errors  # noqa: F401  (installs the class lookup)
from pgmux.psycopg2._defaults import DEFAULT_CURSOR
from pgmux.psycopg2._dsn import hidden, parse_dsn
from pgmux.psycopg2._exceptions import (
    InterfaceError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    connect_error,
    translate,
)
from pgmux.psycopg2._handle import lease_of, pin, standard_strings
from pgmux.psycopg2._info import ConnectionInfo, Notify, encodings
from pgmux.psycopg2._notices import NOTICES_TO, notice_handler
from pgmux.psycopg2._types import registry

T = TypeVar("T")

ISOLATION_LEVEL_AUTOCOMMIT = 0
ISOLATION_LEVEL_READ_UNCOMMITTED = 4
ISOLATION_LEVEL_READ_COMMITTED = 1
ISOLATION_LEVEL_REPEATABLE_READ = 2
ISOLATION_LEVEL_SERIALIZABLE = 3
ISOLATION_LEVEL_DEFAULT = None
STATUS_SETUP, STATUS_READY, STATUS_BEGIN, STATUS_PREPARED = 0, 1, 2, 5
STATUS_IN_TRANSACTION = STATUS_BEGIN

_LEVEL_NAMES = {1: "read committed", 2: "repeatable read", 3: "serializable",
                4: "read uncommitted"}
_LEVEL_BY_NAME = {name: level for level, name in _LEVEL_NAMES.items()}

# pgmux.Client options a connect() call (or register()) may give; the rest is libpq's.
CLIENT_OPTIONS = frozenset({
    "pipeline_size", "pinned_size", "max_in_flight", "guard", "acquire_timeout",
    "statement_cache_size", "probe_interval", "probe_timeout", "cancel_grace",
    "reset_timeout", "idle_in_transaction_timeout", "max_lifetime", "pooler",
    "host_backoff", "rebalance_interval", "slow_query_threshold", "telemetry",
    "trace_parameters", "log_slow_queries", "pool_name", "deferred_pinning"})
defaults: dict[str, Any] = {}  # register(**options): for every connection
pending_options: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "pgmux_psycopg2_options", default=None)


def _level(value: Any) -> int | None:
    """psycopg2's isolation level from an int constant, a name or None/"default"."""
    if value is None:
        return None
    if isinstance(value, str):
        name = value.strip().lower()
        if name == "default":
            return None
        if name in _LEVEL_BY_NAME:
            return _LEVEL_BY_NAME[name]
        raise ValueError(f"bad value for isolation_level: '{value}'")
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"bad isolation level type: {type(value).__name__}")
    if value in _LEVEL_NAMES:
        return value
    raise ValueError(f"isolation_level must be between 1 and 4, got {value}")


def _tristate(value: Any, what: str) -> bool | None:
    if value is None or value == "default" or value == "DEFAULT":
        return None
    if isinstance(value, str):
        raise ValueError(f"the value for {what} must be a bool, None or 'default'")
    return bool(value)


class connection:  # noqa: N801  (psycopg2's name)
    """A psycopg2 connection: a cheap handle on pgmux's shared client."""

    # What a connection whose __init__ never ran (or failed) shows.
    pgmux_handle: Any = None
    _closed = 1
    last_error: str | None = None  # the message of the last error (info.error_message)
    dsn: str | None = None
    _autocommit = False
    _isolation: int | None = None
    _readonly: bool | None = None
    _deferrable: bool | None = None
    _session_set = False  # SET default_transaction_* ran (autocommit characteristics)
    _with_depth = 0
    _with_autocommit = False
    pgmux_running: Any = None  # the greenlet running a statement on this handle
    pgmux_encoding = "utf_8"
    encoding = "UTF8"
    async_ = 0
    cursor_factory: Any = None
    server_version = 0
    protocol_version = 0

    Warning = exc.Warning
    Error = exc.Error
    InterfaceError = exc.InterfaceError
    DatabaseError = exc.DatabaseError
    DataError = exc.DataError
    OperationalError = exc.OperationalError
    IntegrityError = exc.IntegrityError
    InternalError = exc.InternalError
    ProgrammingError = exc.ProgrammingError
    NotSupportedError = exc.NotSupportedError

    def __init__(self, dsn: str, async_: Any = 0, **kwargs: Any) -> None:
        if kwargs.pop("async", 0) or async_:
            raise NotSupportedError(
                "asynchronous connections are not supported by pgmux.psycopg2: every "
                "connection is cooperative under gevent already; use a plain connection")
        if kwargs:
            raise TypeError(f"'{next(iter(kwargs))}' is an invalid keyword argument")
        self.dsn = hidden(dsn)
        self.pgmux_running = None
        self.notices: Any = []
        self.notifies: Any = []
        self.string_types: dict[int, Any] = {}
        self.binary_types: dict[int, Any] = {}
        self.tpc_xid_current: Any = None
        params = parse_dsn(dsn)
        options = {**defaults, **(pending_options.get() or {})}
        deferred = options.pop("deferred_pinning", True)
        options.setdefault("notice_handler", notice_handler)
        options["types"] = registry
        if "client_encoding" in params:
            self._set_encoding_name(params["client_encoding"])
        try:
            self.pgmux_handle = dbapi_connect(dsn, deferred_pinning=deferred, **options)
            client = self.pgmux_handle.client
            client.start()  # psycopg2 connects here: a bad DSN fails at connect()
            self.server_version = self.pgmux_handle.info.server_version
        except Exception as error:
            if self.pgmux_handle is not None:
                self.pgmux_handle.client.close()
            self.pgmux_handle = None
            try:
                params = parse_dsn(dsn)
            except exc.Error:
                params = {}
            raise connect_error(error, params.get("host", "localhost"),
                                params.get("port", "5432")) from None
        self._closed = 0
        self.protocol_version = 3

    # -- transactions ------------------------------------------------------------------
    def commit(self) -> None:
        self.pgmux_call(self.pgmux_handle.commit)

    def rollback(self) -> None:
        handle = self.pgmux_handle
        if self._closed or handle is None or handle.lease is not None:
            self.pgmux_call(self.pgmux_handle.rollback)
            return
        try:  # nothing pinned: no statement runs, no notice or notification comes
            handle.rollback()
        except pgmux_errors.Error as error:
            raise self.pgmux_failed(error, None, None) from None

    def close(self) -> None:
        """Close the handle (a second close does nothing): roll back what is open and give
        any pinned connection back."""
        if self._closed == 1:
            return
        self._closed = 1
        dbconn = self.pgmux_handle
        if dbconn is not None and not dbconn.closed:
            try:
                dbconn.close()
            except pgmux_errors.Error:
                pass

    def __enter__(self) -> connection:
        self._check()
        if self._with_depth:
            raise ProgrammingError("the connection cannot be re-entered recursively")
        self._with_depth = 1
        if self.autocommit:  # psycopg2 2.9: the block is a transaction all the same
            self._with_autocommit = True
            self.pgmux_handle.autocommit = False
        return self

    def __exit__(self, exc_type: Any, exc_value: Any, tb: Any) -> None:
        try:
            if exc_type is None:
                self.commit()
            else:
                self.rollback()
        finally:
            self._with_depth = 0
            if self._with_autocommit:
                self._with_autocommit = False
                if not self.closed:
                    self.pgmux_handle.autocommit = True

    # -- cursors -----------------------------------------------------------------------
    def cursor(self, name: str | None = None, cursor_factory: Any = None,
               withhold: bool = False, scrollable: bool | None = None) -> Any:
        """A cursor; with ``name``, a server-side (DECLARE) one."""
        self._check()
        factory = cursor_factory or self.cursor_factory or DEFAULT_CURSOR[0]
        if name is not None and not isinstance(name, str):
            raise TypeError("the cursor name must be a string")
        if name is None and (withhold or scrollable is not None):
            raise ProgrammingError("'withhold' and 'scrollable' can be used only with "
                                   "named cursors")
        if self.pgmux_handle.tpc_prepared:  # (status is STATUS_PREPARED: _check passed)
            raise ProgrammingError("can't create a cursor in a prepared transaction")
        cur = factory(self, name, withhold=withhold, scrollable=scrollable) \
            if name is not None else factory(self)
        if name is not None:
            cur.withhold = withhold
            cur.scrollable = scrollable
        return cur

    # -- settings ----------------------------------------------------------------------
    @property
    def closed(self) -> int:
        """0 open, 1 closed, 2 its server connection was lost (as psycopg2 reports)."""
        dbconn = self.pgmux_handle
        if self._closed == 0 and dbconn is not None and dbconn.broken:
            return 2
        return self._closed

    @property
    def status(self) -> int:
        dbconn = self.pgmux_handle
        if dbconn is None or self._closed:
            return STATUS_READY
        if dbconn.tpc_prepared:
            return STATUS_PREPARED
        if dbconn.in_transaction or dbconn.tpc_xid is not None:
            return STATUS_BEGIN
        return STATUS_READY

    @property
    def autocommit(self) -> bool:
        if self._with_autocommit:
            return True
        return bool(self.pgmux_handle.autocommit) if self.pgmux_handle is not None else False

    @autocommit.setter
    def autocommit(self, value: Any) -> None:
        self.set_session(autocommit=bool(value))

    @property
    def isolation_level(self) -> int | None:
        return self._isolation

    @isolation_level.setter
    def isolation_level(self, value: Any) -> None:
        level = _level(value)
        if value == ISOLATION_LEVEL_AUTOCOMMIT and not isinstance(value, str):
            raise ValueError("isolation_level must be between 1 and 4")
        self.set_session(isolation_level=level if level is not None else "default")

    @property
    def readonly(self) -> bool | None:
        return self._readonly

    @readonly.setter
    def readonly(self, value: Any) -> None:
        self.set_session(readonly=value if value is not None else "default")

    @property
    def deferrable(self) -> bool | None:
        return self._deferrable

    @deferrable.setter
    def deferrable(self, value: Any) -> None:
        self.set_session(deferrable=value if value is not None else "default")

    _UNSET = object()

    def set_session(self, isolation_level: Any = _UNSET, readonly: Any = _UNSET,
                    deferrable: Any = _UNSET, autocommit: Any = _UNSET) -> None:
        """The characteristics of the transactions opened from now on (``"default"`` or
        None: the server's)."""
        self._check()
        if self.pgmux_handle.in_transaction:
            raise ProgrammingError("set_session cannot be used inside a transaction")
        unset = connection._UNSET
        if isolation_level is not unset:
            self._isolation = _level(isolation_level) if isolation_level != "default" \
                else None
            self.pgmux_handle.isolation_level = _LEVEL_NAMES.get(self._isolation)  # type: ignore
        if readonly is not unset:
            self._readonly = _tristate(readonly, "readonly")
            self.pgmux_handle.read_only = bool(self._readonly)
        if deferrable is not unset:
            self._deferrable = _tristate(deferrable, "deferrable")
            self.pgmux_handle.deferrable = bool(self._deferrable)
        if autocommit is not unset:
            if not autocommit and self._session_set:
                self._reset_session_defaults()
            self.pgmux_handle.autocommit = bool(autocommit)
        self._apply_session_defaults()

    def _reset_session_defaults(self) -> None:
        """Leaving autocommit mode: the session's defaults go back to the server's (the
        characteristics go with BEGIN from now on)."""
        for name in ("isolation", "read_only", "deferrable"):
            statement = f"SET default_transaction_{name} TO DEFAULT"
            self.pgmux_call(self.pgmux_handle.run_statement, statement, None)
        self._session_set = False

    def _apply_session_defaults(self) -> None:
        """In autocommit mode, psycopg2 makes the characteristics the session's defaults
        (SET default_transaction_*); that session state pins the handle."""
        wanted = (self._isolation, self._readonly, self._deferrable)
        if not self.pgmux_handle.autocommit or (wanted == (None, None, None)
                                           and not self._session_set):
            return
        level = _LEVEL_NAMES.get(self._isolation) if self._isolation else None
        sets = [
            f"SET default_transaction_isolation TO {repr(level) if level else 'DEFAULT'}",
            "SET default_transaction_read_only TO "
            + ({True: "on", False: "off", None: "DEFAULT"}[self._readonly]),
            "SET default_transaction_deferrable TO "
            + ({True: "on", False: "off", None: "DEFAULT"}[self._deferrable])]
        for statement in sets:
            self.pgmux_call(lambda statement=statement: self.pgmux_handle.run_statement(statement, None))
        self._session_set = True

    def set_isolation_level(self, level: Any) -> None:
        """psycopg2's legacy setter: 0 is autocommit; ends the current transaction (rolled
        back) before it changes anything."""
        self._check()
        if level is not None and (isinstance(level, bool) or not isinstance(level, int)):
            raise TypeError("isolation level must be an int")
        if level is not None and not 0 <= level <= 4:
            raise ValueError("isolation level must be between 0 and 4")
        if self.pgmux_handle.in_transaction:
            self.rollback()
        if level == ISOLATION_LEVEL_AUTOCOMMIT:
            self.set_session(autocommit=True)
        else:
            self.set_session(isolation_level=level if level is not None else "default",
                             autocommit=False)

    def set_client_encoding(self, encoding: str) -> None:
        """Record the encoding psycopg2 would set: values reach the application as
        Python text either way (pgmux speaks UTF-8 with the server)."""
        self._check()
        if self.pgmux_handle.in_transaction:
            self.rollback()
        self._set_encoding_name(encoding)
        self.pgmux_drain_notifies(read=True)

    def _set_encoding_name(self, encoding: str) -> None:
        key = "".join(ch for ch in str(encoding).upper() if ch.isalnum())
        if key not in encodings:
            raise OperationalError(f'invalid value for parameter "client_encoding": '
                                   f'"{encoding}"')
        self.encoding = key
        self.pgmux_encoding = encodings[key]

    def get_transaction_status(self) -> int:
        return self.info.transaction_status

    def get_parameter_status(self, parameter: str) -> str | None:
        return self.info.parameter_status(parameter)

    def get_dsn_parameters(self) -> dict[str, str]:
        return self.info.dsn_parameters

    def get_backend_pid(self) -> int:
        """The server process of this handle. A handle that holds no pinned connection
        takes one now and keeps it until close() (its statements then all run on that
        process, as a libpq connection's do)."""
        return self.info.backend_pid

    @property
    def pgmux_standard_strings(self) -> bool:
        """Whether the server reads a backslash in a '' literal as a plain character
        (``standard_conforming_strings``) where this handle's statements run: literals
        follow the server's current setting, as psycopg2's follow libpq's connection."""
        return standard_strings(self.pgmux_handle)

    @property
    def info(self) -> ConnectionInfo:
        return ConnectionInfo(self)

    # -- psycopg2's extras ---------------------------------------------------------------
    def reset(self) -> None:
        """Roll back (a two-phase transaction not prepared too), forget the session
        characteristics and any session state: the handle starts again on the shared
        client (its pinned connection, if any, goes back to the pool, reset)."""
        self._check()
        old = self.pgmux_handle
        self.pgmux_drain_notifies(read=True)
        try:
            old.close()
        except pgmux_errors.Error:
            pass
        self.pgmux_handle = dbapi_connect_like(old)
        self._isolation = self._readonly = self._deferrable = None
        self._session_set = False

    def cancel(self) -> None:
        """Cancel the statement this handle runs. On a pinned connection the server is
        asked to cancel it (it fails with QueryCanceledError); a statement running
        multiplexed cannot be singled out on the server: its caller stops waiting at once
        with QueryCanceledError, and the server finishes it, unread."""
        if self._closed:
            raise InterfaceError("connection already closed")
        if self.status == STATUS_PREPARED:
            raise ProgrammingError("cancel cannot be used with a prepared two-phase transaction")
        lease = lease_of(self.pgmux_handle)
        running = self.pgmux_running
        if lease is not None and running is not None:
            lease.cancel()
            return
        if running is not None and running is not getcurrent():
            gevent.kill(running, pgmux_errors.QueryTimeout(
                "canceling statement due to user request"))

    def fileno(self) -> int:
        """The socket of this handle's pinned connection, for ``select()`` (LISTEN). A
        handle that holds none takes one now and keeps it until close()."""
        self._check()
        lease = self.pgmux_call(lambda: pin(self.pgmux_handle, "fileno() was called"))
        return int(lease.fileno())

    def poll(self) -> int:
        """Read what the server sent without waiting (notifications); POLL_OK."""
        self._check()
        self.pgmux_drain_notifies(read=True)
        return 0

    def isexecuting(self) -> bool:
        return self.pgmux_running is not None

    def lobject(self, *args: Any, **kwargs: Any) -> Any:
        raise NotSupportedError("large objects are not supported by pgmux.psycopg2 (their "
                                "descriptors live in one server session); store the data "
                                "in a bytea column")

    def get_native_connection(self) -> Any:
        raise NotSupportedError("pgmux.psycopg2 has no libpq connection to hand out")

    @property
    def pgconn_ptr(self) -> None:
        """None: there is no libpq connection (pgmux speaks the protocol itself)."""
        return None

    # -- two-phase commit ------------------------------------------------------------------
    def xid(self, format_id: int, gtrid: str, bqual: str) -> Xid:
        return self.pgmux_call(lambda: self.pgmux_handle.xid(format_id, gtrid, bqual))

    def tpc_begin(self, xid: Any) -> None:
        self.pgmux_call(lambda: self.pgmux_handle.tpc_begin(xid))

    def tpc_prepare(self) -> None:
        self.pgmux_call(self.pgmux_handle.tpc_prepare)

    def tpc_commit(self, xid: Any = None) -> None:
        self.pgmux_call(lambda: self.pgmux_handle.tpc_commit(xid))

    def tpc_rollback(self, xid: Any = None) -> None:
        self.pgmux_call(lambda: self.pgmux_handle.tpc_rollback(xid))

    def tpc_recover(self) -> list[Xid]:
        return self.pgmux_call(self.pgmux_handle.tpc_recover)

    # -- internals ------------------------------------------------------------------------
    def _check(self) -> None:
        if self._closed:
            raise InterfaceError("connection already closed")
        if self.pgmux_handle is None:
            raise InterfaceError("connection already closed")

    def pgmux_call(self, work: Callable[..., T], *args: Any, query: str | None = None,
              cursor: Any = None) -> T:
        """Run ``work(*args)`` for this handle: notices and notifications reach it,
        pgmux's errors become psycopg2's."""
        if self._closed or self.pgmux_handle is None:
            raise InterfaceError("connection already closed")
        current = getcurrent()
        previous = self.pgmux_running
        self.pgmux_running = current
        prior = getattr(current, NOTICES_TO, None)  # (_notices.attach, inline)
        setattr(current, NOTICES_TO, self)
        try:
            return work(*args)
        except pgmux_errors.Error as error:
            raise self.pgmux_failed(error, query, cursor) from None
        finally:
            self.pgmux_running = previous
            setattr(current, NOTICES_TO, prior)
            if self.notifies is not None and self.pgmux_handle.lease is not None:
                self.pgmux_drain_notifies()

    def pgmux_failed(self, error: pgmux_errors.Error, query: str | None,
                     cursor: Any) -> BaseException:
        """psycopg2's exception for pgmux's ``error`` (the handle's bookkeeping done)."""
        translated = translate(error, query, cursor)
        self.last_error = str(getattr(translated, "pgerror", None) or translated)
        if _lost(error):
            self._closed = 2
        # the handle may keep pgmux's error (why its transaction failed): without its
        # traceback, it keeps no frame (and no cursor) alive, as psycopg2's does not
        error.__traceback__ = None
        return translated

    def pgmux_drain_notifies(self, read: bool = False) -> None:
        """Move the notifications the pinned connection received to ``notifies`` (with
        ``read``: after reading what the server sent, without waiting)."""
        dbconn = self.pgmux_handle
        lease = lease_of(dbconn)
        if lease is None:
            return
        if read:  # what the socket holds already (a wait of a millisecond at most)
            while True:
                note = self._call_raw(
                    lambda: dbconn.on_lease(lambda held: held.wait_notify(0.001)))
                if note is None:
                    break
                self._add_notify(note)
        for note in lease.take_notifications():
            self._add_notify(note)

    def _add_notify(self, note: Any) -> None:
        target = self.notifies
        if target is not None:
            pid, channel, payload = note
            target.append(Notify(pid, channel, payload))

    def _call_raw(self, work: Callable[[], T]) -> T:
        try:
            return work()
        except pgmux_errors.Error as error:
            raise translate(error) from None

    def __repr__(self) -> str:
        return (f"<connection object at 0x{id(self):x}; dsn: '{self.dsn}', "
                f"closed: {self.closed}>")

    def __del__(self) -> None:
        dbconn = self.__dict__.get("_dbconn")
        if dbconn is not None and not dbconn.closed and self.__dict__.get("_closed") == 0:
            try:
                dbconn.close()
            except Exception:
                pass


_LOST_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})


def _lost(error: BaseException) -> bool:
    """Whether ``error`` means the server connection under the handle is gone (psycopg2
    then reports the connection closed: ``closed == 2``)."""
    if isinstance(error, (pgmux_errors.IndeterminateResultError, pgmux_errors.ProtocolError)):
        return True
    code = getattr(error, "sqlstate", None) or ""
    return code in _LOST_SQLSTATES or code.startswith("08")


def dbapi_connect_like(old: Any) -> Any:
    """A fresh pgmux.dbapi handle on the same shared client as ``old``."""
    from pgmux.dbapi.connection import Connection

    return Connection(old.client, autocommit=False, deferred_pinning=old.deferred_pinning)


__all__ = ["connection", "dt"]
