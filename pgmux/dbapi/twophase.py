"""Two-phase commit for pgmux.dbapi: PEP 249's ``xid()`` and ``tpc_*`` methods.

A TPC transaction is an ordinary transaction of the handle (BEGIN written with its first
statement) until ``tpc_prepare()`` runs ``PREPARE TRANSACTION``: from then on it belongs
to the server, not to the session, so the handle gives its pinned connection back at
once. ``COMMIT PREPARED`` / ``ROLLBACK PREPARED`` then run on a pinned connection with no
transaction open (PostgreSQL refuses them inside a transaction block), whichever one the
pool lends. A PREPARE that fails, or that finds the transaction failed (the server then
rolls it back), prepares nothing, and ``tpc_rollback()`` ends what is left; a prepared
transaction stays prepared until it is committed or rolled back, here, from another
connection (``tpc_recover``), or by an administrator.

Transaction ids are psycopg2's: ``Xid(format_id, gtrid, bqual)`` is stored as the gid
``"<format_id>_<base64 gtrid>_<base64 bqual>"``; a plain string is a gid as it is, and a
gid read back that is not in that form gives an ``Xid`` with ``format_id`` None.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pgmux.errors import InterfaceError, InternalError, ProgrammingError

_T = TypeVar("_T")
_XA_GID = re.compile(r"(\d+)_([A-Za-z0-9+/=]*)_([A-Za-z0-9+/=]*)\Z")
_MAX_XID_PART = 64  # bytes of gtrid and bqual (XA's limit; the gid itself holds 200)


class Xid:
    """A transaction id: PEP 249's (format_id, gtrid, bqual) triple, also indexable as
    one; ``prepared``, ``owner`` and ``database`` are set on those ``tpc_recover`` lists."""

    __slots__ = ("format_id", "gtrid", "bqual", "prepared", "owner", "database")

    def __init__(self, format_id: int | None, gtrid: str, bqual: str | None = None, *,
                 prepared: dt.datetime | None = None, owner: str | None = None,
                 database: str | None = None) -> None:
        if format_id is not None:
            if not 0 <= format_id < 2**31:
                raise ProgrammingError("format_id must be a non-negative 32-bit integer")
            for part in (gtrid, bqual or ""):
                if len(part.encode()) > _MAX_XID_PART:
                    raise ProgrammingError(f"gtrid and bqual may hold {_MAX_XID_PART} bytes")
        self.format_id, self.gtrid, self.bqual = format_id, gtrid, bqual
        self.prepared, self.owner, self.database = prepared, owner, database

    @classmethod
    def from_string(cls, gid: str, **details: Any) -> Xid:
        """The Xid a gid stands for (an unparsed one when it is not in the XA form)."""
        match = _XA_GID.match(gid)
        if match is not None:
            try:
                gtrid = base64.b64decode(match.group(2), validate=True).decode()
                bqual = base64.b64decode(match.group(3), validate=True).decode()
                return cls(int(match.group(1)), gtrid, bqual, **details)
            except (binascii.Error, UnicodeDecodeError, ProgrammingError):
                pass
        return cls(None, gid, None, **details)

    def gid(self) -> str:
        """The transaction's name on the server."""
        if self.format_id is None:
            return self.gtrid
        gtrid = base64.b64encode(self.gtrid.encode()).decode()
        bqual = base64.b64encode((self.bqual or "").encode()).decode()
        return f"{self.format_id}_{gtrid}_{bqual}"

    def _triple(self) -> tuple[int | None, str, str | None]:
        return self.format_id, self.gtrid, self.bqual

    def __getitem__(self, index: int) -> Any:
        return self._triple()[index]

    def __len__(self) -> int:
        return 3

    def __iter__(self) -> Any:
        return iter(self._triple())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Xid):
            return self._triple() == other._triple()
        if isinstance(other, tuple):
            return self._triple() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._triple())

    def __str__(self) -> str:
        return self.gid()

    def __repr__(self) -> str:
        if self.format_id is None:
            return f"Xid.from_string({self.gtrid!r})"
        return f"Xid({self.format_id!r}, {self.gtrid!r}, {self.bqual!r})"


def as_xid(xid: Any) -> Xid:
    """An Xid from what a caller passes: an Xid, a (format_id, gtrid, bqual) triple, or a
    gid string."""
    if isinstance(xid, Xid):
        return xid
    if isinstance(xid, str):
        return Xid.from_string(xid)
    if isinstance(xid, tuple) and len(xid) == 3:
        return Xid(*xid)
    raise InterfaceError(f"a transaction id is an Xid, a triple or a str, not "
                         f"{type(xid).__qualname__}")


def gid_literal(xid: Xid) -> str:
    """The gid as an SQL string literal (an escape string: right whatever
    standard_conforming_strings says). Any text the server takes is a gid, the empty one
    too; its length is the server's to judge (PostgreSQL's limit is 199 bytes). NUL cannot
    be sent at all."""
    gid = xid.gid()
    if "\x00" in gid:
        raise ProgrammingError("a transaction id cannot hold a NUL character")
    return "E'" + gid.replace("\\", "\\\\").replace("'", "\\'") + "'"


_RECOVER_SQL = ("SELECT gid, prepared, owner, database FROM pg_catalog.pg_prepared_xacts "
                "WHERE database = pg_catalog.current_database() ORDER BY prepared")


class TwoPhaseCommit:
    """The ``tpc_*`` methods of ``pgmux.dbapi.Connection`` (see the module's docstring)."""

    _tpc_xid: Xid | None = None  # the TPC transaction begun, until it ends
    _tpc_prepared = False

    if TYPE_CHECKING:  # what pgmux.dbapi.connection.Connection provides
        _autocommit: bool

        @property
        def in_transaction(self) -> bool: ...
        def _check_open(self) -> None: ...
        def _check_usable(self) -> None: ...
        def _on_lease(self, work: Callable[[Any], _T], begin: bool = True) -> _T: ...
        def _peek(self, sql: str) -> Any: ...
        def _end(self, commit: bool) -> None: ...
        def _forget_transaction(self) -> None: ...

    def xid(self, format_id: int, gtrid: str, bqual: str) -> Xid:
        """A transaction id for ``tpc_begin`` (PEP 249)."""
        return Xid(format_id, gtrid, bqual)

    def tpc_begin(self, xid: Any) -> None:
        """Begin a TPC transaction named ``xid`` (an Xid, a triple or a gid string); its
        statements run in one transaction, as after ``commit()``."""
        self._check_open()
        if self._autocommit:
            raise ProgrammingError("tpc_begin() cannot be used in autocommit mode")
        if self._tpc_xid is not None or self.in_transaction:
            raise ProgrammingError("tpc_begin() must be called outside a transaction")
        found = as_xid(xid)
        gid_literal(found)  # a bad id fails now, not at PREPARE
        self._tpc_xid, self._tpc_prepared = found, False

    def tpc_prepare(self) -> None:
        """PREPARE TRANSACTION: the first phase. The transaction then belongs to the
        server; nothing else runs on this handle until tpc_commit()/tpc_rollback()."""
        xid = self._tpc_current("tpc_prepare")
        if self._tpc_prepared:
            raise ProgrammingError("tpc_prepare() was already called for this transaction")
        sql = f"PREPARE TRANSACTION {gid_literal(xid)}"
        done = self._on_lease(lambda lease: lease.query(sql))  # a failure: tpc_rollback()
        self._forget_transaction()  # it ended on the server: prepared, or rolled back
        if done.command != "PREPARE TRANSACTION":  # "ROLLBACK": the transaction had failed
            raise InternalError("the transaction had failed: PREPARE TRANSACTION rolled it "
                                "back; nothing was prepared")
        self._tpc_prepared = True

    def tpc_commit(self, xid: Any = None) -> None:
        """Commit the TPC transaction: COMMIT PREPARED once prepared, a plain COMMIT
        before (one phase). With ``xid``: commit that prepared transaction (recovery),
        outside any transaction of this handle."""
        self._tpc_finish(xid, commit=True)

    def tpc_rollback(self, xid: Any = None) -> None:
        """Roll the TPC transaction back (ROLLBACK PREPARED once prepared); with ``xid``:
        roll that prepared transaction back (recovery)."""
        self._tpc_finish(xid, commit=False)

    def tpc_recover(self) -> list[Xid]:
        """The transactions prepared in this database and not finished, oldest first."""
        rows = self._peek(_RECOVER_SQL).rows
        return [Xid.from_string(gid, prepared=prepared, owner=owner, database=database)
                for gid, prepared, owner, database in rows]

    # -- the handle's part -------------------------------------------------------------------

    def _tpc_finish(self, xid: Any, commit: bool) -> None:
        self._check_usable()
        if xid is not None:
            if self._tpc_xid is not None or self.in_transaction:
                raise ProgrammingError("tpc_commit(xid) and tpc_rollback(xid) must be called "
                                       "outside a transaction")
            self._run_prepared(as_xid(xid), commit)
            return
        current = self._tpc_current("tpc_commit" if commit else "tpc_rollback")
        prepared = self._tpc_prepared
        self._tpc_xid, self._tpc_prepared = None, False
        if prepared:
            self._run_prepared(current, commit)
        else:
            self._end(commit)

    def _run_prepared(self, xid: Xid, commit: bool) -> None:
        sql = f"{'COMMIT' if commit else 'ROLLBACK'} PREPARED {gid_literal(xid)}"
        self._on_lease(lambda lease: lease.execute(sql), begin=False)

    def _tpc_current(self, what: str) -> Xid:
        self._check_usable()
        if self._tpc_xid is None:
            raise ProgrammingError(f"{what}() needs a transaction begun with tpc_begin()")
        return self._tpc_xid

    def _check_no_tpc(self, what: str) -> None:
        """PEP 249: commit()/rollback() are errors inside a TPC transaction."""
        if self._tpc_xid is not None:
            raise ProgrammingError(f"{what}() cannot be used during a two-phase transaction; "
                                   "use tpc_commit() or tpc_rollback()")

    def _check_not_prepared(self) -> None:
        """PEP 249: after tpc_prepare() no statement runs until the transaction ends."""
        if self._tpc_prepared:
            raise ProgrammingError("the two-phase transaction is prepared: only "
                                   "tpc_commit() or tpc_rollback() may follow")
