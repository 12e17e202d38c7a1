"""The multiplexing guard: reject SQL that would change session state on a shared connection."""

# Theory of operation
# -------------------
# A pipeline connection runs many callers' statements, each as its own
# Parse/Bind/Execute/Sync unit and so its own implicit transaction. Whatever a
# statement leaves behind in the *session* (settings, prepared statements,
# cursors, temp tables, session advisory locks, sequence state, LISTEN, large
# object descriptors ...) would leak into the next caller's work, so such SQL
# must go through db.session() instead.
#
# The SQL scanner (pgmux.sql.scanner) blanks the insides of string literals,
# quoted identifiers, dollar quotes and comments, so the checks below are a
# handful of regular expressions over text in which every remaining word, ';'
# and '(' is real SQL. Verdicts are cached per SQL string: a repeated statement
# costs one dict lookup.
#
# Decisions:
# * Allowed leading keywords: SELECT INSERT UPDATE DELETE MERGE VALUES WITH
#   TABLE ("TABLE t" is "SELECT * FROM t"). Everything else (SET, BEGIN, SHOW,
#   EXPLAIN, DO, CALL, COPY, LISTEN, PREPARE, DECLARE, CREATE ...) is rejected.
# * Row locks (FOR UPDATE), data-modifying WITH, pg_advisory_xact_lock() and
#   the other _xact_ locks are fine: the unit is its own transaction.
# * Any SELECT ... INTO is rejected: it creates a table.
# * UPDATE/MERGE on pg_settings is rejected: it is SET in disguise.
# * Function names are matched whatever their schema (myschema.set_config(...)
#   is rejected too). Unquoted names fold to lower case; a quoted name is
#   resolved case-sensitively as the server does: "set_config"(...) IS
#   pg_catalog.set_config and is rejected, "SET_CONFIG"(...) is another function.
# * standard_conforming_strings: as the server reports it; the masking follows.
# * Large objects: the descriptor functions (lo_open, loread, ...) are rejected,
#   a descriptor is useless to the next unit; the self-contained ones
#   (lo_create, lo_import, lo_export, lo_unlink, lo_get, lo_put, lo_from_bytea)
#   are allowed.
# * The guard catches mistakes, it is not a security boundary: it cannot see
#   functions called from views, triggers, defaults or other functions.

from __future__ import annotations

import re
from collections.abc import Callable

from pgmux.cache import put_bounded
from pgmux.errors import UnsafeMultiplexError
from pgmux.sql.facts import CACHE_SIZE, MAX_CACHED_SQL
from pgmux.sql.scanner import (
    CALL,
    ID_CHAR,
    SETTINGS_WRITE,
    WHITESPACE,
    UnterminatedSQLError,
    leading_word,
    lex,
    several_statements,
)

__all__ = [
    "MODES",
    "SESSION_FUNCTIONS",
    "STRICT_FUNCTIONS",
    "Guard",
    "UnterminatedSQLError",
    "reject_reason",
]

MODES = ("default", "strict", "off")

ALLOWED_LEADING_KEYWORDS = frozenset(
    {"SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "VALUES", "WITH", "TABLE"}
)

# Functions whose effect outlives the statement's transaction.
SESSION_FUNCTIONS = frozenset(
    {
        "set_config",
        "setseed",
        "currval",
        "lastval",
        "pg_advisory_lock",
        "pg_advisory_lock_shared",
        "pg_try_advisory_lock",
        "pg_try_advisory_lock_shared",
        "pg_advisory_unlock",
        "pg_advisory_unlock_shared",
        "pg_advisory_unlock_all",
        "pg_replication_origin_session_setup",
        "pg_replication_origin_session_reset",
        "dblink_connect",
        "dblink_connect_u",
        "dblink_disconnect",
        "dblink_open",
        "dblink_close",
        "lo_open",
        "lo_close",
        "loread",
        "lowrite",
        "lo_lseek",
        "lo_lseek64",
        "lo_tell",
        "lo_tell64",
        "lo_truncate",
        "lo_truncate64",
    }
)

# Rejected by the strict guard only: they touch session state nothing else can see
# on the multiplexed path (nextval/setval feed lastval/currval; an exported
# snapshot dies with the unit's transaction).
STRICT_FUNCTIONS = frozenset({"nextval", "setval", "pg_export_snapshot"})

_MODE_FUNCTIONS = {
    "default": SESSION_FUNCTIONS,
    "strict": SESSION_FUNCTIONS | STRICT_FUNCTIONS,
    "off": frozenset(),
}

# ---------------------------------------------------------------------------
# Checks: each takes (masked, names, functions) and returns a reason or None.

_INTO = re.compile(
    f"(?<![{ID_CHAR}])(?:(insert|merge)\\s+)?into(?![{ID_CHAR}])", re.ASCII | re.IGNORECASE
)

_Check = Callable[[str, str, frozenset], "str | None"]


def _empty(masked: str, names: str, functions: frozenset) -> str | None:
    if not masked.strip(WHITESPACE + ";"):
        return "empty statement"
    return None


def _multiple_statements(masked: str, names: str, functions: frozenset) -> str | None:
    if several_statements(masked):
        return "multiple statements; use db.session() or separate calls"
    return None


def _leading_keyword(masked: str, names: str, functions: frozenset) -> str | None:
    word = leading_word(masked)
    if word is None:
        return "statement does not start with a keyword; use db.session()"
    keyword = word.upper()
    if keyword not in ALLOWED_LEADING_KEYWORDS:
        return f"leading keyword {keyword[:40]}; use db.session()"
    return None


def _select_into(masked: str, names: str, functions: frozenset) -> str | None:
    for match in _INTO.finditer(masked):
        if match.group(1) is None:
            return "SELECT INTO creates a table; use db.session()"
    return None


def _settings_write(masked: str, names: str, functions: frozenset) -> str | None:
    if SETTINGS_WRITE.search(names):
        return "writing pg_settings changes session settings; use db.session()"
    return None


def _session_functions(masked: str, names: str, functions: frozenset) -> str | None:
    for match in CALL.finditer(names):
        name = match.group(1).lower()
        if name in functions:
            if name in STRICT_FUNCTIONS:
                return f"{name}() is rejected by the strict guard; use db.session()"
            return f"session-level function {name}(); use db.session()"
    return None


_CHECKS: tuple[_Check, ...] = (
    _empty,
    _multiple_statements,
    _leading_keyword,
    _select_into,
    _settings_write,
    _session_functions,
)


def reject_reason(sql: str, mode: str = "default", standard_strings: bool = True) -> str | None:
    """Why ``sql`` may not run on the multiplexed path under ``mode``, or None (uncached)."""
    if mode not in _MODE_FUNCTIONS:
        raise ValueError(f"guard mode must be one of {', '.join(MODES)}; got {mode!r}")
    functions = _MODE_FUNCTIONS[mode]
    if mode == "off":
        return None
    try:
        masked, names = lex(sql, standard_strings)
    except UnterminatedSQLError as exc:
        return f"{exc}; the statement cannot be checked"
    for check in _CHECKS:
        reason = check(masked, names, functions)
        if reason is not None:
            return reason
    return None


class Guard:
    """Rejects session-mutating SQL before it reaches a pipeline connection.

    ``mode`` is "default", "strict" (also nextval, setval, pg_export_snapshot) or
    "off" (never rejects). Verdicts, rejections included, are cached per SQL string
    in a dict of at most ``cache_size`` entries that is cleared when full.
    """

    __slots__ = ("mode", "misses", "_cache", "_backslash_cache", "_cache_size", "_enabled")

    def __init__(self, mode: str = "default", cache_size: int = CACHE_SIZE):
        if mode not in MODES:
            raise ValueError(f"guard mode must be one of {', '.join(MODES)}; got {mode!r}")
        if cache_size < 1:
            raise ValueError("cache_size must be at least 1")
        self.mode = mode
        self.misses = 0  # statements judged (cache misses)
        self._cache: dict[str, str | None] = {}
        self._backslash_cache: dict[str, str | None] = {}  # standard_conforming_strings off
        self._cache_size = cache_size
        self._enabled = mode != "off"

    def __repr__(self) -> str:
        return f"Guard(mode={self.mode!r})"

    def check(self, sql: str, standard_strings: bool = True) -> None:
        """Raise UnsafeMultiplexError if ``sql`` may not be multiplexed.

        ``standard_strings``: the server's standard_conforming_strings is on.
        """
        if not self._enabled:
            return
        cache = self._cache if standard_strings else self._backslash_cache
        try:
            reason = cache[sql]
        except KeyError:
            reason = self._judge(sql, standard_strings, cache)
        if reason is not None:
            raise UnsafeMultiplexError(reason)

    def _judge(self, sql: str, standard_strings: bool, cache: dict[str, str | None]) -> str | None:
        if not isinstance(sql, str):
            raise TypeError(f"SQL must be str, not {type(sql).__name__}")
        self.misses += 1
        reason = reject_reason(sql, self.mode, standard_strings)
        if len(sql) <= MAX_CACHED_SQL:
            put_bounded(cache, sql, reason, self._cache_size)
        return reason
