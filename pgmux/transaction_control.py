"""Transaction control, shared by sessions, atomic units and the DB-API: BEGIN and its
modes, what COMMIT and ROLLBACK mean when they fail, and the quoting of the names pgmux
writes itself (savepoints, channels)."""

from __future__ import annotations

from collections.abc import Callable

from pgmux._native import adopt
from pgmux.engine.result import Result
from pgmux.errors import (
    DatabaseError,
    IndeterminateResultError,
    InterfaceError,
    OperationalError,
)
from pgmux.io.pinned import PinnedConnection

_ISOLATION_LEVELS = {
    "serializable": "SERIALIZABLE",
    "repeatable read": "REPEATABLE READ",
    "read committed": "READ COMMITTED",
    "read uncommitted": "READ UNCOMMITTED",
}



def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier (exact, case-sensitive)."""
    if not name or "\x00" in name:
        raise InterfaceError("an identifier must be non-empty and free of NUL")
    return '"' + name.replace('"', '""') + '"'


def begin_statement(isolation: str | None, readonly: bool, deferrable: bool) -> str:
    if isolation is None and not readonly and not deferrable:
        return "BEGIN"
    modes = isolation_keywords(isolation, readonly, deferrable)
    return f"BEGIN {modes}" if modes else "BEGIN"


def isolation_keywords(isolation: str | None, readonly: bool, deferrable: bool) -> str:
    """The transaction modes of BEGIN or SET TRANSACTION ("" for the defaults)."""
    parts = []
    if isolation is not None:
        key = " ".join(isolation.lower().replace("_", " ").replace("-", " ").split())
        level = _ISOLATION_LEVELS.get(key)
        if level is None:
            raise InterfaceError(f"unknown isolation level {isolation!r}; use one of "
                                 + ", ".join(sorted(_ISOLATION_LEVELS)))
        parts.append(f"ISOLATION LEVEL {level}")
    if readonly:
        parts.append("READ ONLY")
    if deferrable:
        parts.append("DEFERRABLE")
    return " ".join(parts)


def commit_open(end: Callable[[str], Result]) -> None:
    """COMMIT through ``end``; a failure on the way is IndeterminateResultError, a failed
    transaction 25P02."""
    try:
        result = end("COMMIT")
    except IndeterminateResultError:
        raise
    except OperationalError as exc:
        if exc.fields:  # the server answered: COMMIT failed (e.g. 40001), nothing is unknown
            raise
        raise IndeterminateResultError(
            f"the connection failed during COMMIT ({exc}); the transaction may or may "
            "not have committed") from exc
    if result.command == "ROLLBACK":
        raise rolled_back_at_commit()


def rolled_back_at_commit() -> DatabaseError:
    """The error of a COMMIT that found its transaction failed (and rolled it back)."""
    return DatabaseError.from_fields({
        "S": "ERROR", "C": "25P02",
        "M": "the transaction had failed and was rolled back at COMMIT"})


def rollback_open(conn: PinnedConnection, end: Callable[[str], Result]) -> None:
    """ROLLBACK through ``end``, unless the connection broke mid-request (the pool
    replaces it then)."""
    if conn.broken is not None:
        return
    try:
        end("ROLLBACK")
    except Exception:
        pass  # the original exception matters; the pool resets or replaces the connection


adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
