"""pgmux: a pipelined, multiplexed pure-Python PostgreSQL client and pool for gevent."""

from pgmux import _version, errors
from pgmux._native import implementation
from pgmux.atomic import AtomicUnit, Pending
from pgmux.batch import Batch
from pgmux.client import Client, PreparedStatement
from pgmux.engine.result import DecodeError, Result
from pgmux.errors import (
    DatabaseError,
    DataError,
    Error,
    IndeterminateResultError,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotDispatchedError,
    NotSupportedError,
    OperationalError,
    PipelineAborted,
    PoolTimeout,
    ProgrammingError,
    ProtocolError,
    QueryTimeout,
    UnsafeMultiplexError,
    Warning,
)
from pgmux.session import Notification, Pipeline, Session, Transaction
from pgmux.types import Interval, Json, TypeRegistry

__version__: str = _version.__version__

__all__ = [
    "AtomicUnit",
    "Batch",
    "Client",
    "DataError",
    "DatabaseError",
    "DecodeError",
    "Error",
    "IndeterminateResultError",
    "IntegrityError",
    "InterfaceError",
    "InternalError",
    "Interval",
    "Json",
    "NotDispatchedError",
    "NotSupportedError",
    "Notification",
    "OperationalError",
    "Pending",
    "Pipeline",
    "PipelineAborted",
    "PoolTimeout",
    "PreparedStatement",
    "ProgrammingError",
    "ProtocolError",
    "QueryTimeout",
    "Result",
    "Session",
    "Transaction",
    "TypeRegistry",
    "UnsafeMultiplexError",
    "Warning",
    "errors",
    "implementation",
]
