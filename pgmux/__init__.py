"""pgmux: a pipelined, multiplexed pure-Python PostgreSQL client and pool for gevent."""

from pgmux.errors import (
    DatabaseError,
    Error,
    IndeterminateResultError,
    InterfaceError,
    NotDispatchedError,
    OperationalError,
    PipelineAborted,
    PoolTimeout,
    ProtocolError,
    QueryTimeout,
    UnsafeMultiplexError,
)

__version__ = "0.1.0"

__all__ = [
    "DatabaseError",
    "Error",
    "IndeterminateResultError",
    "InterfaceError",
    "NotDispatchedError",
    "OperationalError",
    "PipelineAborted",
    "PoolTimeout",
    "ProtocolError",
    "QueryTimeout",
    "UnsafeMultiplexError",
]
