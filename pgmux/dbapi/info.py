"""``connection.info``: what psycopg's ConnectionInfo tells, for a handle on a shared client.

A DB-API connection of pgmux has no server connection of its own unless it holds a pinned
one (a lease), so the facts come from where its next statement would run: the lease when
it holds one (live values, one query each), else the client's multiplexed connections.
Those never run SET (the guard refuses it), so their settings are what the server gave at
startup: each is asked once per client and remembered.
"""

from __future__ import annotations

import enum
import weakref
from collections.abc import Callable
from typing import Any

from pgmux.client import Client

PARAMETER_SQL = "SELECT current_setting($1, true)"
VERSION_SQL = "SELECT current_setting('server_version_num')::int"

Query = Callable[[str, tuple[Any, ...]], Any]  # (sql, params) -> first value


class TransactionStatus(enum.IntEnum):
    """libpq's PGTransactionStatusType, as psycopg's ``pq.TransactionStatus``."""

    IDLE = 0
    ACTIVE = 1
    INTRANS = 2
    INERROR = 3
    UNKNOWN = 4


_STATUS = {"I": TransactionStatus.IDLE, "T": TransactionStatus.INTRANS,
           "E": TransactionStatus.INERROR}

# What each client's multiplexed connections reported, by client (forgotten with it).
_startup_facts: weakref.WeakKeyDictionary[Client, dict[str, Any]] = weakref.WeakKeyDictionary()


class ConnectionInfo:
    """``conn.info``: server version, parameter status, backend pid, transaction status."""

    encoding = "utf-8"  # pgmux refuses any other client_encoding
    vendor = "PostgreSQL"

    def __init__(self, client: Client, lease: Callable[[], Any], run: Callable[..., Any],
                 unpinned_status: Callable[[], TransactionStatus]):
        """``lease()``: the handle's pinned connection or None; ``run(sql, params,
        pinned)``: the first value of a statement on it (pinned) or multiplexed;
        ``unpinned_status()``: the status of the handle's transaction while it holds no
        pinned connection."""
        self._client = client
        self._lease = lease
        self._run = run
        self._unpinned_status = unpinned_status

    @property
    def server_version(self) -> int:
        """The server's version as libpq reports it: 150004 for 15.4."""
        version: int = self._startup("server_version_num", VERSION_SQL, ())
        return version

    def parameter_status(self, name: str) -> str | None:
        """The current value of a server setting (``TimeZone``, ``DateStyle``, ...), or None
        when the server has no such setting."""
        value: str | None
        if self._lease() is not None:
            value = self._run(PARAMETER_SQL, (name,), True)
        else:
            value = self._startup(name, PARAMETER_SQL, (name,))
        return value

    @property
    def backend_pid(self) -> int | None:
        """The server process of the pinned connection held, or None when statements go
        multiplexed (no one server process serves them)."""
        lease = self._lease()
        if lease is None:
            return None
        with lease.using():
            pid: int = lease.pid
        return pid

    @property
    def transaction_status(self) -> TransactionStatus:
        lease = self._lease()
        if lease is None:
            return self._unpinned_status()
        with lease.using():
            return _STATUS.get(lease.transaction_status, TransactionStatus.UNKNOWN)

    # libpq's connection facts, from the conninfo the client was made with
    @property
    def dbname(self) -> str:
        return self._client.conninfo.dbname

    @property
    def user(self) -> str:
        return self._client.conninfo.user

    @property
    def host(self) -> str:
        return self._client.conninfo.hosts[0]

    @property
    def port(self) -> int:
        return self._client.conninfo.ports[0]

    @property
    def options(self) -> str:
        return self._client.conninfo.options or ""

    def _startup(self, key: str, sql: str, params: tuple[Any, ...]) -> Any:
        facts = _startup_facts.setdefault(self._client, {})
        try:
            return facts[key]
        except KeyError:
            value = facts[key] = self._run(sql, params, False)
            return value

    def __repr__(self) -> str:
        return f"<pgmux.dbapi.ConnectionInfo {self._client.conninfo.describe()}>"
