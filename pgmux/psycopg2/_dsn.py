"""psycopg2's connection-string helpers: ``parse_dsn``, ``make_dsn``, the DSN a connection
shows (password hidden) and psycopg2's errors for a bad one."""

from __future__ import annotations

import re
from typing import Any

from pgmux.errors import InterfaceError as PgmuxInterfaceError
from pgmux.io.dsn import KEYWORDS
from pgmux.io.dsn import parse_dsn as lex_dsn
from pgmux.psycopg2._exceptions import ProgrammingError

_PLAIN = re.compile(r"[^\s'\\]+")


def parse_dsn(dsn: Any) -> dict[str, str]:
    """A connection string (``key=value`` or URL) as a dict; ProgrammingError if it is
    malformed or names an unknown keyword (the message never shows a value)."""
    if not isinstance(dsn, str):
        raise TypeError(f"parse_dsn() argument must be str, not {type(dsn).__name__}")
    text = str(dsn)
    if text.startswith(("postgresql://", "postgres://")) and "?" in text:
        for pair in text.split("?", 1)[1].split("&"):
            if pair.count("=") != 1:
                raise ProgrammingError("invalid dsn: invalid URI query parameter")
    try:
        return lex_dsn(text)
    except PgmuxInterfaceError as exc:
        raise ProgrammingError(f"invalid dsn: {exc}") from None


def quote_value(value: Any) -> str:
    """A value as a ``key=value`` connection string writes it: backslashes and quotes
    escaped, quoted when empty or holding blanks."""
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    if text and not any(char.isspace() for char in text):
        return text
    return "'" + text + "'"


def make_dsn(dsn: str | None = None, **kwargs: Any) -> str:
    """A connection string from ``dsn`` and keyword arguments (which win); ``database``
    is ``dbname``; None values are left out. Checked: ProgrammingError for a bad one."""
    if dsn is None and not kwargs:
        return ""
    if not kwargs:
        parse_dsn(dsn)  # checked, returned as given
        return dsn or ""
    if "database" in kwargs:
        if "dbname" in kwargs:
            raise TypeError("you can't specify both 'database' and 'dbname' arguments")
        kwargs["dbname"] = kwargs.pop("database")
    params = {key: value for key, value in kwargs.items() if value is not None}
    base = parse_dsn(dsn) if dsn else {}
    base.update({key: str(value) for key, value in params.items()})
    text = " ".join(f"{key}={quote_value(value)}" for key, value in base.items())
    parse_dsn(text)
    return text


def hidden(dsn: str) -> str:
    """``dsn`` as a connection shows it: the password replaced with ``xxx`` (a URL is
    shown as ``key=value`` pairs)."""
    try:
        params = parse_dsn(dsn)
    except (ProgrammingError, TypeError):
        return re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1xxx", str(dsn))
    if "password" not in params and not dsn.startswith(("postgresql://", "postgres://")):
        return dsn
    shown = {key: ("xxx" if key == "password" else value) for key, value in params.items()}
    return " ".join(f"{key}={quote_value(value)}" for key, value in shown.items())


def known_keyword(key: str) -> bool:
    return key in KEYWORDS or key == "database"
