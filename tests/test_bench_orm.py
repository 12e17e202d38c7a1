"""The ORM benchmark: the orm family (SQLAlchemy ORM, a Session per request) for every
client, the burst of sessions.

No timing is asserted: that every client produced figures and that the writes the workload
counted are the writes the server holds. The goal lines: tests/test_bench_goals.py.
"""

from __future__ import annotations

import json

import pytest

from pgmux.tooling.bench import build_parser, main
from pgmux.tooling.bench.clients import CLIENTS
from pgmux.tooling.bench.orm import BURST_SESSIONS, ORM, ORM_CLIENTS, orm_split
from pgmux.tooling.bench.plan import settings_from
from pgmux.tooling.bench.profiles import profiled_client

pytest.importorskip("sqlalchemy")

BENCH_DB = "pgmux_bench_orm"
GREENLETS, CONNECTIONS = 16, 4
KINDS = {"orm_read": {"read"}, "orm_mixed": {"read", "write"}, "orm_write": {"write"}}


@pytest.fixture(scope="module")
def bench_dsn(pg):
    """A database of the bench's own (its tables stay out of the test database)."""
    return pg.database(BENCH_DB)


def _balances(pg) -> int:
    """The sum of the accounts' balances (0 before the first run creates the table)."""
    found = pg.admin(f"SELECT to_regclass('{ORM}_accounts') IS NOT NULL", dbname=BENCH_DB)
    if found.strip() != "t":
        return 0
    return int(pg.admin(f"SELECT coalesce(sum(abalance), 0) FROM {ORM}_accounts",
                        dbname=BENCH_DB))


def _run(bench_dsn: str, tmp_path, *argv: str) -> tuple[int, dict]:
    path = tmp_path / "orm.json"
    status = main(["--smoke", "--dsn", bench_dsn, "--json", str(path), *argv])
    return status, json.loads(path.read_text())


def test_every_client_runs_the_orm_family_and_the_server_holds_the_writes_it_counted(
        pg, bench_dsn, tmp_path):
    clients = [name for name in ORM_CLIENTS if not CLIENTS[name].missing()]
    before = _balances(pg)
    status, document = _run(bench_dsn, tmp_path, "--workloads", ",".join(KINDS),
                            "--clients", ",".join(clients), "--greenlets", str(GREENLETS),
                            "--connections", str(CONNECTIONS))
    assert status == 0 and document["errors"] == []
    written = stopped = 0
    for client in clients:
        for workload, kinds in KINDS.items():
            (result,) = [r for r in document["results"]
                         if r["client"] == client and r["workload"] == workload]
            assert result["queries"] > 0 and result["errors"] == 0, result["first_error"]
            assert result["unit"] == "request" and result["cpu_us_per_query"] > 0
            assert result["latency_ms"]["p99"] >= result["latency_ms"]["p50"] > 0
            assert result["peak_server_connections"] == CONNECTIONS
            assert result["kinds"].keys() == kinds
            counts = {kind: k["completed"] for kind, k in result["kinds"].items()}
            assert all(k["completed"] >= k["queries"] > 0 for k in result["kinds"].values())
            if client == "orm-pgmux":  # its gets are multiplexed on the pipeline
                assert result["fill"]["units_per_readable"] > 0, result["fill"]
            if workload == "orm_mixed":  # each greenlet 4 reads, a write, 4 reads, ...
                assert abs(counts["read"] - 4 * counts["write"]) <= 4 * GREENLETS, counts
            written += counts.get("write", 0)
            stopped += result["killed"]
    # every write adds 1 to a balance in SQL: the server's sum grew by the committed ones
    # (those whose greenlet the end of a case stopped mid-request may or may not be)
    grown = _balances(pg) - before
    assert written <= grown <= written + stopped, (written, grown, stopped)
    assert {g["id"] for g in document["goals"] if g["area"] == "orm"} >= {
        "orm_read_local", "orm_mixed_local", "orm_write_local"}


def test_a_burst_of_sessions_holds_each_session_open_after_its_read(bench_dsn, tmp_path):
    status, document = _run(bench_dsn, tmp_path, "--workloads", "orm_sessions",
                            "--clients", "orm-pgmux", "--greenlets", "1", "--connections", "2")
    assert document["errors"] == []
    (result,) = [r for r in document["results"] if r["client"] == "orm-pgmux"]
    assert result["errors"] == 0, result["first_error"]
    assert result["unit"] == "burst" and result["rows_per_op"] == BURST_SESSIONS
    assert result["peak_server_connections"] == 2  # orm_split(2): 1 pipelined + 1 pinned
    # at least one burst ran (ended in the window, or still running at its end), and none
    # took less than the 50 ms its sessions stay open
    assert result["queries"] + result["censored"] >= 1
    assert result["latency_ms"]["p50"] >= 50.0
    assert status == 0  # a burst still running at the window's end is slow, not broken


def test_orm_pgmux_splits_its_connections_between_pipeline_and_pinned():
    assert orm_split(4) == (1, 3) and orm_split(2) == (1, 1)
    with pytest.raises(ValueError):
        orm_split(1)


def test_the_profile_of_an_orm_workload_runs_orm_pgmux():
    assert profiled_client("orm_write") == "orm-pgmux"
    assert profiled_client("select_int") == profiled_client("tpcb_unit") == "pgmux"


def _settings(*argv: str):
    return settings_from(build_parser().parse_args(list(argv)), list(argv))


def test_the_orm_goal_cases_are_planned_locally_and_at_10_ms():
    settings = _settings("--goals", "--clients", "orm-pgmux,orm-psycopg3", "--rtt-ms", "10")
    assert settings.cases == [(0.0, "floor", 64, 0, "gevent")] + [
        (10.0, w, 64, 4, client) for w in KINDS for client in ("orm-pgmux", "orm-psycopg3")]
    local = _settings("--goals", "--clients", "orm-pgmux", "--rtt-ms", "0",
                      "--workloads", "orm_sessions")
    assert local.cases == [(0.0, "floor", 64, 0, "gevent"),
                           (0.0, "orm_sessions", 1, 2, "orm-pgmux")]  # on pinned_size=1
