"""The exception hierarchy of pgmux and the mapping from SQLSTATE to exception class."""

from __future__ import annotations

from typing import Any

__all__ = [
    "Warning",
    "Error",
    "InterfaceError",
    "DatabaseError",
    "DataError",
    "OperationalError",
    "IntegrityError",
    "InternalError",
    "ProgrammingError",
    "NotSupportedError",
    "ProtocolError",
    "NotDispatchedError",
    "IndeterminateResultError",
    "UnsafeMultiplexError",
    "QueryTimeout",
    "PoolTimeout",
    "PipelineAborted",
]

# The PEP 249 tree, shared by pgmux's own API and pgmux.dbapi:
#
#   Warning
#   Error
#   +-- InterfaceError                  misuse of the API
#   |   +-- UnsafeMultiplexError
#   +-- DatabaseError                   server errors (by SQLSTATE class, below) and ...
#       +-- DataError (22), IntegrityError (23), InternalError (24, 25, 2B, 2D, XX),
#       |   ProgrammingError (42, 26, 3D, ...), NotSupportedError (0A)
#       +-- OperationalError            ... connection, network and availability failures
#           +-- ProtocolError, NotDispatchedError, IndeterminateResultError,
#               QueryTimeout, PoolTimeout, PipelineAborted
#
# SQLAlchemy wraps an exception by the first PEP 249 name in its MRO, so every class
# lands in the right sqlalchemy.exc class.


class Warning(Exception):  # noqa: A001  (the PEP 249 name)
    """PEP 249's warning class; pgmux reports server warnings as notices instead."""


class Error(Exception):
    """Base of everything pgmux raises."""


class InterfaceError(Error):
    """Misuse of the API: a closed client, the wrong greenlet, a bad argument."""


class UnsafeMultiplexError(InterfaceError):
    """Session-mutating SQL was offered to the multiplexed path."""


# ErrorResponse / NoticeResponse field codes -> attribute names.
FIELD_NAMES: dict[str, str] = {
    "S": "severity",
    "V": "severity_nonlocalized",
    "C": "sqlstate",
    "M": "message",
    "D": "detail",
    "H": "hint",
    "P": "position",
    "p": "internal_position",
    "q": "internal_query",
    "W": "where",
    "s": "schema_name",
    "t": "table_name",
    "c": "column_name",
    "d": "data_type_name",
    "n": "constraint_name",
    "F": "file",
    "L": "line",
    "R": "routine",
}


class DatabaseError(Error):
    """An error from the database: a server ErrorResponse, whose every field is an
    attribute (or None), or one of pgmux's own failures below it (no fields)."""

    sqlstate: str | None = None
    severity: str | None = None
    severity_nonlocalized: str | None = None
    message: str | None = None
    detail: str | None = None
    hint: str | None = None
    position: str | None = None
    internal_position: str | None = None
    internal_query: str | None = None
    where: str | None = None
    schema_name: str | None = None
    table_name: str | None = None
    column_name: str | None = None
    data_type_name: str | None = None
    constraint_name: str | None = None
    file: str | None = None
    line: str | None = None
    routine: str | None = None
    statement_index: int | None = None  # of an atomic unit: which statement failed (0-based)

    def __init__(self, message: str | None = None, fields: dict[str, str] | None = None):
        self.fields: dict[str, str] = dict(fields or {})
        for code, value in self.fields.items():
            name = FIELD_NAMES.get(code)
            if name is not None:
                setattr(self, name, value)
        if message is not None:
            self.message = message
        if self.fields:
            super().__init__(self._describe())
        else:  # pgmux's own failure: the message alone
            super().__init__(*(() if message is None else (message,)))

    # psycopg's names for the same facts ------------------------------------------------
    @property
    def pgcode(self) -> str | None:
        """psycopg2's name for ``sqlstate``."""
        return self.sqlstate

    @property
    def pgerror(self) -> str | None:
        """psycopg2's: the server's message as it printed it (severity, text, detail)."""
        return self._describe() if self.fields else None

    @property
    def diag(self) -> Diagnostic:
        """psycopg's ``diag``: the ErrorResponse fields by psycopg's names."""
        return Diagnostic(self.fields)

    def _describe(self) -> str:
        text = f"{self.severity or 'ERROR'}:  {self.message or ''}"
        if self.sqlstate:
            text += f" (SQLSTATE {self.sqlstate})"
        if self.detail:
            text += f"\nDETAIL:  {self.detail}"
        if self.hint:
            text += f"\nHINT:  {self.hint}"
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_database_error, (type(self), self.fields, self.args), self.__dict__)

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> DatabaseError:
        """Build the most specific subclass for the SQLSTATE in ``fields``."""
        return class_for_sqlstate(fields.get("C"))(fields=fields)


# psycopg's Diagnostic attribute -> ErrorResponse field code
DIAGNOSTIC_FIELDS = {
    "severity": "S", "severity_nonlocalized": "V", "sqlstate": "C", "message_primary": "M",
    "message_detail": "D", "message_hint": "H", "statement_position": "P",
    "internal_position": "p", "internal_query": "q", "context": "W", "schema_name": "s",
    "table_name": "t", "column_name": "c", "datatype_name": "d", "constraint_name": "n",
    "source_file": "F", "source_line": "L", "source_function": "R",
}


class Diagnostic:
    """An error's fields by psycopg's (and psycopg2's) ``diag`` names; None when absent."""

    __slots__ = ("_fields",)

    def __init__(self, fields: dict[str, str]):
        self._fields = fields

    def __getattr__(self, name: str) -> str | None:
        try:
            code = DIAGNOSTIC_FIELDS[name]
        except KeyError:
            raise AttributeError(name) from None
        return self._fields.get(code)

    def __repr__(self) -> str:
        return f"<pgmux.errors.Diagnostic {self._fields.get('C')}>"


def _rebuild_database_error(cls: type[DatabaseError], fields: dict[str, str],
                            args: tuple[Any, ...]) -> DatabaseError:
    if fields:
        return cls(fields=fields)
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    return error


class DataError(DatabaseError):
    """Bad data: a value out of range, invalid input, division by zero (SQLSTATE class 22)."""


class IntegrityError(DatabaseError):
    """A constraint was violated: unique, foreign key, not null, check (SQLSTATE class 23)."""


class InternalError(DatabaseError):
    """The database's internal state: an invalid transaction or cursor state (24, 25, 2B,
    2D), an internal error (XX)."""


class ProgrammingError(DatabaseError):
    """A mistake in the SQL: syntax, an undefined table or column, a privilege (42, ...)."""


class NotSupportedError(DatabaseError):
    """The database does not support what was asked (SQLSTATE class 0A)."""


class OperationalError(DatabaseError):
    """Connect, network and authentication failures; the server's connection, resource
    and operator-intervention errors (08, 53, 57, ...); timeouts."""


class ProtocolError(OperationalError):
    """The server, or something between us and it, broke the wire protocol."""


class NotDispatchedError(OperationalError):
    """The query never reached the wire: it is safe to retry."""


class IndeterminateResultError(OperationalError):
    """The query was sent but its Sync was never answered: retry only if idempotent."""


class QueryTimeout(OperationalError, TimeoutError):
    """The caller stopped waiting for a result.

    On a pinned connection the query was cancelled and ``sqlstate`` is
    ``"57014"`` when the server confirmed the cancellation.
    """


class PoolTimeout(OperationalError, TimeoutError):
    """No pinned connection or pipeline slot became free within ``acquire_timeout``."""


class PipelineAborted(OperationalError):
    """An earlier error in an explicit pipeline aborted this operation."""


from pgmux._sqlstate import CLASS_NAMES, CLASS_PARENTS, CODE_NAMES  # noqa: E402  (data)

# SQLSTATE class (first two characters) -> exception class, and full code -> class.
_by_class: dict[str, type[DatabaseError]] = {}
_by_code: dict[str, type[DatabaseError]] = {}


def _make_classes() -> None:
    module = globals()
    for class_code, name in CLASS_NAMES.items():
        parent = module[CLASS_PARENTS[class_code]]
        if name == parent.__name__:  # 22 DataError, 23 IntegrityError, XX InternalError
            cls = parent
        else:
            cls = type(name, (parent,), {"__module__": __name__, "sqlstate": None})
            cls.__doc__ = f"SQLSTATE class {class_code}."
            __all__.append(name)
        _by_class[class_code] = cls
        module[name] = cls
    for code, name in CODE_NAMES.items():
        base = _by_class.get(code[:2], DatabaseError)
        if name in module:  # a code that shares its class's name (e.g. 0A000)
            _by_code[code] = module[name]
            continue
        cls = type(name, (base,), {"__module__": __name__, "sqlstate": None})
        cls.__doc__ = f"SQLSTATE {code}."
        _by_code[code] = cls
        module[name] = cls
        __all__.append(name)


_make_classes()


def class_for_sqlstate(sqlstate: str | None) -> type[DatabaseError]:
    """The exception class for a SQLSTATE: exact code, else its class, else DatabaseError."""
    if not sqlstate:
        return DatabaseError
    return _by_code.get(sqlstate) or _by_class.get(sqlstate[:2]) or DatabaseError
