"""psycopg2's exception tree, and pgmux's errors translated into it at the API's edge."""

from __future__ import annotations

from typing import Any

from pgmux import errors as pgmux_errors
from pgmux.errors import DIAGNOSTIC_FIELDS


class Warning(Exception):  # noqa: A001  (the PEP 249 name)
    """A database warning (psycopg2 reports none: notices go to ``connection.notices``)."""


class Error(Exception):
    """Base of psycopg2's errors: ``pgerror`` (the server's text), ``pgcode`` (SQLSTATE),
    ``cursor`` (the cursor that ran the statement), ``diag`` (every field)."""

    pgerror: str | None = None
    pgcode: str | None = None
    cursor: Any = None

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._fields: dict[str, str] = {}

    @property
    def diag(self) -> Diagnostics:
        """The server's error fields by psycopg2's names (``sqlstate``, ``message_primary``,
        ...), each None when absent or for an error that did not come from the server."""
        return Diagnostics(self)

    def __reduce__(self) -> tuple[Any, ...]:
        state = {"pgerror": self.pgerror, "pgcode": self.pgcode,
                 "_fields": getattr(self, "_fields", {})}
        return (type(self), self.args, state)

    def __setstate__(self, state: dict[str, Any] | None) -> None:
        self.__dict__.update(state or {})


class InterfaceError(Error):
    """A misuse of the interface rather than a database error: a closed connection or
    cursor, a call out of order."""


class DatabaseError(Error):
    """Base of the errors that come from the database (every server error is one)."""


class DataError(DatabaseError):
    """A value the server refused: out of range, of the wrong form, a division by zero
    (SQLSTATE class 22)."""


class OperationalError(DatabaseError):
    """The database's operation failed, not the program: a lost connection, a cancelled
    statement, an exhausted resource."""


class IntegrityError(DatabaseError):
    """A constraint refused the change: unique, foreign key, not null, check (SQLSTATE
    class 23)."""


class InternalError(DatabaseError):
    """The server's internal state: a transaction already aborted (25P02), an internal
    error (XX000)."""


class ProgrammingError(DatabaseError):
    """An error in the SQL: a syntax error, an unknown table or column, a privilege
    missing (SQLSTATE class 42, among others)."""


class NotSupportedError(DatabaseError):
    """Something the server or pgmux.psycopg2 does not support (SQLSTATE 0A000, or a
    psycopg2 feature tied to libpq)."""


class QueryCanceledError(OperationalError):
    """The statement was cancelled (SQLSTATE 57014, or pgmux gave up waiting)."""


class TransactionRollbackError(OperationalError):
    """The server rolled the transaction back (SQLSTATE class 40)."""


class Diagnostics:
    """``err.diag``: a server error's fields by name (``message_primary``,
    ``sqlstate``, ...), each None when the server did not send it."""

    def __init__(self, error: Error) -> None:
        if not isinstance(error, Error):
            raise TypeError("Diagnostics takes a psycopg2 Error")
        self._error = error  # kept alive as psycopg2's is (and its cursor with it)

    def __getattr__(self, name: str) -> str | None:
        code = DIAGNOSTIC_FIELDS.get(name)
        if code is None:
            raise AttributeError(f"'Diagnostics' object has no attribute {name!r}")
        return getattr(self.__dict__["_error"], "_fields", {}).get(code)


# SQLSTATE -> its class (pgmux.psycopg2.errors fills this), and the lookup it installs.
CLASSES_BY_SQLSTATE: dict[str, type[Error]] = {}
_class_lookup: list[Any] = [lambda code: DatabaseError]


def set_class_lookup(lookup: Any) -> None:
    """``lookup(sqlstate)`` -> the class of a server error (pgmux.psycopg2.errors')."""
    _class_lookup[0] = lookup


BY_NAME: dict[str, type[Error]] = {
    cls.__name__: cls for cls in (Error, InterfaceError, DatabaseError, DataError,
                                  OperationalError, IntegrityError, InternalError,
                                  ProgrammingError, NotSupportedError)}


def _pep249_name(cls: type) -> str:
    """The nearest PEP 249 class name in ``cls``'s MRO (pgmux's own classes included)."""
    for base in cls.__mro__:
        if base.__name__ in BY_NAME and base.__module__ == pgmux_errors.__name__:
            return base.__name__
    return "DatabaseError"


def server_error(fields: dict[str, str], query: str | None = None,
                 cursor: Any = None) -> Error:
    """The psycopg2 exception for a server ErrorResponse's ``fields``."""
    cls = _class_lookup[0](fields.get("C"))
    text = error_text(fields, query)
    severity = fields.get("S", "ERROR")
    error = cls(text[len(severity) + 3:] if text.startswith(severity + ":  ") else text)
    error.pgerror = text
    error.pgcode = fields.get("C")
    error._fields = dict(fields)
    error.cursor = cursor
    return error


def error_text(fields: dict[str, str], query: str | None) -> str:
    """The error as libpq prints it: severity and message, the statement's line with a
    caret under the error's position, DETAIL, HINT, QUERY and CONTEXT lines."""
    lines = [f"{fields.get('S', 'ERROR')}:  {fields.get('M', '')}"]
    position = fields.get("P")
    if position and query and position.isdigit():
        lines += _caret(query, int(position))
    for label, code in (("DETAIL", "D"), ("HINT", "H"), ("QUERY", "q"), ("CONTEXT", "W")):
        if fields.get(code):
            lines.append(f"{label}:  {fields[code]}")
    return "\n".join(lines) + "\n"


def _caret(query: str, position: int) -> list[str]:
    """libpq's ``LINE n: <text>`` and a caret under character ``position`` (1-based)."""
    before = query[:position - 1]
    number = before.count("\n") + 1
    start = before.rfind("\n") + 1
    end = query.find("\n", start)
    line = query[start:] if end < 0 else query[start:end]
    prefix = f"LINE {number}: "
    return [prefix + line, " " * (len(prefix) + position - 1 - start) + "^"]


NUL_IN_TEXT = "A string literal cannot contain NUL (0x00) characters."


def translate(exc: BaseException, query: str | None = None,
              cursor: Any = None) -> BaseException:
    """pgmux's exception as the psycopg2 exception an application catches."""
    if isinstance(exc, Error):
        return exc
    if isinstance(exc, pgmux_errors.DataError) and not getattr(exc, "fields", None) \
            and "NUL" in str(exc):
        return ValueError(NUL_IN_TEXT)
    fields = getattr(exc, "fields", None)
    if isinstance(exc, pgmux_errors.DatabaseError) and fields and "C" in fields:
        return server_error(fields, query, cursor)
    message = str(exc)
    cls: type[Error]
    if isinstance(exc, pgmux_errors.QueryTimeout):
        cls = QueryCanceledError
    else:
        cls = BY_NAME.get(_pep249_name(type(exc)), DatabaseError)
    error = cls(message)
    error.cursor = cursor
    if isinstance(exc, pgmux_errors.DatabaseError) and exc.sqlstate:
        error.pgcode = exc.sqlstate
    return error


def connect_error(error: Exception, host: str, port: str) -> Error:
    """A failure to connect as psycopg2 reports it: OperationalError, the server's words
    after libpq's ``connection to server at ... failed:``."""
    if isinstance(error, Error):
        return error
    fields = getattr(error, "fields", None) or getattr(error.__cause__, "fields", None)
    if isinstance(error, pgmux_errors.DatabaseError) and fields and "C" in fields:
        text = (f'connection to server at "{host}", port {port} failed: '
                f"{fields.get('S', 'FATAL')}:  {fields.get('M', '')}\n")
        failure = OperationalError(text)
        failure.pgcode = fields.get("C")
        failure._fields = dict(fields)
        return failure
    if isinstance(error, pgmux_errors.InterfaceError):
        return ProgrammingError(f"invalid dsn: {error}")
    return OperationalError(str(error))
