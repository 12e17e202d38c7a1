"""What the drop-in reads of a ``pgmux.dbapi`` connection's pinned connection, in one
place (through ``pgmux.dbapi.handles``)."""

from __future__ import annotations

from typing import Any


def lease_of(dbconn: Any) -> Any:
    """The pinned connection (a ``Lease``) the handle holds, or None."""
    lease = dbconn.lease if dbconn is not None else None
    return None if lease is None or lease.closed else lease


def pin(dbconn: Any, reason: str) -> Any:
    """Make the handle keep a pinned connection until close(); the lease."""
    return dbconn.pin(reason)


def standard_strings(dbconn: Any) -> bool:
    """Whether the server reads a backslash in a '' literal as a plain character
    (standard_conforming_strings on) where the handle's statements run, as the server last
    reported it (ParameterStatus): its pinned connection's setting while it holds one,
    else that of the shared client's pipelined connections (off once any reported it
    off; its pinned connections start with the same setting)."""
    lease = lease_of(dbconn)
    conn = getattr(lease, "_conn", None)
    if conn is not None:
        return bool(conn.engine.settings.standard_conforming_strings)
    pool = dbconn.client._pipeline if dbconn is not None else None
    return True if pool is None else bool(pool.standard_conforming_strings)
