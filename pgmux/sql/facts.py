"""What a statement's text tells before it is sent: its highest $n, whether it is a script."""

from __future__ import annotations

import re
from typing import TypeVar

from pgmux.cache import put_bounded
from pgmux.errors import InterfaceError
from pgmux.sql.scanner import ID_CHAR, mask_sql, several_statements

MAX_PARAMETERS = 65535  # the protocol's limit: what a statement of unknown text may take
CACHE_SIZE = 4096  # SQL strings whose verdict is kept, per cache
MAX_CACHED_SQL = 65536  # longer statements are judged every time, not kept alive

T = TypeVar("T")


def remember(cache: dict[str, T], sql: str, verdict: T) -> T:
    """Keep ``verdict`` on ``sql`` in one of the SQL-text caches (bounded; a text longer than
    ``MAX_CACHED_SQL`` is judged every time rather than kept alive); returns it."""
    if len(sql) <= MAX_CACHED_SQL:
        put_bounded(cache, sql, verdict, CACHE_SIZE)
    return verdict


_PLACEHOLDER = re.compile(f"(?<![{ID_CHAR}])\\$([0-9]+)", re.ASCII)


def highest_placeholder(sql: str) -> int | None:
    """The largest $n outside literals, identifiers and comments (0: none; None: unknown,
    because a literal or comment never ends and the server should say so)."""
    try:
        masked = mask_sql(sql)
    except ValueError:
        return None
    return max((int(n) for n in _PLACEHOLDER.findall(masked)), default=0)


_placeholders: dict[str, int | None] = {}  # SQL -> its highest $n (bounded, see below)
_scripts: dict[str, bool] = {}  # SQL -> whether it holds several statements (bounded)


def is_script(sql: str, standard_strings: bool = True) -> bool:
    """Whether ``sql`` holds more than one statement (only a simple Query can run those).

    SQL whose literal or comment never ends counts as one statement: the server says why.
    """
    if standard_strings:
        found = _scripts.get(sql)
        if found is not None:
            return found
    try:
        masked = mask_sql(sql, standard_strings)
    except ValueError:
        script = False
    else:
        script = several_statements(masked)
    if standard_strings and len(sql) <= MAX_CACHED_SQL:
        put_bounded(_scripts, sql, script, CACHE_SIZE)
    return script


def parameters_allowed(sql: str) -> int:
    """How many parameters ``sql`` can take: its highest $n (any number when unknown)."""
    try:
        highest = _placeholders[sql]
    except KeyError:
        highest = highest_placeholder(sql)
        if len(sql) <= MAX_CACHED_SQL:
            put_bounded(_placeholders, sql, highest, CACHE_SIZE)
    return MAX_PARAMETERS if highest is None else highest


_TRANSACTION_END = re.compile(
    r"\s*(commit|end|rollback|abort)(?:\s+(?:work|transaction))?(?:\s+and\s+no\s+chain)?"
    r"\s*;?\s*", re.ASCII | re.IGNORECASE)
_ends: dict[str, bool | None] = {}  # SQL -> ends_transaction's verdict (bounded)


def ends_transaction(sql: str) -> bool | None:
    """Whether ``sql`` ends the open transaction: True for its COMMIT (or END), False for
    its ROLLBACK (or ABORT), with WORK, TRANSACTION or AND NO CHAIN; None for anything else
    (ROLLBACK TO, ... AND CHAIN, COMMIT PREPARED ...). Cached."""
    try:
        return _ends[sql]
    except KeyError:
        pass
    try:
        match = _TRANSACTION_END.fullmatch(mask_sql(sql))
    except ValueError:
        match = None
    verdict = None if match is None else match.group(1).lower() in ("commit", "end")
    return remember(_ends, sql, verdict)


def check_parameter_count(sql: str, given: int) -> None:
    """Refuse surplus parameters before sending: the server accepts typed parameters a
    statement never uses, so the caller's mistake would pass unnoticed."""
    highest = parameters_allowed(sql)
    if given > highest:
        raise InterfaceError(f"{given} parameters given, but the statement uses {highest} "
                             f"(${highest} is the highest placeholder)")
