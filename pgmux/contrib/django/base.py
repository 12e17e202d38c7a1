"""The Django backend's DatabaseWrapper: Django's PostgreSQL backend over ``pgmux.dbapi``.

Settings::

    DATABASES = {"default": {
        "ENGINE": "pgmux.contrib.django", "NAME": "app", "USER": "app", "HOST": "db",
        "OPTIONS": {"pipeline_size": 4, "pinned_size": 8},
    }}

``OPTIONS`` takes ``pgmux.Client``'s options and libpq's connection keywords (``sslmode``,
``options``, ``application_name``, ``server_settings`` ...), plus Django's
``isolation_level`` and ``assume_role``, and ``deferred_pinning`` (``pgmux.dbapi.connect``'s). Every Django connection with the same settings is
a handle on one ``Client`` per process.

Connection set-up never pins a server connection: the session's TimeZone (and
``assume_role``'s role) are startup parameters of the client's connections, not SET
statements, so a client serves one time zone; a new TIME_ZONE or USE_TZ gives new handles
a client of their own. The isolation level goes with each BEGIN. Session-scoped SQL that
a ``connection_created`` receiver runs (SET, temporary tables ...) is refused with
``NotSupportedError`` saying where such settings belong; later in a request, the same SQL
pins that Django connection to one server connection until it closes, as in
``pgmux.dbapi``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError
from django.db.backends.postgresql import base as postgresql
from django.db.backends.postgresql.psycopg_any import IsolationLevel
from django.utils.asyncio import async_unsafe

import pgmux.dbapi
from pgmux.contrib.django.creation import DatabaseCreation
from pgmux.contrib.django.cursor import CursorDebugWrapper
from pgmux.contrib.django.features import DatabaseFeatures
from pgmux.contrib.django.operations import DatabaseOperations
from pgmux.contrib.django.psycopg_compat import BackendConnection
from pgmux.contrib.django.schema import DatabaseSchemaEditor
from pgmux.contrib.django.types import registry_for
from pgmux.dbapi import close_shared_clients, flag, shared_client
from pgmux.errors import NotSupportedError, class_for_sqlstate

IN_FAILED_TRANSACTION = class_for_sqlstate("25P02")  # what COMMIT of a failed one raises
# OPTIONS meant for Django's psycopg backend that have no meaning here, and why.
REFUSED_OPTIONS = {
    "pool": "pgmux pools the server connections itself: drop OPTIONS['pool'] and size "
            "pgmux with 'pipeline_size' and 'pinned_size'",
    "prepare_threshold": "pgmux prepares repeated statements itself (OPTIONS "
                         "'statement_cache_size': 0 turns that off)",
}
# Read by the wrapper, not the client. server_side_binding: pgmux always binds parameters
# server-side, except in a named cursor's DECLARE (as psycopg); client_encoding: UTF-8.
WRAPPER_OPTIONS = ("isolation_level", "assume_role", "server_side_binding",
                   "client_encoding", "cursor_factory", "deferred_pinning")
PIN_IN_SETUP = (
    "pgmux: {reason} (run while Django opened a connection, in a connection_created "
    "receiver) would pin a server connection for every Django connection, so for every "
    "request. Put session settings in the database's OPTIONS instead, as startup "
    "parameters that cost nothing per request: 'options': '-c search_path=app', or "
    "'server_settings': {{'search_path': 'app'}}.")


def _refuse_pin_in_setup(reason: str) -> None:
    raise NotSupportedError(PIN_IN_SETUP.format(reason=reason))


class DatabaseWrapper(postgresql.DatabaseWrapper):
    """Django's PostgreSQL backend on ``pgmux.dbapi``: each Django connection is a cheap
    handle on the process's shared client, which pins a server connection only for a
    transaction or session state."""

    connection: Any  # the pgmux.dbapi handle, or None (BaseDatabaseWrapper sets it)
    Database = pgmux.dbapi
    SchemaEditorClass = DatabaseSchemaEditor
    creation_class = DatabaseCreation
    features_class = DatabaseFeatures
    ops_class = DatabaseOperations

    @property
    def pool(self) -> None:
        """pgmux's shared client is the pool; Django's psycopg pool is never used."""
        return None

    def close_pool(self) -> None:
        """Close the shared clients of this database (Django's creation does this before
        cloning or dropping a test database, which must have no connections)."""
        close_shared_clients(dbname=self.settings_dict["NAME"] or "postgres")

    # -- connecting ------------------------------------------------------------------------
    def get_connection_params(self) -> dict[str, Any]:
        """``pgmux.dbapi.connect()``'s keywords: the shared client's options."""
        settings_dict = self.settings_dict
        options = dict(settings_dict["OPTIONS"])
        for name, why in REFUSED_OPTIONS.items():
            if options.get(name):
                raise ImproperlyConfigured(f"OPTIONS[{name!r}] is not for pgmux: {why}")
        factory = options.get("cursor_factory")
        if factory is not None and not (isinstance(factory, type)
                                        and issubclass(factory, pgmux.dbapi.Cursor)):
            raise ImproperlyConfigured("OPTIONS['cursor_factory'] must be a subclass of "
                                       "pgmux.dbapi.Cursor (pgmux makes the cursors)")
        name = settings_dict["NAME"]
        if name == "" and not options.get("service"):
            raise ImproperlyConfigured(
                "settings.DATABASES is improperly configured. Please supply the NAME or "
                "OPTIONS['service'] value.")
        limit = self.ops.max_name_length()
        if len(name or "") > limit:
            raise ImproperlyConfigured(
                f"The database name '{name}' ({len(name)} characters) is longer than "
                f"PostgreSQL's limit of {limit} characters. Supply a shorter NAME in "
                "settings.DATABASES.")
        params = {key: value for key, value in options.items()
                  if key not in WRAPPER_OPTIONS and key not in REFUSED_OPTIONS}
        if name is not None or not options.get("service"):
            params["dbname"] = name or "postgres"
        for key, setting in (("user", "USER"), ("password", "PASSWORD"), ("host", "HOST"),
                             ("port", "PORT")):
            if settings_dict[setting]:
                params[key] = settings_dict[setting]
        params["server_settings"] = self._startup_settings(params.get("server_settings"))
        params.setdefault("types", registry_for((params.get("host"), params.get("port"),
                                                 params.get("dbname"))))
        return params

    def _startup_settings(self, given: Any) -> tuple[tuple[str, str], ...]:
        """The session's settings, sent at startup (hashable: part of the client's key)."""
        found = dict(given or {})
        if self.timezone_name:
            found["TimeZone"] = self.timezone_name
        role = self.settings_dict["OPTIONS"].get("assume_role")
        if role:
            found["role"] = role
        return tuple(sorted(found.items()))

    @async_unsafe
    def get_new_connection(self, conn_params: dict[str, Any]) -> pgmux.dbapi.Connection:
        """A handle on the shared client for these settings (nothing is opened here)."""
        self.isolation_level = self._isolation_level_option()
        client = shared_client(None, conn_params)
        if client.pipeline_size:
            client.start()  # a first handle opens the pipeline: connect errors surface here
        handle = BackendConnection(client)
        options = self.settings_dict["OPTIONS"]
        if "isolation_level" in options:
            handle.isolation_level = self.isolation_level
        if options.get("cursor_factory") is not None:
            handle.cursor_factory = options["cursor_factory"]
        handle.deferred_pinning = flag("deferred_pinning", options.get("deferred_pinning", True))
        handle.on_pin = _refuse_pin_in_setup  # until connect() has run its receivers
        return handle

    def _isolation_level_option(self) -> IsolationLevel:
        value = self.settings_dict["OPTIONS"].get("isolation_level")
        if value is None:
            return IsolationLevel.READ_COMMITTED
        try:
            return IsolationLevel(value)
        except ValueError:
            raise ImproperlyConfigured(
                f"Invalid transaction isolation level {value} specified. Use one of the "
                "psycopg.IsolationLevel values.") from None

    def connect(self) -> None:
        """Open the handle as Django does (its ``connection_created`` receivers run, and
        may not pin a server connection); then let it pin as its statements need."""
        super().connect()  # connection_created's receivers have run
        self.connection.on_pin = None

    def _configure_timezone(self, connection: Any) -> bool:
        return False  # a startup parameter of the client (see _startup_settings)

    def _configure_role(self, connection: Any) -> bool:
        return False  # likewise

    def ensure_timezone(self) -> bool:
        """TIME_ZONE or USE_TZ changed: an idle handle moves to the client for the new
        zone; one holding a server connection (a transaction, session state) sets it there,
        and keeps that server connection until it closes, as a psycopg connection would."""
        handle = self.connection
        if handle is None:
            return False
        if handle.info.backend_pid is None and not handle.closed:
            fresh = self.get_new_connection(self.get_connection_params())
            fresh.on_pin = None
            fresh.autocommit = handle.autocommit
            handle.close()
            self.connection = fresh
            return False
        with handle.cursor() as cursor:
            cursor.execute(self.ops.compose_sql("SET TIME ZONE %s", [self.timezone_name]))
        return True

    # -- cursors ---------------------------------------------------------------------------
    @async_unsafe
    def create_cursor(self, name: str | None = None) -> Any:
        """A cursor of the handle (``name``: a server-side cursor, WITH HOLD outside a
        transaction), reading times in the zone Django's settings say."""
        if name:
            # Outside a transaction a cursor must outlive it: WITH HOLD.
            cursor = self.connection.cursor(name, withhold=self.connection.autocommit)
        else:
            cursor = self.connection.cursor()
        if not settings.USE_TZ:  # naive local times of the session's zone
            cursor.timezone, cursor.naive = self._zone(), True
        elif self.settings_dict["TIME_ZONE"] is not None:
            cursor.timezone = self.timezone
        return cursor

    def _zone(self) -> Any:
        from zoneinfo import ZoneInfo

        return ZoneInfo(self.timezone_name)

    def make_debug_cursor(self, cursor: Any) -> CursorDebugWrapper:
        """``cursor`` wrapped to log its queries (DEBUG), as Django's psycopg backend does."""
        return CursorDebugWrapper(cursor, self)

    def _commit(self) -> None:
        """COMMIT; of a transaction that had failed, a ROLLBACK without an error, as psycopg
        does it (Django's code catches an error inside atomic() and still commits)."""
        try:
            super()._commit()
        except DatabaseError as exc:
            if not isinstance(exc.__cause__, IN_FAILED_TRANSACTION):
                raise

    def is_usable(self) -> bool:
        """Whether the handle still answers a ``SELECT 1`` (False with no handle)."""
        if self.connection is None:
            return False
        try:
            with self.connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        except pgmux.dbapi.Error:
            return False
        return True
