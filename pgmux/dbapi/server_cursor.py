"""Named (server-side) cursors: ``DECLARE ... FETCH`` on the DB-API connection's lease.

A named cursor is a SQL cursor, under its own name, on the pinned connection its DB-API
connection holds, so other statements may run between two fetches (Django's
``.iterator()`` saving each row it reads). Outside a transaction (autocommit) it is
declared ``WITH HOLD``, which the server materialises at the end of the DECLARE's own
implicit transaction; inside one it lives until the transaction ends unless
``withhold=True``. The connection keeps its lease while one of its cursors is open.

The DECLARE carries its parameters as literals (``pgmux.dbapi.quoting``), as psycopg
does for Django's named cursors, and goes with the first FETCH in one simple query: one
round trip, and nothing prepared or described for a text that names a cursor of the
moment. Later FETCHes are simple queries too.

Closing: when the lease goes back anyway (autocommit, no session state), its reset
(DISCARD ALL) closes the cursor; otherwise a CLOSE is sent. Inside a transaction, a
cursor declared before a ``ROLLBACK TO SAVEPOINT`` may be gone (a CLOSE of it would abort
the transaction): it is looked up in ``pg_cursors`` first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pgmux.dbapi.lease import Lease
from pgmux.engine.result import Result, Row
from pgmux.errors import DatabaseError, InterfaceError
from pgmux.session import quote_ident

ENDED = ("the server-side cursor was closed when its transaction ended (declare it "
         "outside a transaction, or with withhold=True, to read it after COMMIT)")
EXISTS_SQL = "SELECT 1 FROM pg_catalog.pg_cursors WHERE name = $1"


class Declared:
    """One SQL cursor a DB-API connection declared on its lease."""

    __slots__ = ("name", "ident", "hold", "in_transaction", "wanted", "uncertain")

    def __init__(self, name: str, hold: bool, in_transaction: bool):
        self.name = name
        self.ident = quote_ident(name)
        self.hold = hold
        self.in_transaction = in_transaction  # declared inside a transaction block
        self.wanted = True  # False once read to the end or closed by its cursor
        self.uncertain = False  # a ROLLBACK TO SAVEPOINT ran since: it may be gone

    def fetch_sql(self, count: int) -> str:
        return f"FETCH {'ALL' if count < 0 else f'FORWARD {count}'} FROM {self.ident}"


class Cursors:
    """The SQL cursors of one DB-API connection's lease, by name."""

    def __init__(self) -> None:
        self._by_name: dict[str, Declared] = {}

    def __bool__(self) -> bool:
        """Whether a cursor is still wanted (the lease must then be kept)."""
        by_name = self._by_name
        return bool(by_name) and any(declared.wanted for declared in by_name.values())

    def add(self, declared: Declared) -> None:
        self._by_name[declared.name] = declared

    def exists(self, declared: Declared) -> bool:
        return self._by_name.get(declared.name) is declared

    def forget(self, declared: Declared) -> None:
        if self.exists(declared):
            del self._by_name[declared.name]

    def savepoint_rolled_back(self) -> None:
        for declared in self._by_name.values():
            declared.uncertain = declared.uncertain or declared.in_transaction

    def transaction_ended(self, committed: bool) -> list[Declared]:
        """Forget what the transaction's end closed on the server; the held cursors it
        left that nobody wants any more (to close) are returned."""
        for declared in list(self._by_name.values()):
            declared_inside, declared.in_transaction = declared.in_transaction, False
            declared.uncertain = False
            if not declared.hold or (declared_inside and not committed):
                del self._by_name[declared.name]
        return [declared for declared in self._by_name.values() if not declared.wanted]

    def clear(self) -> None:
        """The lease went back (its reset closed every cursor) or broke."""
        self._by_name.clear()


def is_savepoint_rollback(sql: str) -> bool:
    """Whether ``sql`` is ``ROLLBACK TO [SAVEPOINT] ...`` (which closes cursors declared
    after the savepoint)."""
    words = sql[:40].split(None, 2)
    return (len(words) >= 2 and words[0].upper() == "ROLLBACK"
            and words[1].upper() == "TO")


def declare(lease: Lease, cursors: Cursors, name: str, sql: str, hold: bool,
            batch: int) -> tuple[Declared, Result]:
    """DECLARE cursor ``name`` for ``sql`` (its parameters in it as literals) and FETCH its
    first ``batch`` rows, in one round trip."""
    declared = Declared(name, hold, lease.in_transaction)
    lease.tell_wait()
    script = (f"DECLARE {declared.ident} NO SCROLL CURSOR {'WITH HOLD ' if hold else ''}"
              f"FOR {sql}; {declared.fetch_sql(batch)}")
    first = lease.command(script)
    cursors.add(declared)
    return declared, first


def close(lease: Lease, cursors: Cursors, declared: Declared) -> None:
    """CLOSE a cursor that may still exist, without failing a transaction if it does not."""
    cursors.forget(declared)
    if declared.uncertain and not lease.query(EXISTS_SQL, (declared.name,)).rows:
        return
    try:
        lease.command(f"CLOSE {declared.ident}")
    except DatabaseError:
        if lease.in_transaction:
            raise
        # outside a transaction nothing is harmed: closed already (CLOSE ALL, DISCARD ALL)


class ServerRows:
    """The rows of one named cursor: a batch in hand, the next ones fetched on demand."""

    def __init__(self, declared: Declared, first: Result, batch: int,
                 fetch: Callable[[Declared, int], Result],
                 done: Callable[[Declared, bool], None]):
        self.declared = declared
        self.fields = first.fields
        self._rows: Sequence[Row] = first.rows
        self._at = 0
        self._batch = batch
        self._fetch = fetch  # (declared, count) -> the next rows (count < 0: all)
        self._done = done  # (declared, closing): read to the end, or closed
        self.exhausted = len(first.rows) < batch
        if self.exhausted:
            done(declared, False)

    def take(self, count: int) -> list[Row]:
        """Up to ``count`` rows (all that are left when ``count`` < 0)."""
        out = list(self._rows[self._at:] if count < 0 else
                   self._rows[self._at:self._at + count])
        self._at += len(out)
        while not self.exhausted and (count < 0 or len(out) < count):
            wanted = -1 if count < 0 else max(count - len(out), self._batch)
            result = self._fetch(self.declared, wanted)
            self._rows = result.rows
            self.exhausted = wanted < 0 or len(result.rows) < wanted
            if self.exhausted:
                self._done(self.declared, False)
            more = list(self._rows if count < 0 else self._rows[:count - len(out)])
            self._at = len(more)
            out += more
        return out

    def close(self) -> None:
        """The cursor is not wanted any more (read or not)."""
        self.exhausted = True
        self._done(self.declared, True)


def check_open(cursors: Cursors, declared: Declared) -> None:
    if not cursors.exists(declared):
        raise InterfaceError(ENDED)
