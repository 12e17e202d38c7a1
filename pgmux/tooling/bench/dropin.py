"""psycopg2 code with a connection per greenlet: on pgmux's drop-in (``pgmux.psycopg2``), on
``pgmux.dbapi`` and on psycopg2 itself.

Code written for psycopg2 makes a connection per request, per worker or per task and runs
its statements through a cursor. Here each greenlet of a case takes a connection of its
own at its first operation and keeps it, with one cursor, to the end of the case. The
case's ``connections`` are the connections the code makes, all opened before the warm-up
(a greenlet beyond them opens one more); what they cost the server is the client's own:

* ``pgmux-psycopg2``: ``pgmux.psycopg2.connect()``, each a handle on the process's one
  shared client, with pgmux's defaults: 4 pipelined + 2 pinned server connections, however
  many connections the code makes;
* ``pgmux-dbapi``: ``pgmux.dbapi.connect()``, likewise (the drop-in's own base);
* ``psycopg2-per-greenlet``: psycopg2 with psycogreen's wait callback: a server connection
  each.

The workloads:

* ``cursor_select``: ``cursor.execute("SELECT %s", (n,))`` and ``fetchall()``, autocommit:
  what the drop-in's psycopg2 layer costs a statement over ``pgmux.dbapi``'s;
* ``psycopg2_read_tx``: a read transaction per request in psycopg2's default mode,
  ``with conn:`` around two point lookups (BEGIN ... COMMIT).
"""

from __future__ import annotations

from random import Random
from typing import Any

import gevent

from pgmux.tooling.bench.clients import Adapter, pipeline_fill
from pgmux.tooling.bench.workloads import ACCOUNT_ROWS, ACCOUNTS, Operation, Workload

SELECT_SQL = "SELECT %s"
LOOKUP_SQL = f"SELECT id, name, email, balance FROM {ACCOUNTS} WHERE id = %s"
BALANCE_SQL = f"SELECT balance FROM {ACCOUNTS} WHERE id = %s"
CURSOR_CLIENTS = ("pgmux-psycopg2", "pgmux-dbapi")
READ_TX_CLIENTS = ("pgmux-psycopg2", "psycopg2-per-greenlet")


class PerGreenlet(Adapter):
    """A connection per greenlet, opened through ``connect()`` (see the module's docstring).

    ``take(autocommit)`` gives the calling greenlet its connection and cursor: one of those
    opened by ``start()``, or a new one once they are all taken.
    """

    workloads: tuple[str, ...] | None = ()

    def __init__(self, dsn: str | None, connections: int, params: dict[str, Any],
                 pinned: bool = False):
        super().__init__(dsn, connections, params, pinned)
        self.opened: list[Any] = []
        self.free: list[Any] = []

    def connect(self) -> Any:
        """A new DB-API connection."""
        raise NotImplementedError

    def start(self) -> None:
        jobs = [gevent.spawn(self.connect) for _ in range(self.connections)]
        gevent.joinall(jobs, raise_error=True)
        self.opened += [job.value for job in jobs]
        self.free += self.opened

    def take(self, autocommit: bool) -> tuple[Any, Any]:
        conn = self.free.pop() if self.free else self._another()
        conn.autocommit = autocommit
        return conn, conn.cursor()

    def _another(self) -> Any:
        conn = self.connect()
        self.opened.append(conn)
        return conn

    def close(self) -> None:
        for conn in self.opened:
            try:
                conn.close()
            except Exception:
                pass


class PgmuxDropIn(PerGreenlet):
    name = "pgmux-psycopg2"
    description = ("pgmux.psycopg2 (the drop-in): a psycopg2 connection per greenlet, each a "
                   "handle on one shared client (4 pipelined + 2 pinned server connections)")
    workloads: tuple[str, ...] | None = ("cursor_select", "psycopg2_read_tx")
    multiplexed = True

    def connect(self) -> Any:
        from pgmux import psycopg2

        return psycopg2.connect(self.dsn or "", **self.params)

    def start(self) -> None:
        super().start()
        self.db = self.opened[0].pgmux_handle.client

    def fill(self) -> dict[str, float] | None:
        return pipeline_fill(self.db)

    def close(self) -> None:
        super().close()
        self.db.close(timeout=2.0)


class PgmuxDbapi(PgmuxDropIn):
    name = "pgmux-dbapi"
    description = ("pgmux.dbapi: a DB-API connection per greenlet, each a handle on one "
                   "shared client (4 pipelined + 2 pinned server connections)")
    workloads = ("cursor_select",)

    def connect(self) -> Any:
        import pgmux.dbapi

        return pgmux.dbapi.connect(self.dsn, **self.params)

    def start(self) -> None:
        PerGreenlet.start(self)
        self.db = self.opened[0].client


class Psycopg2PerGreenlet(PerGreenlet):
    name = "psycopg2-per-greenlet"
    description = ("psycopg2 + psycogreen, a connection per greenlet (a server connection "
                   "each)")
    modules = ("psycopg2", "psycogreen")
    workloads = ("psycopg2_read_tx",)

    def connect(self) -> Any:
        import psycopg2
        from psycogreen.gevent import patch_psycopg

        patch_psycopg()  # idempotent: installs the gevent wait callback
        return psycopg2.connect(self.dsn or "", **self.params)


def _cursor_select(client: Any, rng: Random, rows: int) -> Operation:
    """In the greenlet's connection, autocommit: SELECT %s, fetchall()."""
    _, cursor = client.take(autocommit=True)
    execute, fetchall = cursor.execute, cursor.fetchall
    draw = rng.random

    def op() -> Any:
        execute(SELECT_SQL, (int(draw() * 1_000_000),))
        return fetchall()

    return op


def _read_tx(client: Any, rng: Random, rows: int) -> Operation:
    """In the greenlet's connection, psycopg2's default mode: ``with conn:`` (BEGIN ...
    COMMIT) around two point lookups."""
    conn, cursor = client.take(autocommit=False)
    execute, fetchone = cursor.execute, cursor.fetchone
    draw = rng.random

    def op() -> Any:
        with conn:
            execute(LOOKUP_SQL, (int(draw() * ACCOUNT_ROWS) + 1,))
            fetchone()
            execute(BALANCE_SQL, (int(draw() * ACCOUNT_ROWS) + 1,))
            return fetchone()

    return op


DROPIN_WORKLOADS = (
    Workload("cursor_select", 'cursor.execute("SELECT %s", (n,)) and fetchall(), '
             "autocommit, a connection per greenlet", _cursor_select, clients=CURSOR_CLIENTS),
    Workload("psycopg2_read_tx", "a read transaction per request, a psycopg2 connection per "
             "greenlet: with conn: (BEGIN ... COMMIT) around two point lookups", _read_tx,
             tables=("accounts",), unit="tx", clients=READ_TX_CLIENTS),
)
DROPIN_CLIENTS: dict[str, type[Adapter]] = {
    c.name: c for c in (PgmuxDropIn, PgmuxDbapi, Psycopg2PerGreenlet)}
