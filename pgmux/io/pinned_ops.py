"""Reply accumulators of the pinned connection: ops fed one backend message at a time.

An op keeps its own state until its ``done`` flag is set, so a read cut short by
the caller's deadline can be resumed after a cancel (see ``pgmux.io.pinned``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pgmux.errors import DatabaseError, InterfaceError, ProtocolError, QueryTimeout
from pgmux.protocol import backend as msg
from pgmux.protocol import frontend
from pgmux.protocol.result import EMPTY_SHAPE, Reply, Result
from pgmux.protocol.statements import Statement

if TYPE_CHECKING:
    from pgmux.io.pinned import PinnedConnection


class _Expired(Exception):
    """The caller's deadline passed while waiting for the server (internal)."""


def _server_error(payload: bytes) -> DatabaseError:
    return DatabaseError.from_fields(msg.parse_fields(payload))


def _is_cancel(error: BaseException | None) -> bool:
    return getattr(error, "sqlstate", None) == "57014"


def _timeout_error(timeout: float | None, cause: BaseException | None) -> QueryTimeout:
    exc = QueryTimeout(f"no result within {timeout}s: the statement was cancelled")
    if _is_cancel(cause):
        exc.sqlstate = "57014"
    return exc


# -- ops: what consumes the reply to one request -----------------------------------------


class _SimpleOp:
    """The reply to a simple Query (possibly several statements): keeps the last result."""

    __slots__ = ("conn", "done", "error", "current", "last")

    def __init__(self, conn: PinnedConnection):
        self.conn = conn
        self.done = False
        self.error: BaseException | None = None
        self.current = Reply()
        self.last: Reply | None = None

    def feed(self, kind: int, payload: bytes) -> None:
        if kind == 68:  # DataRow
            self.current.add_row(payload)
        elif kind == 84:  # RowDescription
            self.current = Reply(self.conn.shapes.from_payload(payload))
        elif kind == 67:  # CommandComplete
            reply = self.current
            reply.command = msg.parse_command_complete(payload)
            if reply.error is not None and self.error is None:
                self.error = reply.error
            self.last, self.current = reply, Reply()
        elif kind == 90:
            self.done = True
        elif kind == 69:
            if self.error is None:
                self.error = _server_error(payload)
        elif kind == 73:  # EmptyQueryResponse
            self.last = Reply()
        else:
            self._copy_misuse(kind)

    def _copy_misuse(self, kind: int) -> None:
        if kind in (71, 87):  # CopyIn/CopyBothResponse: refuse, the server then fails it
            self.conn._send(frontend.copy_fail("COPY FROM STDIN needs copy_in()"))
            self._misuse("COPY ... FROM STDIN needs copy_in()")
        elif kind == 72:  # CopyOutResponse: the data that follows is dropped
            self._misuse("COPY ... TO STDOUT needs copy_out()")
        elif kind not in (100, 99):  # CopyData, CopyDone
            raise ProtocolError(f"unexpected message {bytes([kind])!r} in reply to a query")

    def _misuse(self, text: str) -> None:
        if self.error is None:
            self.error = InterfaceError(text)

    def result(self) -> Result:
        if self.error is not None:
            raise self.error
        return (self.last or self.current).result()


class _QueryOp:
    """The reply to one extended-protocol statement (or a stream's portal)."""

    __slots__ = ("conn", "done", "reply", "statement", "parses", "state")

    def __init__(self, conn: PinnedConnection, reply: Reply, statement: Statement | None,
                 parses: bool):
        self.conn = conn
        self.done = False
        self.reply = reply
        self.statement = statement
        self.parses = parses  # this request carries the Parse of ``statement``
        self.state = ""  # for streams: "suspended", "complete", "failed", "ready"

    @property
    def error(self) -> BaseException | None:
        return self.reply.error

    def feed(self, kind: int, payload: bytes) -> None:
        if kind == 68:
            self.reply.add_row(payload)
        elif kind == 90:
            self.state = "ready"
            self.done = True
        elif kind == 67:
            self.reply.command = msg.parse_command_complete(payload)
            self._pause("complete")
        elif kind == 84:
            self._describe(self.conn.shapes.from_payload(payload))
        elif kind == 115:  # PortalSuspended
            self._pause("suspended")
        elif kind == 69:
            self._error(msg.parse_fields(payload))
            self._pause("failed")
        else:
            self._other(kind)

    def _pause(self, state: str) -> None:
        self.state = state
        if self.conn.streaming:
            self.done = True  # a stream decides what to send next

    def _other(self, kind: int) -> None:
        if kind == 49:  # ParseComplete: the statement exists now, whatever follows
            self.parses = False
        elif kind == 110:  # NoData
            self.reply.shape = EMPTY_SHAPE
            if self.statement is not None and self.statement.shape is None:
                self.statement.shape = EMPTY_SHAPE
        elif kind == 73:  # EmptyQueryResponse
            self.reply.command = ""
            self._pause("complete")
        elif kind in (71, 72, 87):
            if self.reply.error is None:
                self.reply.error = InterfaceError("COPY needs copy_in() or copy_out()")
            if kind != 72:
                self.conn._send(frontend.copy_fail("COPY FROM STDIN needs copy_in()"))
        elif kind not in (50, 51, 116, 100, 99):  # Bind/CloseComplete, ParameterDescription
            raise ProtocolError(f"unexpected message {bytes([kind])!r} in reply to a query")

    def _describe(self, shape: Any) -> None:
        self.conn.shapes.describe(self.reply, self.statement, shape)

    def _error(self, fields: dict[str, str]) -> None:
        self.conn.statements.record_error(self.reply, self.statement, self.parses, fields)


class _CopyOp:
    """COPY through its phases: up to the Copy{In,Out}Response (a pause), then to the end."""

    __slots__ = ("conn", "expect", "done", "copying", "command", "error")

    def __init__(self, conn: PinnedConnection, expect: int):
        self.conn = conn
        self.expect = expect  # 71 CopyInResponse or 72 CopyOutResponse
        self.done = False
        self.copying = False
        self.command = ""
        self.error: BaseException | None = None

    def feed(self, kind: int, payload: bytes) -> None:
        if kind == 100 or kind == 99:  # CopyData while draining, CopyDone
            return
        if kind == self.expect:
            self.copying = self.done = True
        elif kind == 67:
            self.command = msg.parse_command_complete(payload)
        elif kind == 69:
            if self.error is None:
                self.error = _server_error(payload)
        elif kind == 90:
            self.copying = False
            self.done = True
        elif kind in (71, 87):
            self.conn._send(frontend.copy_fail("wrong COPY direction"))
            self._wrong()
        elif kind in (72, 84, 68, 73):
            self._wrong()
        else:
            raise ProtocolError(f"unexpected message {bytes([kind])!r} during COPY")

    def _wrong(self) -> None:
        if self.error is None:
            direction = "FROM STDIN" if self.expect == 71 else "TO STDOUT"
            self.error = InterfaceError(f"the statement is not a COPY ... {direction}")

