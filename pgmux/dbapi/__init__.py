"""pgmux.dbapi: a PEP 249 (DB-API 2.0) module over pgmux's shared, multiplexing client.

``connect()`` returns a cheap handle on one ``pgmux.Client`` per process and
(dsn, options); see ``pgmux.dbapi.connection`` for how statements are routed.

There is no fan-out call (PEP 249 has none): independent statements from one greenlet
run one after another here. To send them at once, from one greenlet, use the shared
client, ``conn.client``: ``Client.gather`` (or ``Client.batch``).
"""

from __future__ import annotations

from typing import Any

from pgmux.dbapi.connection import Connection, close_shared_clients, shared_client
from pgmux.dbapi.cursor import Column, Cursor
from pgmux.dbapi.twophase import Xid
from pgmux.dbapi.types import (
    BINARY,
    DATETIME,
    NUMBER,
    ROWID,
    STRING,
    Binary,
    Date,
    DateFromTicks,
    Time,
    TimeFromTicks,
    Timestamp,
    TimestampFromTicks,
)
from pgmux.errors import (
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    Warning,
)

apilevel = "2.0"
threadsafety = 1  # threads may share the module, not connections
paramstyle = "pyformat"

__all__ = [
    "BINARY",
    "DATETIME",
    "NUMBER",
    "ROWID",
    "STRING",
    "Binary",
    "Column",
    "Connection",
    "Cursor",
    "DataError",
    "DatabaseError",
    "Date",
    "DateFromTicks",
    "Error",
    "IntegrityError",
    "InterfaceError",
    "InternalError",
    "NotSupportedError",
    "OperationalError",
    "ProgrammingError",
    "Time",
    "TimeFromTicks",
    "Timestamp",
    "TimestampFromTicks",
    "Warning",
    "Xid",
    "apilevel",
    "close_shared_clients",
    "connect",
    "paramstyle",
    "shared_client",
    "threadsafety",
]


def connect(dsn: str | None = None, *, autocommit: bool = False,
            deferred_pinning: bool | str = True, **options: Any) -> Connection:
    """A DB-API connection: a handle on the process's shared ``Client`` for (dsn, options).

    ``options`` are ``pgmux.Client``'s (``pipeline_size``, ``pinned_size``, ...) and
    connection keywords (``host``, ``user``, ``password``, ...). Nothing is opened here:
    the client connects on first use. ``deferred_pinning=False`` (or "false", as a URL's
    query argument gives it): a transaction pins a server connection at its first
    statement, not at the first that needs the transaction.
    """
    return Connection(shared_client(dsn, options), autocommit=autocommit,
                      deferred_pinning=flag("deferred_pinning", deferred_pinning))


_FLAGS = {"true": True, "on": True, "yes": True, "1": True,
          "false": False, "off": False, "no": False, "0": False}


def flag(name: str, value: bool | str) -> bool:
    """A boolean option given as a bool or as text (a URL's query argument)."""
    if isinstance(value, bool):
        return value
    found = _FLAGS.get(str(value).strip().lower())
    if found is None:
        raise ProgrammingError(f"{name} must be true or false, not {value!r}")
    return found
