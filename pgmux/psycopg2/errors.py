"""psycopg2.errors: one exception class per SQLSTATE, and ``lookup(code)``."""

from __future__ import annotations

from pgmux.psycopg2._exceptions import (
    CLASSES_BY_SQLSTATE,
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    QueryCanceledError,
    TransactionRollbackError,
    Warning,
    set_class_lookup,
)
from pgmux.psycopg2._sqlstates import CODES

# SQLSTATE class -> the base of its exception classes (psycopg2's mapping)
_CLASS_BASES: dict[str, type[Error]] = {
    "08": OperationalError, "0A": NotSupportedError, "20": ProgrammingError,
    "21": ProgrammingError, "22": DataError, "23": IntegrityError, "24": InternalError,
    "25": InternalError, "26": OperationalError, "27": OperationalError,
    "28": OperationalError, "2B": InternalError, "2D": InternalError, "2F": InternalError,
    "34": OperationalError, "38": InternalError, "39": InternalError, "3B": InternalError,
    "3D": ProgrammingError, "3F": ProgrammingError, "40": TransactionRollbackError,
    "42": ProgrammingError, "44": ProgrammingError, "53": OperationalError,
    "54": OperationalError, "55": OperationalError, "57": OperationalError,
    "58": OperationalError, "F0": InternalError, "HV": OperationalError,
    "P0": InternalError, "XX": InternalError,
}
_SPECIAL_BASES: dict[str, type[Error]] = {"57014": QueryCanceledError}

_by_code = CLASSES_BY_SQLSTATE


def _base_for(code: str) -> type[Error]:
    return _SPECIAL_BASES.get(code) or _CLASS_BASES.get(code[:2], DatabaseError)


def _make_classes() -> None:
    module = globals()
    for code, _, name in CODES:
        if not name:
            continue
        cls = type(name, (_base_for(code),), {"__module__": __name__, "sqlstate": code})
        _by_code[code] = cls
        module[name] = cls


_make_classes()


def lookup(code: str) -> type[Error]:
    """The exception class of SQLSTATE ``code``; KeyError for an unknown one."""
    try:
        return _by_code[code]
    except KeyError:
        raise KeyError(f"unknown error code: {code}") from None


def class_for(code: str | None) -> type[Error]:
    """The class to raise for ``code``: its own, else its SQLSTATE class's base."""
    if not code:
        return DatabaseError
    return _by_code.get(code) or _base_for(code)


set_class_lookup(class_for)


__all__ = ["DatabaseError", "DataError", "Error", "IntegrityError", "InterfaceError",
           "InternalError", "NotSupportedError", "OperationalError", "ProgrammingError",
           "QueryCanceledError", "TransactionRollbackError", "Warning", "lookup",
           *[name for _, _, name in CODES if name]]
