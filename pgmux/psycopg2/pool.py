"""psycopg2.pool: connection pools (here: bounded sets of cheap handles on the shared
client, so ``maxconn`` keeps its meaning for the application)."""

from __future__ import annotations

import threading
from typing import Any

from pgmux.psycopg2 import connect as _connect
from pgmux.psycopg2._exceptions import Error


class PoolError(Error):
    """A pool misused or exhausted (psycopg2.pool's messages): no connection left, a
    connection not from this pool, a closed pool."""


class AbstractConnectionPool:
    """Keeps up to ``maxconn`` connections, ``minconn`` of them made at once."""

    def __init__(self, minconn: int, maxconn: int, *args: Any, **kwargs: Any) -> None:
        self.minconn = int(minconn)
        self.maxconn = int(maxconn)
        self.closed = False
        self._args = args
        self._kwargs = kwargs
        self._pool: list[Any] = []
        self._used: dict[Any, Any] = {}
        self._rused: dict[int, Any] = {}
        self._keys = 0
        for _ in range(self.minconn):
            self._connect()

    def _connect(self, key: Any = None) -> Any:
        conn = _connect(*self._args, **self._kwargs)
        if key is not None:
            self._used[key] = conn
            self._rused[id(conn)] = key
        else:
            self._pool.append(conn)
        return conn

    def _getkey(self) -> int:
        self._keys += 1
        return self._keys

    def _getconn(self, key: Any = None) -> Any:
        if self.closed:
            raise PoolError("connection pool is closed")
        if key is None:
            key = self._getkey()
        if key in self._used:
            return self._used[key]
        if self._pool:
            self._used[key] = conn = self._pool.pop()
            self._rused[id(conn)] = key
            return conn
        if len(self._used) == self.maxconn:
            raise PoolError("connection pool exhausted")
        return self._connect(key)

    def _putconn(self, conn: Any, key: Any = None, close: bool = False) -> None:
        if self.closed:
            raise PoolError("connection pool is closed")
        if key is None:
            key = self._rused.get(id(conn))
            if key is None:
                raise PoolError("trying to put unkeyed connection")
        if len(self._pool) < self.minconn and not close:
            if not conn.closed:
                status = conn.info.transaction_status
                if status == 4:  # unknown: the connection is broken
                    conn.close()
                elif status != 0:  # in a transaction: roll it back before reuse
                    conn.rollback()
                    self._pool.append(conn)
                else:
                    self._pool.append(conn)
        else:
            conn.close()
        if not self.closed or key in self._used:
            del self._used[key]
            del self._rused[id(conn)]

    def _closeall(self) -> None:
        if self.closed:
            raise PoolError("connection pool is closed")
        for conn in self._pool + list(self._used.values()):
            try:
                conn.close()
            except Exception:
                pass
        self.closed = True


class SimpleConnectionPool(AbstractConnectionPool):
    """A pool for one thread (or one greenlet at a time)."""

    getconn = AbstractConnectionPool._getconn
    putconn = AbstractConnectionPool._putconn
    closeall = AbstractConnectionPool._closeall


class ThreadedConnectionPool(AbstractConnectionPool):
    """A pool that threads (and greenlets) may share."""

    def __init__(self, minconn: int, maxconn: int, *args: Any, **kwargs: Any) -> None:
        AbstractConnectionPool.__init__(self, minconn, maxconn, *args, **kwargs)
        self._lock = threading.Lock()

    def getconn(self, key: Any = None) -> Any:
        with self._lock:
            return self._getconn(key)

    def putconn(self, conn: Any = None, key: Any = None, close: bool = False) -> None:
        with self._lock:
            self._putconn(conn, key, close)

    def closeall(self) -> None:
        with self._lock:
            self._closeall()

__all__ = ["AbstractConnectionPool", "PoolError", "SimpleConnectionPool",
           "ThreadedConnectionPool"]
