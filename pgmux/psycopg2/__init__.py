"""pgmux.psycopg2: psycopg2 2.9's API over pgmux's shared, multiplexing client.

``from pgmux import psycopg2`` is the one change an application makes; ``register()``
makes ``import psycopg2`` (and its submodules) resolve here for code the application does
not own. Each ``connect()`` returns a cheap handle on the process's shared client for its
connection string and options (see ``pgmux.psycopg2._connection``).
"""

from __future__ import annotations

from typing import Any

import pgmux.psycopg2._json  # noqa: F401  (psycopg2._json, as psycopg2 has it)
from pgmux.psycopg2 import (
    _range,  # noqa: F401  (the range casters, registered at import)
    extensions,
)
from pgmux.psycopg2._connection import CLIENT_OPTIONS, pending_options
from pgmux.psycopg2._dsn import make_dsn
from pgmux.psycopg2._exceptions import (
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
from pgmux.psycopg2._psycopg import (
    BINARY,
    DATETIME,
    LIBPQ_VERSION,
    NUMBER,
    ROWID,
    STRING,
    Date,
    DateFromTicks,
    Time,
    TimeFromTicks,
    Timestamp,
    TimestampFromTicks,
    apilevel,
    make_connection,
    paramstyle,
    threadsafety,
)
from pgmux.psycopg2._psycopg import Binary as Binary
from pgmux.psycopg2._register import register
from pgmux.psycopg2.extensions import register_adapter  # noqa: F401  (loads extensions)

__version__ = "2.9.10 (dt dec pq3 ext lo64 pgmux)"
__libpq_version__ = LIBPQ_VERSION
_connect = make_connection  # psycopg2._connect: what connect() calls (tests replace it)
_ext = extensions

__all__ = ["BINARY", "DATETIME", "NUMBER", "ROWID", "STRING", "Binary", "DataError",
           "DatabaseError", "Date", "DateFromTicks", "Error", "IntegrityError",
           "InterfaceError", "InternalError", "NotSupportedError", "OperationalError",
           "ProgrammingError", "Time", "TimeFromTicks", "Timestamp", "TimestampFromTicks",
           "Warning", "__libpq_version__", "apilevel", "connect", "paramstyle", "register",
           "threadsafety"]


def connect(dsn: str | None = None, connection_factory: Any = None,
            cursor_factory: Any = None, **kwargs: Any) -> Any:
    """A connection: a handle on the process's shared pgmux client for this connection
    string (``dsn``, a URL, keywords, or both: keywords win) and pgmux options.

    ``connection_factory`` makes it (a ``connection`` subclass), ``cursor_factory`` is its
    default cursor class. pgmux.Client's options (``pipeline_size``, ``pinned_size``,
    ``deferred_pinning`` ...) may be given as keywords too; any other keyword must be a
    libpq one. ``async``/``async_`` connections are not supported.
    """
    asynchronous = kwargs.pop("async", False) or kwargs.pop("async_", False)
    options = {key: kwargs.pop(key) for key in list(kwargs) if key in CLIENT_OPTIONS}
    dsn = make_dsn(dsn, **kwargs)
    token = pending_options.set(options)
    try:
        conn = _connect(dsn, connection_factory=connection_factory, async_=asynchronous)
    finally:
        pending_options.reset(token)
    if cursor_factory is not None:
        conn.cursor_factory = cursor_factory
    return conn
