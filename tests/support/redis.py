"""A throwaway Redis for tests that need a broker (``pgmux.tooling.redis``), skipping the test
when Debian's redis-server is not installed."""

from __future__ import annotations

import pytest

from pgmux.tooling.redis import RedisServer, find_redis, ping

NO_REDIS = "needs Redis (Debian's redis-server package, or $PGMUX_REDIS_SERVER)"


def redis_binary() -> str:
    """The redis-server executable; skips the test when it is missing."""
    found = find_redis()
    if found is None:
        pytest.skip(NO_REDIS)
    return found


__all__ = ["RedisServer", "ping", "redis_binary"]
