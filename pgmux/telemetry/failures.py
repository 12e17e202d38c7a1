"""What an operation's error says in telemetry: ``error.type``, the SQLSTATE, pgmux's outcome."""

from __future__ import annotations

from pgmux.errors import IndeterminateResultError, NotDispatchedError
from pgmux.telemetry import names


def outcome_class(error: BaseException) -> str | None:
    if isinstance(error, NotDispatchedError):
        return "not_dispatched"
    if isinstance(error, IndeterminateResultError):
        return "indeterminate"
    return None


def error_type(error: BaseException) -> str:
    """``error.type``: the SQLSTATE the server (or pgmux) gave, else the exception's class."""
    sqlstate = getattr(error, "sqlstate", None)
    if sqlstate:
        return str(sqlstate)
    cls = type(error)
    return f"{cls.__module__}.{cls.__qualname__}"


def error_attributes(error: BaseException) -> dict[str, str]:
    """``error.type``, ``db.response.status_code`` (the SQLSTATE) and ``pgmux.outcome``."""
    attributes = {names.ERROR_TYPE: error_type(error)}
    sqlstate = getattr(error, "sqlstate", None)
    if sqlstate:
        attributes[names.DB_RESPONSE_STATUS_CODE] = str(sqlstate)
    outcome = outcome_class(error)
    if outcome is not None:
        attributes[names.OUTCOME] = outcome
    return attributes
