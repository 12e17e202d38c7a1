"""Helpers for the connection tests: a clean libpq environment, connections closed afterwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pgmux.io import conninfo, dsn, passfile
from pgmux.io.connect import ServerConnection, connect
from pgmux.io.conninfo import make_conninfo
from support.server import PgServer

PATIENCE = 10.0  # seconds: a generous bound for what must happen


def isolate_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *, home: Path) -> Path:
    """No PG* variables (nor PGPASSFILE), HOME at ``home`` (made if missing), and no local
    socket directory (the only one is a missing directory under ``tmp_path``); returns ``home``."""
    for variable in {*filter(None, dsn.KEYWORDS.values()), "PGPASSFILE"}:
        monkeypatch.delenv(variable, raising=False)
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    no_sockets = (str(tmp_path / "no-socket-dir"),)
    monkeypatch.setattr(conninfo, "LOCAL_SOCKET_DIRS", no_sockets)
    monkeypatch.setattr(passfile, "LOCAL_SOCKET_DIRS", no_sockets)
    return home


@contextmanager
def opening() -> Iterator[Callable[..., ServerConnection]]:
    """open(server, role, **params) -> ServerConnection; every one is closed on exit."""
    connections: list[ServerConnection] = []

    def open_connection(server: PgServer, role: str, **params) -> ServerConnection:
        conn = connect(make_conninfo(**server.params_for(role, **params)), timeout=PATIENCE)
        connections.append(conn)
        return conn

    try:
        yield open_connection
    finally:
        for conn in connections:
            conn.close()


def tls(server: PgServer) -> dict:
    """Connection keywords for TLS that verifies the server against the test CA (verify-full)."""
    return server.tls_params("verify-full")
