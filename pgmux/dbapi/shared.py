"""The process's shared clients: one ``Client`` per (dsn, options), made on first use by
``pgmux.dbapi.connect()`` and lent to every handle asking for that pair."""

from __future__ import annotations

import os
from typing import Any

from pgmux.client import Client
from pgmux.errors import InterfaceError

_shared: tuple[int, dict[Any, Client]] = (os.getpid(), {})


def shared_client(dsn: str | None, options: dict[str, Any]) -> Client:
    """The process's ``Client`` for (dsn, options), made on first use (connections open
    lazily). A forked child makes its own: the registry is per process."""
    global _shared
    pid, clients = _shared
    if pid != os.getpid():
        _shared = pid, clients = os.getpid(), {}
    key = (dsn, tuple(sorted(options.items())))
    try:
        client = clients.get(key)
    except TypeError:
        raise InterfaceError("connect() options must be hashable values") from None
    if client is None or client.closed:
        client = clients[key] = Client(dsn, **options)
    return client


def close_shared_clients(dbname: str | None = None) -> None:
    """Close the shared clients of this process (their DB-API handles then fail): all of
    them, or those connecting to database ``dbname`` (before dropping or cloning it)."""
    pid, clients = _shared
    if pid != os.getpid():
        return
    for key, client in list(clients.items()):
        if dbname is None or client.conninfo.dbname == dbname:
            client.close()
            del clients[key]
