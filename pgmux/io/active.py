"""Readers that hold a pinned connection between two calls: a stream, a COPY OUT, an
explicit pipeline.

While one is open the connection is its ``active`` reader: it runs nothing else until the
reader is finished, or abandoned because another statement came (the reader then ends
itself cleanly, and its next fetch says why it was closed).
"""

from __future__ import annotations

from typing import Any

from pgmux.errors import InterfaceError


class ActiveReader:
    """The base of what a pinned connection may keep open between two calls."""

    WHAT = "reader"  # what it is, for the message after it was abandoned

    def __init__(self, conn: Any):
        self.conn = conn  # the PinnedConnection
        self.finished = False
        self.abandoned: str | None = None  # why it was closed by another statement
        self.operation: Any = None  # its telemetry (pgmux.telemetry.Operation), if observed
        self.rows_handed_out: int | None = None  # rows the caller took, for that telemetry

    def attach(self) -> None:
        """Make this the connection's active reader."""
        self.conn.active = self

    def detach(self) -> None:
        """Finished: the connection is free for other statements."""
        self.finished = True
        if self.conn.active is self:
            self.conn.active = None

    def abandon(self, reason: str) -> None:
        """Another statement comes: end this reader now (the subclass's ``close``)."""
        if self.finished:
            return
        self.abandoned = reason
        try:
            self.close()
        finally:
            self.end_operation()

    def end_operation(self) -> None:
        """End its telemetry with the rows handed out so far (a no-op once ended): when
        the caller's iteration ends, or when the reader is abandoned, even if the caller
        never iterated."""
        operation = self.operation
        if operation is not None:
            self.operation = None
            operation.succeeded(rows=self.rows_handed_out)

    def close(self) -> None:
        raise NotImplementedError

    def ended(self) -> bool:
        """True once finished; raises InterfaceError if it was abandoned."""
        if self.finished and self.abandoned:
            raise InterfaceError(f"the {self.WHAT} was closed because {self.abandoned}")
        return self.finished
