"""Run by test_sqlalchemy.py: SQLAlchemy's ``postgresql+psycopg2`` dialect, ORM work from N greenlets.

    python -m psycopg2_apps.sqla_books DRIVER DSN GREENLETS OPERATIONS

One Engine (a QueuePool of GREENLETS connections, so no greenlet waits for one); each
greenlet runs its operations (psycopg2_apps.books), a Session each: lookups and totals,
notes written, transfers with both rows locked (``with_for_update()``), read and written
back. Prints one JSON line (books.Tally).
"""

# ruff: noqa: E402  -- gevent patched and psycopg2 chosen before SQLAlchemy loads
import sys

from psycopg2_apps.green import module_name, setup

setup(sys.argv[1])

import json
import time

import gevent
from sqlalchemy import BigInteger, ForeignKey, Integer, Text, create_engine, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from psycopg2_apps.books import ACCOUNTS, OPENING_BALANCE, Tally, operations


class Base(DeclarativeBase):
    pass


class Account(Base):
    __tablename__ = "accounts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    owner: Mapped[str] = mapped_column(Text)
    balance: Mapped[int] = mapped_column(BigInteger)


class Note(Base):
    __tablename__ = "notes"
    key: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    note: Mapped[str] = mapped_column(Text)


class Transfer(Base):
    __tablename__ = "transfers"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    source_id: Mapped[int] = mapped_column(ForeignKey("accounts.id"))
    target_id: Mapped[int] = mapped_column(ForeignKey("accounts.id"))
    amount: Mapped[int] = mapped_column(BigInteger)


def main(dsn: str, greenlets: int, count: int) -> None:
    url = "postgresql+psycopg2://" + dsn.split("://", 1)[1]
    engine = create_engine(url, pool_size=greenlets, max_overflow=0, pool_timeout=60)
    assert engine.dialect.driver == "psycopg2"
    assert engine.dialect.loaded_dbapi.__name__ == module_name()
    Base.metadata.create_all(engine)
    with Session(engine) as session, session.begin():
        session.add_all(Account(id=i, owner=f"owner-{i}", balance=OPENING_BALANCE)
                        for i in range(1, ACCOUNTS + 1))
    tally = Tally()

    def transfer(source: int, target: int, amount: int) -> None:
        with Session(engine) as session, session.begin():
            locked = {account.id: account for account in session.scalars(
                select(Account).where(Account.id.in_((source, target)))
                .order_by(Account.id).with_for_update())}
            locked[source].balance -= amount
            locked[target].balance += amount
            session.add(Transfer(source_id=source, target_id=target, amount=amount))
        tally.transfers.append((source, target, amount))

    def work(worker: int) -> None:
        for op in operations(worker, count):
            if op[0] == "lookup":
                with Session(engine) as session:
                    tally.looked_up(op[1], session.get(Account, op[1]).owner)
            elif op[0] == "total":
                with Session(engine) as session:
                    tally.totals.add(int(session.scalar(select(func.sum(Account.balance)))))
            elif op[0] == "note":
                with Session(engine) as session, session.begin():
                    session.add(Note(key=op[1], note=f"note {op[1]}"))
                tally.notes.append(op[1])
            else:
                transfer(*op[1:])
            tally.operations += 1

    started = time.monotonic()
    gevent.joinall([gevent.spawn(work, worker) for worker in range(greenlets)],
                   raise_error=True)
    elapsed = time.monotonic() - started
    engine.dispose()
    print(json.dumps(tally.result(module_name(), elapsed)))


if __name__ == "__main__":
    main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
