"""The atomic units' workloads: pgbench's TPC-B transaction at scale 1, each client's whole
transaction sent at once (``tpcb_unit``), and the same statements one round trip at a time
in BEGIN ... COMMIT (``tpcb_unit_tx``), for the ratio lines.

At scale 1 every transaction updates the one row of ``_branches``: how long a client holds
that row lock (across round trips, or only while the server runs its statements) decides
what the server can do at all. Each client's best way of sending a whole transaction:

* pgmux: ``db.atomic()``, the five statements as one Sync unit on the multiplexed path
  (4 pipelined connections): every result kept, parameters bound on the server;
* psycopg2: the five statements as one multi-statement string (one round trip, one
  implicit transaction; psycopg2 interpolates the parameters client-side, as
  ``cursor.mogrify`` does), which returns the last statement's result only;
* psycopg 3: pipeline mode, BEGIN, the five, COMMIT and one Sync (its ``transaction()``
  inside a pipeline syncs after BEGIN: a round trip more);
* pgbench (``pgmux.tooling.bench.pgbench``): ``-M prepared`` with the five in BEGIN ... END,
  the server's own limit from a C client.

``pgmux-inflight512`` is pgmux with ``max_in_flight=512``: a unit takes a slot per
statement, so 64 greenlets' units of five want 320 slots where the default gives 256.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from random import Random
from typing import Any

from pgmux.tooling.bench.clients import Adapter, PgmuxMultiplexed
from pgmux.tooling.bench.workloads import (
    PEERS,
    Operation,
    TableSet,
    Workload,
    pgbench_tables,
    tpcb_draw,
    tpcb_statements,
    tpcb_transactions,
)

TPCB1 = "pgmux_bench_tpcb1"  # prefix of the scale-1 tables: _branches, _tellers, ...
TPCB1_SCALE = 1
UNIT_CLIENTS = ("pgmux", "psycopg2", "psycopg3", "pgbench", "pgmux-inflight512")
Params = Sequence[Any]
Send = Callable[[list[Params]], Any]  # one transaction's parameters, per statement


def _pgmux_atomic(adapter: Any, sqls: list[str]) -> Send:
    atomic = adapter.db.atomic

    def send(params: list[Params]) -> list[Any]:
        with atomic() as unit:
            pending = [unit.query(sql, values) for sql, values in zip(sqls, params,
                                                                        strict=True)]
        return [p.result() for p in pending]

    return send


def _psycopg2_one_string(adapter: Any, sqls: list[str]) -> Send:
    script = ";".join(sqls)
    run_steps = adapter.run_steps

    def send(params: list[Params]) -> Any:
        flat = [value for values in params for value in values]
        return run_steps([(script, flat)])  # autocommit: one implicit transaction

    return send


def _psycopg3_pipeline(adapter: Any, sqls: list[str]) -> Send:
    pool = adapter.pool
    begin, commit = "BEGIN", "COMMIT"

    def send(params: list[Params]) -> list[Any]:
        item = pool.get()
        conn = item[0]
        try:
            with conn.pipeline():  # one Sync, at its end (transaction() would sync at BEGIN)
                conn.execute(begin)
                cursors = [conn.execute(sql, values) for sql, values in zip(sqls, params,
                                                                              strict=True)]
                conn.execute(commit)
            return [c.fetchall() if c.description is not None else c.rowcount
                    for c in cursors]
        except BaseException:
            _quietly(conn.execute, "ROLLBACK")  # the failed block, if the server kept one
            raise
        finally:
            pool.put(item)

    return send


def _quietly(call: Callable[..., Any], *args: Any) -> None:
    try:
        call(*args)
    except Exception:
        pass


class PgmuxRoomyPipeline(PgmuxMultiplexed):
    """pgmux with room in each pipeline for 64 greenlets' units of 5 statements on 4
    connections: a unit counts one slot per statement against ``max_in_flight``."""

    name = "pgmux-inflight512"
    description = "pgmux multiplexed path with max_in_flight=512"
    max_in_flight = 512


ONE_SHOT: dict[str, Callable[[Any, list[str]], Send]] = {
    "pgmux": _pgmux_atomic, PgmuxRoomyPipeline.name: _pgmux_atomic,
    "psycopg2": _psycopg2_one_string, "psycopg3": _psycopg3_pipeline}


def _tpcb_unit(client: Any, rng: Random, rows: int) -> Operation:
    """TPC-B at scale 1, the whole transaction sent at once (see the module's docstring)."""
    send = ONE_SHOT[client.name](client, [client.native(sql) for sql in tpcb_statements(TPCB1)])
    draw = tpcb_draw(rng, TPCB1_SCALE)

    def op() -> Any:
        return send(list(draw()))

    return op


UNIT_WORKLOADS = (
    Workload("tpcb_unit", f"pgbench TPC-B (scale {TPCB1_SCALE}), the whole transaction at once: "
             "pgmux db.atomic(), psycopg2 one string, psycopg 3 pipeline, pgbench -M prepared",
             _tpcb_unit, tables=("tpcb1",), unit="tx", clients=UNIT_CLIENTS, count_turns=True),
    Workload("tpcb_unit_tx", f"pgbench TPC-B (scale {TPCB1_SCALE}) through transaction(), a "
             "round trip per statement", tpcb_transactions(TPCB1, TPCB1_SCALE),
             tables=("tpcb1",), unit="tx", pinned=True, clients=PEERS),
)
UNIT_TABLE_SETS: dict[str, TableSet] = {"tpcb1": pgbench_tables(TPCB1, TPCB1_SCALE)}
UNIT_BENCH_CLIENTS: dict[str, type[Adapter]] = {PgmuxRoomyPipeline.name: PgmuxRoomyPipeline}
