"""Named (server-side) cursors: ``DECLARE ... FETCH`` on the DB-API connection's lease.

A named cursor is a SQL cursor on the pinned connection its DB-API connection holds, so
other statements may run between two fetches (Django's ``.iterator()`` saving each row it
reads). Outside a transaction (autocommit) it is declared ``WITH HOLD``, which the server
materialises at the end of the DECLARE's own implicit transaction; inside one it lives
until the transaction ends unless ``withhold=True``. The connection keeps its lease while
one of its cursors is open.

Server-side names are the connection's own (``pgmux_cursor_0``, ``_1`` ... the lowest
free one), not the caller's: the DECLARE text of a query then repeats, so it is prepared
once, and the caller's names (Django makes a new one for every ``.iterator()``) cannot
collide with anything else on the server connection. FETCH and CLOSE go as simple
queries: nothing to describe or prepare for a statement whose result depends on which
cursor it reads.

Closing: a cursor that is no longer wanted is not closed with a statement of its own when
that can wait. Inside a transaction it is left to the end of the transaction (a CLOSE of
a cursor a ROLLBACK TO SAVEPOINT already removed would abort it); outside one, the reset
of the server connection closes it (DISCARD ALL) when the lease goes back. Only a
connection that keeps its lease (session state, or behind a transaction pooler, which
resets nothing) sends CLOSE.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pgmux.engine.result import Result, Row
from pgmux.errors import DatabaseError, InterfaceError
from pgmux.session import Lease, quote_ident

CURSOR_PREFIX = "pgmux_cursor_"
ENDED = ("the server-side cursor was closed when its transaction ended (declare it "
         "outside a transaction, or with withhold=True, to read it after COMMIT)")


class CursorLease(Lease):
    """A lease that can also run simple queries (text results, nothing described)."""

    def command(self, sql: str) -> Result:
        return self._use().command(sql)


class Declared:
    """One SQL cursor a DB-API connection declared on its lease."""

    __slots__ = ("name", "hold", "in_transaction", "wanted")

    def __init__(self, name: str, hold: bool, in_transaction: bool):
        self.name = name  # its server-side name (quoted)
        self.hold = hold
        self.in_transaction = in_transaction  # declared inside a transaction block
        self.wanted = True  # False once its cursor closed it (it may still exist)

    def fetch_sql(self, count: int) -> str:
        return f"FETCH {'ALL' if count < 0 else f'FORWARD {count}'} FROM {self.name}"


class Cursors:
    """The SQL cursors of one DB-API connection's lease, by server-side name."""

    def __init__(self) -> None:
        self._by_name: dict[str, Declared] = {}

    def __bool__(self) -> bool:
        """Whether a cursor is still wanted (the lease must then be kept)."""
        return any(declared.wanted for declared in self._by_name.values())

    def new(self, hold: bool, in_transaction: bool) -> Declared:
        """A cursor with the lowest server-side name not in use on the lease."""
        index = 0
        while quote_ident(f"{CURSOR_PREFIX}{index}") in self._by_name:
            index += 1
        declared = Declared(quote_ident(f"{CURSOR_PREFIX}{index}"), hold, in_transaction)
        self._by_name[declared.name] = declared
        return declared

    def exists(self, declared: Declared) -> bool:
        return self._by_name.get(declared.name) is declared

    def forget(self, declared: Declared) -> None:
        if self.exists(declared):
            del self._by_name[declared.name]

    def transaction_ended(self, committed: bool) -> list[Declared]:
        """Forget what the transaction's end closed on the server; the held cursors it
        left that nobody wants any more (to close) are returned."""
        for declared in list(self._by_name.values()):
            declared_inside, declared.in_transaction = declared.in_transaction, False
            if not declared.hold or (declared_inside and not committed):
                del self._by_name[declared.name]
        return [declared for declared in self._by_name.values() if not declared.wanted]

    def clear(self) -> None:
        """The lease went back (its reset closed every cursor) or broke."""
        self._by_name.clear()


def declare(lease: CursorLease, cursors: Cursors, sql: str, values: Sequence[Any],
            hold: bool, batch: int) -> tuple[Declared, Result]:
    """DECLARE a cursor for ``sql`` on ``lease`` and FETCH its first ``batch`` rows."""
    declared = cursors.new(hold, lease.in_transaction)
    try:
        lease.query(f"DECLARE {declared.name} NO SCROLL CURSOR "
                    f"{'WITH HOLD ' if hold else ''}FOR {sql}", values)
    except BaseException:
        cursors.forget(declared)
        raise
    return declared, lease.command(declared.fetch_sql(batch))


def close_now(lease: CursorLease, cursors: Cursors, declared: Declared) -> None:
    """CLOSE a held cursor outside a transaction (one that is gone already is no error)."""
    cursors.forget(declared)
    try:
        lease.command(f"CLOSE {declared.name}")
    except DatabaseError:
        pass  # closed already (CLOSE ALL, DISCARD ALL): nothing is left to close


class ServerRows:
    """The rows of one named cursor: a batch in hand, the next ones fetched on demand."""

    def __init__(self, declared: Declared, first: Result, batch: int,
                 fetch: Callable[[Declared, int], Result],
                 done: Callable[[Declared], None]):
        self.declared = declared
        self.fields = first.fields
        self._rows: Sequence[Row] = first.rows
        self._at = 0
        self._batch = batch
        self._fetch = fetch  # (declared, count) -> the next rows (count < 0: all)
        self._done = done  # the cursor is not wanted any more
        self.exhausted = len(first.rows) < batch
        if self.exhausted:
            done(declared)

    def take(self, count: int) -> list[Row]:
        """Up to ``count`` rows (all that are left when ``count`` < 0)."""
        out = list(self._rows[self._at:] if count < 0 else
                   self._rows[self._at:self._at + count])
        self._at += len(out)
        while not self.exhausted and (count < 0 or len(out) < count):
            wanted = -1 if count < 0 else max(count - len(out), self._batch)
            result = self._fetch(self.declared, wanted)
            self._rows, self._at = result.rows, 0
            self.exhausted = wanted < 0 or len(result.rows) < wanted
            if self.exhausted:
                self._done(self.declared)
            more = list(self._rows if count < 0 else self._rows[:count - len(out)])
            self._at = len(more)
            out += more
        return out

    def close(self) -> None:
        if not self.exhausted:
            self.exhausted = True
            self._done(self.declared)


def check_open(cursors: Cursors, declared: Declared) -> None:
    if not cursors.exists(declared):
        raise InterfaceError(ENDED)
