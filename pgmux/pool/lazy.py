"""A client's pipeline pool, opened on first use and again after a fork."""

from __future__ import annotations

from typing import Any

from gevent.lock import Semaphore

from pgmux.errors import InterfaceError
from pgmux.pool.collector import POLICY, enabled
from pgmux.pool.router import PipelinePool


class LazyPipelinePool:
    """Opens its ``PipelinePool`` (made with ``options``) when first asked for it: the first
    caller opens it, concurrent first callers wait for that one start. While it is open
    it holds the collector policy (``pgmux.pool.collector``), if ``tune_gc``."""

    def __init__(self, size: int, options: dict[str, Any], tune_gc: bool = True):
        self.size = size
        self.current: PipelinePool | None = None
        self.closed = False
        self.options = options  # what the pool is made with (until it opens)
        self.tune_gc = tune_gc
        self._holds = False  # whether the open pool holds the collector policy
        self.observer: Any = None  # its connection-time metrics (pool.counters.observer)
        self._lock = Semaphore()

    def get(self) -> PipelinePool:
        """The pool, opened now if it is not open yet."""
        pool = self.current
        if pool is not None:
            return pool
        with self._lock:
            if self.current is not None:
                return self.current
            if self.closed:
                raise InterfaceError("the client is closed")
            if self.size == 0:
                raise InterfaceError("pipeline_size=0: use db.session() or db.transaction()")
            pool = PipelinePool(size=self.size, **self.options)
            pool.counters.observer = self.observer
            try:
                pool.start()
            except BaseException:
                pool.close(0)
                raise
            self.current = pool
            if enabled(self.tune_gc):
                POLICY.hold()
                self._holds = True
            return pool

    def set_observer(self, observer: Any) -> None:
        """Where the pool's connection times go (telemetry), now and once it opens."""
        self.observer = observer
        if self.current is not None:
            self.current.counters.observer = observer

    def close(self, timeout: float) -> None:
        self.closed = True
        pool, self.current = self.current, None
        if pool is not None:
            pool.close(timeout)
        self._release()

    def abandon_after_fork(self) -> None:
        """In a forked child: drop the inherited sockets; the next get() opens anew."""
        pool, self.current = self.current, None
        if pool is not None:
            pool.abandon_after_fork()
        self._release()

    def _release(self) -> None:
        if self._holds:
            self._holds = False
            POLICY.release()
