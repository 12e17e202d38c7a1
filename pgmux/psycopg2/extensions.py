"""psycopg2.extensions: the connection and cursor classes, adaptation and typecasting,
the status constants and the connection-string helpers."""

from __future__ import annotations

from pgmux.psycopg2._adapt import (  # noqa: F401
    SQL_IN,
    AsIs,
    Binary,
    Boolean,
    DateFromPy,
    Float,
    Int,
    IntervalFromPy,
    ISQLQuote,
    NoneAdapter,
    QuotedString,
    TimeFromPy,
    TimestampFromPy,
    adapt,
    adapters,
    register_adapter,
)
from pgmux.psycopg2._casters import (  # noqa: F401
    BINARYARRAY,
    BOOLEAN,
    BOOLEANARRAY,
    BYTES,
    BYTESARRAY,
    DATE,
    DATEARRAY,
    DATETIMEARRAY,
    DECIMAL,
    DECIMALARRAY,
    FLOAT,
    FLOATARRAY,
    INTEGER,
    INTEGERARRAY,
    INTERVAL,
    INTERVALARRAY,
    JSON,
    JSONARRAY,
    JSONB,
    JSONBARRAY,
    LONGINTEGER,
    LONGINTEGERARRAY,
    PYDATE,
    PYDATEARRAY,
    PYDATETIME,
    PYDATETIMEARRAY,
    PYDATETIMETZ,
    PYDATETIMETZARRAY,
    PYINTERVAL,
    PYINTERVALARRAY,
    PYTIME,
    PYTIMEARRAY,
    ROWIDARRAY,
    STRINGARRAY,
    TIME,
    TIMEARRAY,
    UNICODE,
    UNICODEARRAY,
    binary_types,
    new_array_type,
    new_type,
    register_type,
    string_types,
)
from pgmux.psycopg2._connection import (  # noqa: F401
    ISOLATION_LEVEL_AUTOCOMMIT,
    ISOLATION_LEVEL_DEFAULT,
    ISOLATION_LEVEL_READ_COMMITTED,
    ISOLATION_LEVEL_READ_UNCOMMITTED,
    ISOLATION_LEVEL_REPEATABLE_READ,
    ISOLATION_LEVEL_SERIALIZABLE,
    STATUS_BEGIN,
    STATUS_IN_TRANSACTION,
    STATUS_PREPARED,
    STATUS_READY,
    STATUS_SETUP,
    connection,
)
from pgmux.psycopg2._cursor import cursor  # noqa: F401
from pgmux.psycopg2._dsn import make_dsn, parse_dsn  # noqa: F401
from pgmux.psycopg2._exceptions import (  # noqa: F401
    Diagnostics,
    QueryCanceledError,
    TransactionRollbackError,
)
from pgmux.psycopg2._info import Column, ConnectionInfo, Notify, encodings  # noqa: F401
from pgmux.psycopg2._psycopg import (  # noqa: F401
    Xid,
    encrypt_password,
    get_wait_callback,
    libpq_version,
    lobject,
    quote_ident,
    set_wait_callback,
)

STATUS_ASYNC = 4
STATUS_SYNC = 3
POLL_OK, POLL_READ, POLL_WRITE, POLL_ERROR = 0, 1, 2, 3
TRANSACTION_STATUS_IDLE = 0
TRANSACTION_STATUS_ACTIVE = 1
TRANSACTION_STATUS_INTRANS = 2
TRANSACTION_STATUS_INERROR = 3
TRANSACTION_STATUS_UNKNOWN = 4

JSON_OID, JSONARRAY_OID, JSONB_OID, JSONBARRAY_OID = 114, 199, 3802, 3807


def _param_escape(s: str) -> str:
    """A value as a ``key=value`` connection string writes it (quoted when needed)."""
    from pgmux.psycopg2._dsn import quote_value

    return quote_value(s)

__all__ = ["AsIs", "BINARYARRAY", "BOOLEAN", "BOOLEANARRAY", "BYTES", "BYTESARRAY", "Binary",
           "Boolean", "Column", "ConnectionInfo", "DATE", "DATEARRAY", "DATETIMEARRAY",
           "DECIMAL", "DECIMALARRAY", "DateFromPy", "Diagnostics", "FLOAT", "FLOATARRAY",
           "Float", "INTEGER", "INTEGERARRAY", "INTERVAL", "INTERVALARRAY",
           "ISOLATION_LEVEL_AUTOCOMMIT", "ISOLATION_LEVEL_DEFAULT",
           "ISOLATION_LEVEL_READ_COMMITTED", "ISOLATION_LEVEL_READ_UNCOMMITTED",
           "ISOLATION_LEVEL_REPEATABLE_READ", "ISOLATION_LEVEL_SERIALIZABLE", "ISQLQuote",
           "Int", "IntervalFromPy", "JSON", "JSONARRAY", "JSONB", "JSONBARRAY", "LONGINTEGER",
           "LONGINTEGERARRAY", "NoneAdapter", "Notify", "POLL_ERROR", "POLL_OK", "POLL_READ",
           "POLL_WRITE", "PYDATE", "PYDATEARRAY", "PYDATETIME", "PYDATETIMEARRAY",
           "PYDATETIMETZ", "PYDATETIMETZARRAY", "PYINTERVAL", "PYINTERVALARRAY", "PYTIME",
           "PYTIMEARRAY", "QueryCanceledError", "QuotedString", "ROWIDARRAY", "SQL_IN",
           "STATUS_ASYNC", "STATUS_BEGIN", "STATUS_IN_TRANSACTION", "STATUS_PREPARED",
           "STATUS_READY", "STATUS_SETUP", "STATUS_SYNC", "STRINGARRAY", "TIME", "TIMEARRAY",
           "TRANSACTION_STATUS_ACTIVE", "TRANSACTION_STATUS_IDLE",
           "TRANSACTION_STATUS_INERROR", "TRANSACTION_STATUS_INTRANS",
           "TRANSACTION_STATUS_UNKNOWN", "TimeFromPy", "TimestampFromPy",
           "TransactionRollbackError", "UNICODE", "UNICODEARRAY", "Xid", "adapt", "adapters",
           "binary_types", "connection", "cursor", "encodings", "encrypt_password",
           "get_wait_callback", "libpq_version", "lobject", "make_dsn", "new_array_type",
           "new_type", "parse_dsn", "quote_ident", "register_adapter", "register_type",
           "set_wait_callback", "string_types"]
