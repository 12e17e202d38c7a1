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
    (standard_conforming_strings on) where the handle's statements run, as the server
    reported it (see ``pgmux.dbapi.handles``); True without a handle."""
    return True if dbconn is None else bool(dbconn.standard_conforming_strings)
