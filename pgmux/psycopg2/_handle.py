"""What the drop-in reads of a ``pgmux.dbapi`` connection beyond PEP 249: its pinned
connection, kept in one place."""

from __future__ import annotations

from typing import Any


def lease_of(dbconn: Any) -> Any:
    """The pinned connection (a ``Lease``) the handle holds, or None."""
    return getattr(dbconn, "_lease", None)


def server_of(dbconn: Any) -> Any:
    """The server connection under the handle's lease (pid, cancel, socket), or None."""
    lease = lease_of(dbconn)
    if lease is None or lease.closed:
        return None
    return getattr(lease, "_conn", None)


def pin(dbconn: Any, reason: str) -> Any:
    """Make the handle keep a pinned connection until close(); the lease."""
    if dbconn._sticky is None:
        dbconn._sticky = reason
    if dbconn._lease is None:
        dbconn._on_lease(lambda lease: None, begin=False)
    return dbconn._lease
