"""Which statements of a transaction are plain reads, that may run outside it, multiplexed."""

# Theory of operation
# -------------------
# Under READ COMMITTED every statement takes its own snapshot, so a statement that only
# reads sees, outside the transaction, what it would have seen inside it, as long as the
# transaction has written nothing yet. pgmux.dbapi runs such *plain reads* of a transaction
# multiplexed and pins a server connection at the first statement that needs the
# transaction (``read_check``'s ``needs``):
# * anything but SELECT, VALUES, TABLE and WITH (writes, SAVEPOINT, SET, LOCK, DO, CALL,
#   DECLARE, COPY, SHOW ...), several statements, SQL the scanner cannot read;
# * a write anywhere in it: INSERT, UPDATE, DELETE, MERGE (a data-modifying CTE too),
#   SELECT INTO;
# * a locking clause: FOR UPDATE, FOR NO KEY UPDATE, FOR SHARE, FOR KEY SHARE;
# * the transaction's clock (now(), current_timestamp, current_date, localtime, ...: one
#   transaction has one instant), its id (txid_current(), pg_current_xact_id()), a
#   sequence (nextval, currval, setval, lastval), a function named in quotes the scanner
#   cannot spell; and what the guard refuses on a shared connection (the caller asks it).
# Every other function it calls (``sql.calls``) is listed in ``functions``: the caller looks
# up their volatility in pg_proc (at run time, as types are looked up) and pins for a
# volatile one. What a view calls cannot be seen in the text: the relations it may name
# (``sql.relations``) are listed in ``relations``, and the caller pins for a view that calls
# a volatile function (through other views too) or a foreign table. What a trigger or an
# operator calls is not seen.

from __future__ import annotations

import re
from typing import NamedTuple

from pgmux.sql.calls import SEQUENCE_FUNCTIONS, calls
from pgmux.sql.facts import remember
from pgmux.sql.relations import Relation, UnreadableNameError, relations
from pgmux.sql.scanner import (
    ID_CHAR,
    WHITESPACE,
    UnterminatedSQLError,
    leading_word,
    lex,
    several_statements,
)

READ_KEYWORDS = frozenset({"SELECT", "VALUES", "TABLE", "WITH"})
CLOCK_WORDS = frozenset({"current_date", "current_time", "current_timestamp", "localtime",
                         "localtimestamp"})
CLOCK_FUNCTIONS = frozenset({"now", "transaction_timestamp"})
TRANSACTION_FUNCTIONS = frozenset({
    "txid_current", "txid_current_if_assigned", "pg_current_xact_id",
    "pg_current_xact_id_if_assigned", "pg_export_snapshot"})

_WORD = f"(?<![{ID_CHAR}])({{}})(?![{ID_CHAR}])"
_WRITE = re.compile(_WORD.format("insert|update|delete|merge"), re.ASCII | re.IGNORECASE)
_LOCKING = re.compile(
    f"(?<![{ID_CHAR}])for\\s+(?:update|no\\s+key\\s+update|share|key\\s+share)(?![{ID_CHAR}])",
    re.ASCII | re.IGNORECASE)
_INTO = re.compile(_WORD.format("into"), re.ASCII | re.IGNORECASE)
_CLOCK = re.compile(_WORD.format("|".join(sorted(CLOCK_WORDS))), re.ASCII | re.IGNORECASE)


class ReadCheck(NamedTuple):
    """What a statement needs of its transaction, as far as its text tells."""

    needs: str | None  # why it must run in the transaction; None: a plain read ...
    functions: frozenset[str]  # ... unless one of these (lower-case names) is volatile
    relations: frozenset[Relation]  # ... or one of these is a view that calls one


_checks: dict[str, ReadCheck] = {}


def read_check(sql: str) -> ReadCheck:
    """Whether ``sql`` is a plain read (see the module's comment), cached per SQL text."""
    try:
        return _checks[sql]
    except KeyError:
        return remember(_checks, sql, _judge(sql))


def _needs(reason: str) -> ReadCheck:
    return ReadCheck(reason, frozenset(), frozenset())


def _judge(sql: str) -> ReadCheck:
    try:
        masked, names = lex(sql)
    except UnterminatedSQLError:
        return _needs("the statement cannot be read (a literal or comment never ends)")
    if not masked.strip(WHITESPACE + ";"):
        return _needs("an empty statement")
    if several_statements(masked):
        return _needs("several statements")
    keyword = (leading_word(masked) or "").upper()
    if keyword not in READ_KEYWORDS:
        return _needs(f"{keyword[:40] or 'a statement without a keyword'} is not a plain read")
    if _LOCKING.search(masked):
        return _needs("a locking read holds its row locks to the transaction's end")
    write = _WRITE.search(masked)
    if write is not None:
        return _needs(f"{write.group(1).upper()} writes")
    if _INTO.search(masked):
        return _needs("SELECT INTO creates a table")
    clock = _CLOCK.search(masked)
    if clock is not None:
        return _needs(f"{clock.group(1).upper()} is the transaction's clock")
    try:
        named = relations(names, sql)
    except UnreadableNameError as exc:
        return _needs(str(exc))
    return _functions(names, named)


def _functions(names: str, named: frozenset[Relation]) -> ReadCheck:
    called = set()
    for _, name in calls(names):
        if name is None:
            return _needs("it calls a function by a quoted name")
        if name in CLOCK_FUNCTIONS:
            return _needs(f"{name}() is the transaction's clock")
        if name in SEQUENCE_FUNCTIONS:
            return _needs(f"{name}() uses a sequence")
        if name in TRANSACTION_FUNCTIONS:
            return _needs(f"{name}() needs the transaction's id")
        called.add(name)
    return ReadCheck(None, frozenset(called), named)
