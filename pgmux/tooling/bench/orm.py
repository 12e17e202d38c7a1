"""The ``orm`` family: SQLAlchemy ORM, a ``Session`` per request, default isolation.

The tables are pgbench's at scale 1 (``pgbench -i -s 1``: 100,000 accounts), a set of their
own so that the writes here leave the TPC-B books of ``tpcb_unit`` alone. Every client
holds ``connections`` server connections in all, opened before the warm-up:

* ``orm-pgmux``: ``postgresql+pgmux``; of the ``connections``, ``ORM_PIPELINE`` are
  pipelined and the rest pinned (``orm_split``; 4 -> 1 + 3, 2 -> 1 + 1);
* ``orm-psycopg2``: ``postgresql+psycopg2`` with psycogreen, ``QueuePool(connections)``;
* ``orm-psycopg3``: ``postgresql+psycopg``, ``QueuePool(connections)``.

One operation is one request: ``orm_read`` gets an account by primary key and closes the
session; ``orm_write`` gets one, adds 1 to its balance, commits; ``orm_mixed`` does four
reads to one write (each greenlet in turn, from a random start). The write adds through
SQL (``abalance = abalance + 1``), so concurrent writes of one account lose nothing and
the sum of the balances grows by exactly the number of committed writes (what the tests
check). Each operation returns its kind ("read" or "write"), counted apart.
``orm_sessions`` is one burst of 200 read sessions that each stay open 50 ms after their
``get``, as while a template renders, all started at once; the operation's latency is
the burst's elapsed time (``orm-pgmux`` only; run it on 2 connections, so on
``pinned_size=1``).
"""

from __future__ import annotations

import functools
from random import Random
from typing import Any

import gevent
from gevent.event import Event

from pgmux.tooling.bench.clients import Adapter, PgmuxMultiplexed
from pgmux.tooling.bench.sqlalchemy import Psycopg2Driver, SqlAlchemyEngine, queue_pool
from pgmux.tooling.bench.workloads import Operation, TableSet, Workload, pgbench_tables

ORM = "pgmux_bench_orm"  # prefix of the family's pgbench tables: _accounts, _branches, ...
ORM_SCALE = 1
ORM_ACCOUNTS = 100_000 * ORM_SCALE
ORM_PIPELINE = 1  # orm-pgmux's pipelined connections; the others are pinned
READS_PER_WRITE = 4
BURST_SESSIONS, BURST_HOLD_SECONDS = 200, 0.05
START_TIMEOUT = 60.0
ORM_CLIENTS = ("orm-pgmux", "orm-psycopg2", "orm-psycopg3")
ORM_WORKLOAD_NAMES = ("orm_read", "orm_mixed", "orm_write", "orm_sessions")


@functools.cache
def account_model() -> Any:
    """The mapped class of the accounts table (made on first use: SQLAlchemy is optional)."""
    import sqlalchemy as sa
    from sqlalchemy.orm import DeclarativeBase, mapped_column

    class Base(DeclarativeBase):
        pass

    class Account(Base):  # pgbench_accounts (types given: no annotations to resolve here)
        __tablename__ = f"{ORM}_accounts"
        aid = mapped_column(sa.Integer, primary_key=True)
        bid = mapped_column(sa.Integer)
        abalance = mapped_column(sa.Integer)
        filler = mapped_column(sa.CHAR(84))

    return Account


def orm_split(connections: int) -> tuple[int, int]:
    """orm-pgmux's (pipeline_size, pinned_size) for ``connections`` server connections."""
    if connections < 2:
        raise ValueError("orm-pgmux needs 2 server connections at least (pipelined and pinned)")
    pipeline = min(ORM_PIPELINE, connections - 1)
    return pipeline, connections - pipeline


def split_text(connections: int) -> str:
    pipeline, pinned = orm_split(connections)
    return f"pipeline {pipeline} + pinned {pinned}"


# -- clients ----------------------------------------------------------------------------------


class OrmEngine(SqlAlchemyEngine):
    """The Engine and its ``sessions`` (a sessionmaker, default isolation); subclasses give
    the driver."""

    workloads: tuple[str, ...] | None = ORM_WORKLOAD_NAMES  # the family's only

    def __init__(self, dsn: str | None, connections: int, params: dict[str, Any],
                 pinned: bool = False):
        super().__init__(dsn, connections, params, pinned)
        from sqlalchemy.orm import sessionmaker

        self.sessions = sessionmaker(self.engine)
        self.account = account_model()

    def engine_args(self) -> dict[str, Any]:
        return queue_pool(self.connections)

    def start(self) -> None:
        """Check out every pooled connection at once, so the pool opens them all now."""
        checked_out: list[None] = []
        everyone = Event()

        def hold() -> None:
            with self.engine.connect() as conn:
                conn.execute(self.sa.text("SELECT 1"))
                checked_out.append(None)
                if len(checked_out) == self.connections:
                    everyone.set()
                everyone.wait(START_TIMEOUT)

        gevent.joinall([gevent.spawn(hold) for _ in range(self.connections)],
                       raise_error=True)


class OrmPgmux(OrmEngine):
    name = "orm-pgmux"
    description = (f"SQLAlchemy ORM, postgresql+pgmux, default isolation: of the server "
                   f"connections {ORM_PIPELINE} pipelined, the others pinned")
    drivername = "pgmux"
    multiplexed = True

    def connect(self) -> Any:
        import pgmux.dbapi

        pipeline, pinned = orm_split(self.connections)
        return pgmux.dbapi.connect(self.dsn, pipeline_size=pipeline, pinned_size=pinned,
                                   acquire_timeout=120.0, **self.params)

    def engine_args(self) -> dict[str, Any]:
        return {}  # the dialect's HandlePool: pgmux pools the server connections itself

    def start(self) -> None:
        handle = self.connect()
        self.db = handle.client
        handle.close()
        self.db.start()  # the pipelined connections; the pinned ones open when borrowed:
        pinned = orm_split(self.connections)[1]
        holders = [gevent.spawn(self._hold) for _ in range(pinned)]
        gevent.joinall(holders, raise_error=True)

    def _hold(self) -> None:
        with self.db.session():
            gevent.sleep(0)  # let the other holders take the other connections

    fill = PgmuxMultiplexed.fill

    def close(self) -> None:
        super().close()
        self.db.close(timeout=2.0)


class OrmPsycopg2(Psycopg2Driver, OrmEngine):
    name = "orm-psycopg2"
    description = "SQLAlchemy ORM, postgresql+psycopg2 + psycogreen, QueuePool, default isolation"


class OrmPsycopg3(OrmEngine):
    name = "orm-psycopg3"
    description = "SQLAlchemy ORM, postgresql+psycopg (psycopg 3), QueuePool, default isolation"
    drivername = "psycopg"
    modules = ("sqlalchemy", "psycopg")

    def connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.dsn or "", **self.params)


# -- workloads --------------------------------------------------------------------------------


def _read(sessions: Any, account: Any, aid: int) -> str:
    with sessions() as session:
        session.get(account, aid)
    return "read"


def _write(sessions: Any, account: Any, aid: int) -> str:
    with sessions() as session:
        found = session.get(account, aid)
        found.abalance = account.abalance + 1  # in SQL: concurrent writes lose nothing
        session.commit()
    return "write"


def _orm_read(client: Any, rng: Random, rows: int) -> Operation:
    sessions, account, randint = client.sessions, client.account, rng.randint
    return lambda: _read(sessions, account, randint(1, ORM_ACCOUNTS))


def _orm_write(client: Any, rng: Random, rows: int) -> Operation:
    sessions, account, randint = client.sessions, client.account, rng.randint
    return lambda: _write(sessions, account, randint(1, ORM_ACCOUNTS))


def _orm_mixed(client: Any, rng: Random, rows: int) -> Operation:
    """Four reads, then a write, in turn; each greenlet from a random point of the cycle."""
    sessions, account, randint = client.sessions, client.account, rng.randint
    cycle = READS_PER_WRITE + 1
    turn = [rng.randrange(cycle)]

    def op() -> str:
        turn[0] = (turn[0] + 1) % cycle
        run = _write if turn[0] == 0 else _read
        return run(sessions, account, randint(1, ORM_ACCOUNTS))

    return op


def _orm_sessions(client: Any, rng: Random, rows: int) -> Operation:
    """``rows`` read sessions started at once, each open for BURST_HOLD_SECONDS after its
    get; the operation ends when the last one has closed."""
    sessions, account, randint = client.sessions, client.account, rng.randint

    def hold(aid: int) -> None:
        with sessions() as session:
            session.get(account, aid)
            gevent.sleep(BURST_HOLD_SECONDS)  # the template renders, the session stays open

    def op() -> str:
        burst = [gevent.spawn(hold, randint(1, ORM_ACCOUNTS)) for _ in range(rows)]
        try:
            gevent.joinall(burst, raise_error=True)
        finally:  # stopped (the case's end) or one failed: end the others too
            gevent.killall(burst)
        return "burst"

    return op


ORM_WORKLOADS = (
    Workload("orm_read", "SQLAlchemy ORM: Session, get(Account, aid), close", _orm_read,
             tables=("orm",), unit="request", clients=ORM_CLIENTS, kinds=True),
    Workload("orm_mixed", f"SQLAlchemy ORM: {READS_PER_WRITE} reads to 1 write", _orm_mixed,
             tables=("orm",), unit="request", clients=ORM_CLIENTS, kinds=True),
    Workload("orm_write", "SQLAlchemy ORM: Session, get, abalance + 1, commit", _orm_write,
             tables=("orm",), unit="request", clients=ORM_CLIENTS, kinds=True),
    Workload("orm_sessions", f"SQLAlchemy ORM: {BURST_SESSIONS} read sessions at once, each "
             f"open {BURST_HOLD_SECONDS * 1000:g} ms", _orm_sessions, tables=("orm",),
             unit="burst", rows=BURST_SESSIONS, clients=("orm-pgmux",)),
)
ORM_BENCH_CLIENTS: dict[str, type[Adapter]] = {
    c.name: c for c in (OrmPgmux, OrmPsycopg2, OrmPsycopg3)}
ORM_TABLE_SETS: dict[str, TableSet] = {"orm": pgbench_tables(ORM, ORM_SCALE)}
