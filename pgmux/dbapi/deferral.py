"""Deferred pinning: which statements of a client's DB-API transactions may run multiplexed.

A DB-API transaction at READ COMMITTED starts unpinned: its plain reads
(``pgmux.sql.reads``) go multiplexed, and the first statement that needs the transaction
takes a pinned connection, with BEGIN written in front of it. What the text cannot tell,
the server can: whether a function the statement calls is volatile (``pg_proc``, looked
up on the multiplexed path the first time a name is met, and again after
``VOLATILITY_TTL``, so a function replaced with another volatility is noticed), and whether
the server's default isolation is READ COMMITTED (asked once per client). One ``Deferral``
serves every handle of a client.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from pgmux.client import Client
from pgmux.sql.reads import read_check

VOLATILITY_TTL = 60.0  # seconds a function's looked-up volatility is trusted
# Per name, whether any function of that name is volatile (or none exists: a name the
# catalog does not have could be an alias list, or a function made later).
VOLATILE_SQL = ("SELECT p.proname, bool_or(p.provolatile = 'v') FROM pg_catalog.pg_proc p "
                "WHERE p.proname = ANY($1::text[]) GROUP BY p.proname")
ISOLATION_SQL = "SELECT current_setting('default_transaction_isolation')"
DEFERRABLE_LEVELS = frozenset({"read committed", "read uncommitted"})  # one snapshot each

_deferrals: weakref.WeakKeyDictionary[Client, Deferral] = weakref.WeakKeyDictionary()


def deferral_for(client: Client) -> Deferral:
    """The client's ``Deferral`` (made on first use)."""
    found = _deferrals.get(client)
    if found is None:
        found = _deferrals[client] = Deferral()
    return found


class Deferral:
    """What one client's DB-API transactions may run before they pin (what it learned of
    the server; the client is passed in, so that this cache does not keep it alive)."""

    def __init__(self) -> None:
        self._volatile: dict[str, tuple[bool, float]] = {}  # name -> (volatile, looked up at)
        self._default_defers: bool | None = None

    def level_defers(self, client: Client, isolation: str | None) -> bool:
        """Whether a transaction of ``isolation`` (None: the server's default) has a snapshot
        per statement, so that its plain reads may run outside it."""
        if isolation is not None:
            return _level(isolation) in DEFERRABLE_LEVELS
        if self._default_defers is None:
            level = client.fetchval(ISOLATION_SQL)
            self._default_defers = _level(level) in DEFERRABLE_LEVELS
        return self._default_defers

    def needs_transaction(self, client: Client, sql: str) -> str | None:
        """Why ``sql`` must run in the pinned transaction, or None: it is a plain read."""
        check = read_check(sql)
        if check.needs is not None or not check.functions:
            return check.needs
        now = time.monotonic()
        known = self._volatile
        unknown = [name for name in check.functions
                   if (found := known.get(name)) is None or now - found[1] > VOLATILITY_TTL]
        if unknown:
            self._look_up(client, unknown, now)
        for name in sorted(check.functions):
            if known[name][0]:
                return f"{name}() is volatile (or not in pg_proc)"
        return None

    def _look_up(self, client: Client, names: list[str], now: float) -> None:
        rows = client.query(VOLATILE_SQL, [names]).rows
        found: dict[str, Any] = dict(rows)
        for name in names:
            self._volatile[name] = (found.get(name, True), now)


def _level(name: Any) -> str:
    return " ".join(str(name).lower().replace("_", " ").replace("-", " ").split())
