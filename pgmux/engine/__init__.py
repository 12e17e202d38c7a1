"""The sans-IO query engine shared by both connection kinds.

It builds requests (statement cache, formats), interprets framed replies as a state
machine, owns the statement lifecycle and the ParameterStatus policy, and decides what
follows each reply (``Engine.outcome``). It imports nothing that does I/O: the pipelined
driver and the pinned connection in ``pgmux.io`` write what it builds, feed it what they
read and wait.
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
from pgmux.engine.outcome import Outcome, RetryBudget
from pgmux.engine.settings import ServerSettings, SettingRefused
from pgmux.engine.statements import Descriptions, Statement

__all__ = [
    "CopyExchange",
    "DescribeExchange",
    "Descriptions",
    "Engine",
    "Exchange",
    "Outcome",
    "PoisonedConnection",
    "PortalExchange",
    "QueryExchange",
    "Reply",
    "RetryBudget",
    "ScriptExchange",
    "ServerEnded",
    "ServerSettings",
    "SettingRefused",
    "Statement",
    "SyncExchange",
]
