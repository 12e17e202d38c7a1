"""Fixtures for pgmux.psycopg2's tests: drop-in connections (each test on a client of its
own) and, for comparison, connections of the real psycopg2 to the same server."""

from __future__ import annotations

import uuid

import psycopg2 as real_psycopg2
import pytest
from support.factory import closed_after

from pgmux import psycopg2


def _close_all(connections):
    for client in {conn.pgmux_handle.client for conn in connections
                   if conn.pgmux_handle is not None}:
        client.close()


@pytest.fixture
def connect(pg):
    """connect(**kwargs) -> a pgmux.psycopg2 connection on a client of this test's own."""
    name = f"psycopg2-{uuid.uuid4().hex[:8]}"
    yield from closed_after(
        lambda dsn=None, **kwargs: psycopg2.connect(
            dsn or pg.dsn, **{"application_name": name, "acquire_timeout": 10, **kwargs}),
        _close_all)


@pytest.fixture
def real(pg):
    """real(**kwargs) -> a connection of psycopg2 itself to the same database."""
    yield from closed_after(lambda **kwargs: real_psycopg2.connect(pg.dsn, **kwargs))
