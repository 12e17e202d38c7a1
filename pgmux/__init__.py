"""pgmux: a pipelined, multiplexed pure-Python PostgreSQL client and pool for gevent."""

from pgmux import errors
from pgmux.client import Client, PreparedStatement
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
from pgmux.protocol.result import DecodeError, Result
from pgmux.session import Notification, Pipeline, Session, Transaction
from pgmux.types import Interval, Json, TypeRegistry

__version__ = "0.1.0"

__all__ = [
    "Client",
    "DatabaseError",
    "DecodeError",
    "Error",
    "IndeterminateResultError",
    "InterfaceError",
    "Interval",
    "Json",
    "NotDispatchedError",
    "Notification",
    "OperationalError",
    "Pipeline",
    "PipelineAborted",
    "PoolTimeout",
    "PreparedStatement",
    "ProtocolError",
    "QueryTimeout",
    "Result",
    "Session",
    "Transaction",
    "TypeRegistry",
    "UnsafeMultiplexError",
    "errors",
]
