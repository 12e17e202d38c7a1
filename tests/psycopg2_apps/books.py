"""The books the ORM tests keep: accounts whose total never changes, notes, logged transfers.

Shared by the scripts (each greenlet's deterministic operations; the result they print) and
the tests (the checks on the database afterwards).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

ACCOUNTS = 20
OPENING_BALANCE = 1_000
TOTAL = ACCOUNTS * OPENING_BALANCE


def operations(worker: int, count: int) -> list[tuple]:
    """Greenlet ``worker``'s ``count`` operations, in turn: ("lookup", account),
    ("total",), ("note", key), ("transfer", source, target, amount); two different accounts
    per transfer, amounts small enough that no account runs dry."""
    out: list[tuple] = []
    for step in range(count):
        n = worker * count + step
        kind = step % 4
        if kind == 0:
            out.append(("lookup", n % ACCOUNTS + 1))
        elif kind == 1:
            out.append(("total",))
        elif kind == 2:
            out.append(("note", n))
        else:
            source = n * 7 % ACCOUNTS
            target = (source + 1 + n % (ACCOUNTS - 1)) % ACCOUNTS
            out.append(("transfer", source + 1, target + 1, n % 9 + 1))
    return out


class Tally:
    """What a script's greenlets saw: every lookup's owner checked, every total seen, the
    notes written and the transfers committed."""

    def __init__(self) -> None:
        self.operations = 0
        self.wrong_owners: list[tuple[int, str]] = []
        self.totals: set[int] = set()
        self.notes: list[int] = []
        self.transfers: list[tuple[int, int, int]] = []

    def looked_up(self, account: int, owner: str) -> None:
        if owner != f"owner-{account}":
            self.wrong_owners.append((account, owner))

    def result(self, module: str, seconds: float) -> dict[str, Any]:
        return {"module": module, "operations": self.operations, "seconds": round(seconds, 3),
                "wrong_owners": self.wrong_owners, "totals": sorted(self.totals),
                "notes": self.notes, "transfers": self.transfers}


def expected_balances(transfers: list[list[int]]) -> dict[int, int]:
    balances = dict.fromkeys(range(1, ACCOUNTS + 1), OPENING_BALANCE)
    for source, target, amount in transfers:
        balances[source] -= amount
        balances[target] += amount
    return balances


def check(server: Any, dbname: str, result: dict[str, Any], greenlets: int,
          per_greenlet: int) -> None:
    """The script ran every operation and saw the right answers; the database holds exactly
    the notes and transfers it committed, each transfer applied once (no lost update), and
    the total it started with."""
    planned = [op for worker in range(greenlets) for op in operations(worker, per_greenlet)]
    assert result["operations"] == len(planned)
    assert result["wrong_owners"] == []
    assert result["totals"] == [TOTAL]
    assert sorted(result["notes"]) == sorted(op[1] for op in planned if op[0] == "note")
    assert Counter(map(tuple, result["transfers"])) == Counter(
        op[1:] for op in planned if op[0] == "transfer")

    def rows(sql: str) -> list[list[str]]:
        return [line.split("|") for line in server.admin(sql, dbname=dbname).splitlines()]

    balances = {int(k): int(v) for k, v in rows("SELECT id, balance FROM accounts")}
    assert balances == expected_balances(result["transfers"])
    assert sum(balances.values()) == TOTAL
    assert Counter(tuple(map(int, row)) for row in rows(
        "SELECT source_id, target_id, amount FROM transfers")) == Counter(
        map(tuple, result["transfers"]))
    assert sorted(int(key) for (key,) in rows("SELECT key FROM notes")) == sorted(
        result["notes"])
