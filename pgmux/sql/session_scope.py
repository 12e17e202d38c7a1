"""Which SQL leaves session state behind that outlives its transaction, and what it takes
to clear it before a pinned connection's next borrower."""

# pgmux.dbapi pins a DB-API connection to one server connection from the first such
# statement until close(), so the state survives transactions as on a real connection;
# the pinned pool clears what it leaves (``residue``) before the next borrower.
# A false positive only costs multiplexing for that connection; a false negative loses
# the state at the next commit, so the rules err on the side of "session-scoped":
# * SET and RESET, except SET LOCAL / SET TRANSACTION / SET CONSTRAINTS (transaction
#   scoped); LISTEN, PREPARE, DISCARD, LOAD; DECLARE ... WITH HOLD;
# * temporary objects: CREATE [GLOBAL|LOCAL] TEMP[ORARY] ..., SELECT ... INTO TEMP,
#   anything naming the pg_temp schema;
# * SESSION_SCOPE_FUNCTIONS, set_config() whatever its is_local argument, and writing
#   pg_settings (SET in disguise).
# Each statement of a script is judged. What runs inside functions, DO blocks or
# procedures cannot be seen: for the reset (``residue``) DO, CALL and EXECUTE count as
# having left state, and so does a call of any function not known to leave nothing
# (``sql.calls.SESSION_FREE``: built-ins; a user function may run set_config, take a
# session advisory lock or create a temporary table); SQL PREPARE leaves statements of the
# user's among pgmux's own. What triggers, operators and views run is not seen.

from __future__ import annotations

import re

from pgmux.sql.calls import SEQUENCE_FUNCTIONS, SESSION_FREE, calls
from pgmux.sql.facts import parameters_allowed, remember
from pgmux.sql.scanner import CALL, SETTINGS_WRITE, UnterminatedSQLError, leading_word, lex

SESSION_SCOPE_KEYWORDS = frozenset({"SET", "RESET", "LISTEN", "PREPARE", "DISCARD", "LOAD"})
SESSION_SCOPE_FUNCTIONS = frozenset(
    {
        "set_config",
        "setseed",
        "pg_advisory_lock",
        "pg_advisory_lock_shared",
        "pg_try_advisory_lock",
        "pg_try_advisory_lock_shared",
        "pg_replication_origin_session_setup",
        "dblink_connect",
        "dblink_connect_u",
    }
)
# SET LOCAL/TRANSACTION/CONSTRAINTS, PREPARE TRANSACTION (two-phase): nothing outlives them
_SCOPED_SET = re.compile(r"\s*(?:set\s+(?:local|transaction|constraints)|prepare\s+transaction)"
                         r"(?![\w$])", re.ASCII | re.IGNORECASE)
_WITH_HOLD = re.compile(r"(?<![\w$])with\s+hold(?![\w$])", re.ASCII | re.IGNORECASE)
_TEMPORARY = re.compile(
    r"(?<![\w$])(?:create(?:\s+or\s+replace)?(?:\s+(?:global|local))?|into)"
    r"\s+temp(?:orary)?(?![\w$])|(?<![\w$])pg_temp\s*\.",
    re.ASCII | re.IGNORECASE,
)
_OPAQUE_KEYWORDS = frozenset({"DO", "CALL", "EXECUTE"})  # run what the text does not show
_session_scopes: dict[str, str | None] = {}
_residues: dict[str, int] = {}
_statement_facts: dict[str, tuple[int, int]] = {}

# What a statement leaves for the pinned pool to clear (``residue``), weakest first.
NO_RESIDUE = 0  # nothing: the next borrower may have the connection as it is
SEQUENCE_STATE = 1  # currval()/lastval() after nextval/setval/currval/lastval in the text
SESSION_STATE = 2  # settings, LISTEN, temporary objects, locks, cursors ...: clear them
USER_STATEMENTS = 3  # SQL PREPARE: the user's prepared statements, besides pgmux's own


def _statement_scope(statement: str, names: str) -> str | None:
    keyword = (leading_word(statement) or "").upper()
    if keyword in SESSION_SCOPE_KEYWORDS:
        if keyword in ("SET", "PREPARE") and _SCOPED_SET.match(statement):
            return None
        return f"{keyword} outlives the transaction"
    if keyword == "DECLARE" and _WITH_HOLD.search(statement):
        return "a cursor WITH HOLD outlives the transaction"
    if _TEMPORARY.search(names):
        return "a temporary object lives as long as the session"
    if SETTINGS_WRITE.search(names):
        return "writing pg_settings is SET"
    for match in CALL.finditer(names):
        name = match.group(1).lower()
        if name in SESSION_SCOPE_FUNCTIONS:
            return f"{name}() has a session-level effect"
    return None


def _statements(masked: str) -> list[slice]:
    """Where each statement of a (masked) script is: the text between its ';'s."""
    found, start = [], 0
    while start <= len(masked):
        end = masked.find(";", start)
        end = len(masked) if end == -1 else end
        found.append(slice(start, end))
        start = end + 1
    return found


def _judge_scope(sql: str) -> str | None:
    try:
        masked, names = lex(sql)
    except UnterminatedSQLError:
        return None  # the server refuses it: nothing is left behind
    for where in _statements(masked):
        reason = _statement_scope(masked[where], names[where])
        if reason is not None:
            return reason
    return None


def session_scope(sql: str) -> str | None:
    """Why ``sql`` leaves session state that outlives its transaction, or None (cached)."""
    try:
        return _session_scopes[sql]
    except KeyError:
        return remember(_session_scopes, sql, _judge_scope(sql))


def _judge_residue(sql: str) -> int:
    try:
        masked, names = lex(sql)
    except UnterminatedSQLError:
        return NO_RESIDUE  # the server refuses it
    found = NO_RESIDUE
    for where in _statements(masked):
        statement = masked[where]
        keyword = (leading_word(statement) or "").upper()
        if keyword == "PREPARE" and not _SCOPED_SET.match(statement):
            return USER_STATEMENTS
        if found < SESSION_STATE:
            if (keyword in _OPAQUE_KEYWORDS
                    or _statement_scope(statement, names[where]) is not None):
                found = SESSION_STATE
            else:
                found = max(found, _calls_residue(names[where]))
    return found


def _calls_residue(names: str) -> int:
    """What the functions a statement calls may leave: ``SEQUENCE_STATE`` after a sequence
    function, ``SESSION_STATE`` after any function not known to leave nothing."""
    found = NO_RESIDUE
    for schema, name in calls(names):
        if schema not in (None, "pg_catalog"):
            return SESSION_STATE
        if name in SEQUENCE_FUNCTIONS:
            found = SEQUENCE_STATE
        elif name not in SESSION_FREE:
            return SESSION_STATE
    return found


def residue(sql: str) -> int:
    """What ``sql`` may leave on a pinned connection for its next borrower (cached):
    ``NO_RESIDUE``, ``SEQUENCE_STATE`` (a sequence function in its text),
    ``SESSION_STATE`` (also for DO, CALL, EXECUTE and a call of a function not known to
    leave nothing, whose effects cannot be seen) or ``USER_STATEMENTS`` (SQL PREPARE)."""
    try:
        return _residues[sql]
    except KeyError:
        return remember(_residues, sql, _judge_residue(sql))


def statement_facts(sql: str) -> tuple[int, int]:
    """(how many parameters ``sql`` can take, its ``residue``): what a pinned connection
    checks before it sends a statement, in one cached look-up."""
    try:
        return _statement_facts[sql]
    except KeyError:
        return remember(_statement_facts, sql, (parameters_allowed(sql), residue(sql)))
