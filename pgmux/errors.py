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
    "Diagnostics",
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

    # -- psycopg2's names (compatibility aliases) ------------------------------------------

    @property
    def pgcode(self) -> str | None:
        """``sqlstate`` under psycopg2's name."""
        return self.sqlstate

    @property
    def pgerror(self) -> str | None:
        """The server's error text as psycopg2 gives it (libpq's: ``"ERROR:  message\\n"``,
        then ``DETAIL:``, ``HINT:``, ``QUERY:`` and ``CONTEXT:`` lines); None for pgmux's
        own failures, which have no server error."""
        if not self.fields:
            return None
        lines = [f"{self.severity or 'ERROR'}:  {self.message or ''}"]
        for label, value in (("DETAIL", self.detail), ("HINT", self.hint),
                             ("QUERY", self.internal_query), ("CONTEXT", self.where)):
            if value:
                lines.append(f"{label}:  {value}")
        return "\n".join(lines) + "\n"

    @property
    def diag(self) -> Diagnostics:
        """The error's fields under psycopg2's ``Diagnostics`` names (``message_primary``,
        ``statement_position``, ...); each None when the server did not send it."""
        return Diagnostics(self.fields)

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> DatabaseError:
        """Build the most specific subclass for the SQLSTATE in ``fields``."""
        return class_for_sqlstate(fields.get("C"))(fields=fields)


# psycopg2's Diagnostics attribute -> ErrorResponse field code.
DIAGNOSTIC_FIELDS: dict[str, str] = {
    "severity": "S",
    "severity_nonlocalized": "V",
    "sqlstate": "C",
    "message_primary": "M",
    "message_detail": "D",
    "message_hint": "H",
    "statement_position": "P",
    "internal_position": "p",
    "internal_query": "q",
    "context": "W",
    "schema_name": "s",
    "table_name": "t",
    "column_name": "c",
    "datatype_name": "d",
    "constraint_name": "n",
    "source_file": "F",
    "source_line": "L",
    "source_function": "R",
}


class Diagnostics:
    """A server error's fields by psycopg2's names (``err.diag``), as ``str`` or None."""

    __slots__ = ("_fields",)

    def __init__(self, fields: dict[str, str]) -> None:
        self._fields = fields

    def __getattr__(self, name: str) -> str | None:
        code = DIAGNOSTIC_FIELDS.get(name)
        if code is None:
            raise AttributeError(f"Diagnostics has no attribute {name!r}")
        return self._fields.get(code)

    def __dir__(self) -> list[str]:
        return sorted(DIAGNOSTIC_FIELDS)

    def __repr__(self) -> str:
        return f"<Diagnostics {self._fields.get('C')} {self._fields.get('M')!r}>"


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
