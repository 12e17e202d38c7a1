"""The example's tables: ``python -m celery_app.schema`` creates them (idempotent; DATABASE_URL).

``accounts`` hold balances that transfers move between them (their total never changes);
``notes`` take one row per ``record`` task; ``transfers`` log each committed transfer.
"""

from __future__ import annotations

import os

ACCOUNTS = 20
OPENING_BALANCE = 1_000


def schema_sql(accounts: int = ACCOUNTS, balance: int = OPENING_BALANCE) -> str:
    """The DDL, and ``accounts`` accounts of ``balance`` each unless there are some."""
    return f"""
CREATE TABLE IF NOT EXISTS accounts (
    id integer PRIMARY KEY, owner text NOT NULL, balance bigint NOT NULL);
CREATE TABLE IF NOT EXISTS notes (key integer PRIMARY KEY, note text NOT NULL);
CREATE TABLE IF NOT EXISTS transfers (
    id bigserial PRIMARY KEY, source integer NOT NULL REFERENCES accounts,
    target integer NOT NULL REFERENCES accounts, amount bigint NOT NULL);
INSERT INTO accounts (id, owner, balance)
    SELECT i, 'owner-' || i, {int(balance)} FROM generate_series(1, {int(accounts)}) i
    WHERE NOT EXISTS (SELECT 1 FROM accounts);
"""


def main() -> None:
    import psycopg2

    with psycopg2.connect(os.environ.get("DATABASE_URL", "")) as conn, conn.cursor() as cur:
        cur.execute(schema_sql())
    conn.close()
    print(f"accounts, notes and transfers ready ({ACCOUNTS} accounts)")


if __name__ == "__main__":
    main()
