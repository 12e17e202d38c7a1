"""The exception hierarchy of pgmux and the mapping from SQLSTATE to exception class."""

from __future__ import annotations

from typing import Any

__all__ = [
    "Error",
    "InterfaceError",
    "OperationalError",
    "ProtocolError",
    "NotDispatchedError",
    "IndeterminateResultError",
    "UnsafeMultiplexError",
    "QueryTimeout",
    "PoolTimeout",
    "PipelineAborted",
    "DatabaseError",
]


class Error(Exception):
    """Base of everything pgmux raises."""


class InterfaceError(Error):
    """Misuse of the API: a closed client, the wrong greenlet, a bad argument."""


class OperationalError(Error):
    """Connect, network and authentication failures."""


class ProtocolError(OperationalError):
    """The server, or something between us and it, broke the wire protocol."""


class NotDispatchedError(OperationalError):
    """The query never reached the wire: it is safe to retry."""


class IndeterminateResultError(OperationalError):
    """The query was sent but its Sync was never answered: retry only if idempotent."""


class UnsafeMultiplexError(InterfaceError):
    """Session-mutating SQL was offered to the multiplexed path."""


class QueryTimeout(Error, TimeoutError):
    """The caller stopped waiting for a result.

    On a pinned connection the query was cancelled and ``sqlstate`` is
    ``"57014"`` when the server confirmed the cancellation.
    """

    sqlstate: str | None = None


class PoolTimeout(Error, TimeoutError):
    """No pinned connection or pipeline slot became free within ``acquire_timeout``."""


class PipelineAborted(Error):
    """An earlier error in an explicit pipeline aborted this operation."""


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
    """An ErrorResponse from the server; every field is an attribute (or None)."""

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

    def __init__(self, message: str | None = None, fields: dict[str, str] | None = None):
        self.fields: dict[str, str] = dict(fields or {})
        for code, value in self.fields.items():
            name = FIELD_NAMES.get(code)
            if name is not None:
                setattr(self, name, value)
        if message is not None:
            self.message = message
        super().__init__(self._describe())

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
        return (_rebuild_database_error, (self.fields, self.message))

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> DatabaseError:
        """Build the most specific subclass for the SQLSTATE in ``fields``."""
        return class_for_sqlstate(fields.get("C"))(fields=fields)


def _rebuild_database_error(fields: dict[str, str], message: str | None) -> DatabaseError:
    return class_for_sqlstate(fields.get("C"))(message, fields)


from pgmux._sqlstate import CLASS_NAMES, CODE_NAMES  # noqa: E402  (data table)

# SQLSTATE class (first two characters) -> exception class, and full code -> class.
_by_class: dict[str, type[DatabaseError]] = {}
_by_code: dict[str, type[DatabaseError]] = {}


def _make_classes() -> None:
    module = globals()
    for class_code, name in CLASS_NAMES.items():
        cls = type(name, (DatabaseError,), {"__module__": __name__, "sqlstate": None})
        cls.__doc__ = f"SQLSTATE class {class_code}."
        _by_class[class_code] = cls
        module[name] = cls
        __all__.append(name)
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
