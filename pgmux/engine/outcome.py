"""What follows a completed exchange: the engine's one decision after a reply, and the budget
of attempts a request may make.

Every driver asks the same question when an exchange ends: hand the reply to the caller,
build the request again, send it elsewhere, or fail. ``Engine.outcome`` answers it from the
exchange alone; ``RetryBudget`` bounds how often the answer may be "again". Both are
sans-IO: the pipelined, pinned and read-your-writes paths differ only in how they wait.
"""

from __future__ import annotations

import enum
from typing import Any

from pgmux._native import adopt
from pgmux.errors import OperationalError

POOLER_RETRIES = 4  # 42P05 / 26000 answers from a pooler's other server connections
DESCRIPTION_LIMIT = 16  # descriptions that changed, in a row, before a request gives up
DESCRIBED_LIMIT = 64  # descriptions of any kind (a loose bound: no loop, whatever they say)


class Outcome(enum.Enum):
    """What the caller of a completed exchange does next."""

    DONE = "done"  # the reply is the answer (rows or the server's error): hand it over
    DESCRIBED = "described"  # a prerequisite (a description, a type lookup): build again
    AWAITS = "awaits"  # answered, values not decoded yet: send follow_up(), then ask again
    STALE = "stale"  # a cached statement gone or its plan changed; nothing ran: build again
    CLASH = "clash"  # a pooler's server connection had (or lacked) the statement: again
    UNSENT = "unsent"  # never reached the wire: safe to send elsewhere
    LOST = "lost"  # the connection failed under it: raise its failure
    # STALE as the first statement of a transaction begun in the same write: nothing ran
    # in it, so roll it back, begin it again and build again (a pinned connection's)
    RESTART = "restart"


DONE, DESCRIBED, AWAITS, STALE, CLASH, UNSENT, LOST, RESTART = Outcome  # by name


class RetryBudget:
    """How many more attempts one request may make, by outcome.

    ``connections``: how many connections could take it (an unsent request is tried once
    on each). A stale statement is prepared again once per connection (``where``); past
    that, and for clashes, a pooler is handing out other server connections: a few
    attempts more. Descriptions are bounded too (the schema changing under a statement
    faster than it can be described ends in an error, not a loop): those that ``changed``
    what the statement's previous one said (the request knows: ``Engine.learned``), type
    lookups and descriptions of unknown content count towards ``DESCRIPTION_LIMIT``; one
    made again because a cache dropped it (nothing changed) is never taken for schema
    churn, and every one counts towards ``DESCRIBED_LIMIT``.
    """

    __slots__ = ("_unsent", "_connections", "_stale_on", "_clashes", "_changes",
                 "_descriptions")

    def __init__(self, connections: int = 1):
        self._connections = connections
        self._unsent = 0
        self._stale_on: list[Any] = []
        self._clashes = 0
        self._changes = 0
        self._descriptions = 0

    def allows(self, outcome: Outcome, where: Any = None, changed: bool = True) -> bool:
        """Whether the request may be built (and sent) again after ``outcome`` on ``where``;
        ``changed``: after a description, whether it said something else than the
        statement's previous one (or its content is unknown)."""
        if outcome is DESCRIBED or outcome is AWAITS:
            self._descriptions += 1
            if changed:
                self._changes += 1
            if self._changes > DESCRIPTION_LIMIT:
                raise OperationalError(
                    f"the statement's description changed {DESCRIPTION_LIMIT} times in a row "
                    "(the schema keeps changing under it)")
            if self._descriptions > DESCRIBED_LIMIT:
                raise OperationalError(
                    f"the statement was described {DESCRIBED_LIMIT} times without running")
            return True
        if outcome is UNSENT:
            self._unsent += 1
            return self._unsent < self._connections
        if outcome is STALE and where not in self._stale_on:
            self._stale_on.append(where)
            return True
        if outcome is STALE or outcome is CLASH:
            self._clashes += 1
            return self._clashes <= POOLER_RETRIES
        return False

adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
