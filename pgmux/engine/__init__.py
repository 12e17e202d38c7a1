"""The sans-IO query engine shared by both connection kinds.

It builds requests (statement cache, formats), interprets framed replies as a state
machine, owns the statement lifecycle and the ParameterStatus policy. It imports
nothing that does I/O: the pipelined driver and the pinned connection in
``pgmux.io`` write what it builds and feed it what they read.
"""

from pgmux.engine.core import Engine, PoisonedConnection, ServerEnded
from pgmux.engine.exchanges import (
    CopyExchange,
    DescribeExchange,
    Exchange,
    PortalExchange,
    QueryExchange,
    Reply,
    ScriptExchange,
    SyncExchange,
)
from pgmux.engine.settings import ServerSettings, SettingRefused
from pgmux.engine.statements import Descriptions, Statement, is_stale_statement_error

__all__ = [
    "CopyExchange",
    "DescribeExchange",
    "Descriptions",
    "Engine",
    "Exchange",
    "PoisonedConnection",
    "PortalExchange",
    "QueryExchange",
    "Reply",
    "ScriptExchange",
    "ServerEnded",
    "ServerSettings",
    "SettingRefused",
    "Statement",
    "SyncExchange",
    "is_stale_statement_error",
]
