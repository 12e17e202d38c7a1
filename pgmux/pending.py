"""Results known later: a statement's ``Pending``, and the ``with`` block that collects
statements and sends them at its end (an atomic unit, a batch)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from pgmux._native import adopt
from pgmux.engine.result import Result, first_row, first_value
from pgmux.errors import Error, InterfaceError
from pgmux.multiplexed import PreparedStatement

Params = Sequence[Any]
Item = TypeVar("Item")  # what a block keeps of one statement until it is sent


class Pending:
    """The result of one statement of a block (an atomic unit, a batch), known once the
    block has sent it."""

    __slots__ = ("_shape", "_what", "_value", "_error", "_ready")

    def __init__(self, shape: Callable[[Result], Any], what: str = "the atomic unit"):
        self._shape = shape  # Result -> what the direct call returns
        self._what = what  # the block, for the error before it is sent
        self._value: Any = None
        self._error: BaseException | None = None
        self._ready = False

    @property
    def done(self) -> bool:
        """Whether the block sent it and it was answered (successfully or not)."""
        return self._ready

    def result(self) -> Any:
        """What the direct call returns (rowcount, Result, row or None, value); its error
        if it failed; InterfaceError before the block has sent it."""
        if not self._ready:
            raise InterfaceError(f"{self._what} has not been sent yet: read results after "
                                 "its block")
        if self._error is not None:
            raise self._error
        return self._value

    def settle(self, result: Result | None, error: BaseException | None) -> None:
        """(For the block that made it) the statement's answer: its result or its error."""
        self._ready = True
        if error is None and result is not None:
            try:
                self._value = self._shape(result)
            except Error as exc:  # e.g. fetchval of a row without columns
                error = exc
        self._error = error

    def __repr__(self) -> str:
        state = "pending" if not self._ready else "failed" if self._error else "done"
        return f"<pgmux.Pending {state}>"


class StatementBlock(Generic[Item]):
    """A ``with`` block collecting statements: each call returns a ``Pending``; the block's
    end sends them (``_send``); an exception inside the block sends nothing."""

    WHAT = "the block"  # how errors name it

    def __init__(self) -> None:
        self._items: list[Item] = []
        self._pending: list[Pending] = []
        self._state = "new"

    def __enter__(self) -> Any:
        if self._state != "new":
            raise InterfaceError(f"{self.WHAT} can be entered only once")
        self._state = "open"
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._state = "closed"
        if exc is not None:
            self._settle(None, InterfaceError(f"{self.WHAT} was not sent: its block raised "
                                              f"{type(exc).__name__}"))
            return
        if self._items:
            self._send()

    def execute(self, sql: str | PreparedStatement, params: Params = ()) -> Pending:
        """A command; its Pending gives the row count (-1 if its tag has none)."""
        return self._add(sql, params, rowcount)

    def query(self, sql: str | PreparedStatement, params: Params = ()) -> Pending:
        """A statement; its Pending gives the Result."""
        return self._add(sql, params, same)

    def fetchone(self, sql: str | PreparedStatement, params: Params = ()) -> Pending:
        """A statement; its Pending gives the first row, or None."""
        return self._add(sql, params, first_row)

    def fetchval(self, sql: str | PreparedStatement, params: Params = ()) -> Pending:
        """A statement; its Pending gives the first column of the first row, or None."""
        return self._add(sql, params, first_value)

    def _add(self, statement: str | PreparedStatement, params: Params,
             shape: Callable[[Result], Any]) -> Pending:
        if self._state != "open":
            raise InterfaceError(f"{self.WHAT} is not open: add statements inside its block")
        self._items.append(self._item(statement, params))
        pending = Pending(shape, self.WHAT)
        self._pending.append(pending)
        return pending

    def _item(self, statement: str | PreparedStatement, params: Params) -> Item:
        """What the block keeps of one statement (vetted and encoded: a refusal comes at
        the call that adds it, before anything is sent)."""
        raise NotImplementedError

    def _send(self) -> None:
        raise NotImplementedError

    def _settle(self, result: Result | None, error: BaseException | None) -> None:
        for pending in self._pending:
            pending.settle(result, error)

    def __repr__(self) -> str:
        return f"<pgmux.{type(self).__name__} {self._state} statements={len(self._items)}>"


def rowcount(result: Result) -> int:
    return result.rowcount


def same(result: Result) -> Result:
    return result


adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
