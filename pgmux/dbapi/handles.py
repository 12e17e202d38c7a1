"""What an adapter built on a DB-API connection (``pgmux.psycopg2``) may read and ask of
the pinned connection behind it: a base class of ``pgmux.dbapi.Connection``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pgmux.dbapi.info import ConnectionInfo
    from pgmux.dbapi.lease import Lease

T = TypeVar("T")


class HandleAccess:
    """The pinned connection of a handle, for adapters (see the module's docstring)."""

    if TYPE_CHECKING:  # what pgmux.dbapi.connection.Connection provides
        _lease: Lease | None
        _sticky: str | None
        _tpc_prepared: bool
        _tpc_xid: Any
        _failed: BaseException | None

        def _on_lease(self, work: Callable[[Lease], T], begin: bool = True) -> T: ...
        @property
        def info(self) -> ConnectionInfo: ...

    @property
    def lease(self) -> Lease | None:
        """The pinned connection held now (None: statements go multiplexed)."""
        return self._lease

    @property
    def standard_conforming_strings(self) -> bool:
        """Whether the server reads a backslash in a '' literal as a plain character where
        this handle's statements run: on its pinned connection, as the server last reported
        it; else as the client's multiplexed connections started (they never run SET),
        asked once per client."""
        lease = self._lease
        if lease is not None and not lease.closed:
            return lease.standard_conforming_strings
        try:
            return self.info.parameter_status("standard_conforming_strings") != "off"
        except Exception:  # nothing to ask it with (no multiplexed connections): the default
            return True

    def pin(self, reason: str) -> Lease:
        """Hold a pinned connection from now until close(), as session state does
        (``reason`` is what ``pinned`` says then); the lease."""
        if self._sticky is None:
            self._sticky = reason
        return self._on_lease(lambda lease: lease, begin=False)

    def on_lease(self, work: Callable[[Lease], Any]) -> Any:
        """``work(lease)`` on the pinned connection (taken if none is held; no BEGIN)."""
        return self._on_lease(work, begin=False)

    def forgive(self, error: BaseException) -> bool:
        """For a caller that will send, another way, a statement the server refused before
        running it: whether that may be done here (no server transaction is open, so none
        was aborted), forgetting ``error`` as the failure of an unpinned transaction."""
        lease = self._lease
        if lease is not None and lease.in_transaction:
            return False
        if self._failed is error:
            self._failed = None
        return True

    @property
    def tpc_xid(self) -> Any:
        """The two-phase transaction begun (an Xid) until it ends, or None."""
        return self._tpc_xid

    @property
    def tpc_prepared(self) -> bool:
        """A two-phase transaction was prepared and not finished yet."""
        return self._tpc_prepared
