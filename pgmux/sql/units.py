"""What an atomic unit may not hold, whatever the guard's mode: transaction control (the
unit is the transaction), and statements that cannot run inside a transaction block."""

from __future__ import annotations

import re

from pgmux.cache import put_bounded
from pgmux.sql.facts import CACHE_SIZE, MAX_CACHED_SQL
from pgmux.sql.scanner import mask_sql

_TRANSACTION_CONTROL = frozenset({
    "BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT", "RELEASE",
})
# Leading words (and the next one) of what PostgreSQL refuses in a transaction block.
_OUTSIDE_A_TRANSACTION = re.compile(
    r"\s*(VACUUM|ALTER\s+SYSTEM|CREATE\s+DATABASE|DROP\s+DATABASE|CREATE\s+TABLESPACE|"
    r"DROP\s+TABLESPACE|REINDEX\s+(?:\(.*?\)\s*)?(?:SYSTEM|DATABASE)|"
    r"(?:CREATE|ALTER|DROP)\s+SUBSCRIPTION|CLUSTER\s*;?\s*$|DISCARD\s+ALL)\b",
    re.IGNORECASE | re.DOTALL)
_CONCURRENTLY = re.compile(
    r"\s*(?:CREATE\s+(?:UNIQUE\s+)?INDEX|DROP\s+INDEX|REINDEX|ALTER\s+TABLE)\b.*?"
    r"\bCONCURRENTLY\b", re.IGNORECASE | re.DOTALL)
_PREPARED_TRANSACTION = re.compile(r"\s*(?:PREPARE\s+TRANSACTION|COMMIT\s+PREPARED|"
                                   r"ROLLBACK\s+PREPARED)\b", re.IGNORECASE)
_WORD = re.compile(r"\s*([A-Za-z_]+)")
# Standard-strings SQL -> why it is refused, or None: what unit_refusal judged (a unit's
# builder looks a text up here first, and calls unit_refusal for one not found).
VERDICTS: dict[str, str | None] = {}


def unit_refusal(sql: str, standard_strings: bool = True) -> str | None:
    """Why ``sql`` cannot be a statement of an atomic unit, or None (the verdicts on
    standard-strings SQL are kept: a unit repeats its statements)."""
    if standard_strings:
        try:
            return VERDICTS[sql]
        except KeyError:
            reason = _judge(sql, standard_strings)
            if len(sql) <= MAX_CACHED_SQL:
                put_bounded(VERDICTS, sql, reason, CACHE_SIZE)
            return reason
    return _judge(sql, standard_strings)


def _judge(sql: str, standard_strings: bool) -> str | None:
    try:
        masked = mask_sql(sql, standard_strings)
    except ValueError:
        return None  # an unterminated literal or comment: the server says so
    word = _WORD.match(masked)
    leading = word.group(1).upper() if word else ""
    if leading in _TRANSACTION_CONTROL or _PREPARED_TRANSACTION.match(masked):
        return (f"{leading} is transaction control: an atomic unit is one transaction of "
                "its own (use db.transaction() to control one)")
    outside = _OUTSIDE_A_TRANSACTION.match(masked)
    if outside:
        what = " ".join(outside.group(1).upper().split())
    elif _CONCURRENTLY.match(masked):
        what = f"{leading} ... CONCURRENTLY"
    else:
        return None
    return (f"{what} cannot run inside a transaction block, and an atomic unit is one "
            "(run it on its own, in db.session())")
