"""The atomic units' benchmark: tpcb_unit for every client, pgbench as a client row.

No timing is asserted: that every client produced figures and that the transactions did
what TPC-B does (the books balance). The goal lines: tests/test_bench_goals.py.
"""

from __future__ import annotations

import json
import os

import pytest

from pgmux.tooling.bench import main
from pgmux.tooling.bench.clients import CLIENTS
from pgmux.tooling.bench.pgbench import conninfo, find_pgbench, read_log, tpcb_script

BENCH_DB = "pgmux_bench_units"
TABLES = "pgmux_bench_tpcb1"


@pytest.fixture(scope="module")
def bench_dsn(pg):
    """A database of the bench's own (its tables stay out of the test database)."""
    return pg.database(BENCH_DB)


def _books(pg) -> list[int]:
    """The sums of the accounts', tellers', branches' balances and of the history's deltas
    (the history is emptied at the start of each run), and the history's rows."""
    return [int(value) for value in pg.admin(
        f"SELECT (SELECT sum(abalance) FROM {TABLES}_accounts), "
        f"(SELECT sum(tbalance) FROM {TABLES}_tellers), "
        f"(SELECT sum(bbalance) FROM {TABLES}_branches), "
        f"(SELECT coalesce(sum(delta), 0) FROM {TABLES}_history), "
        f"(SELECT count(*) FROM {TABLES}_history)", dbname=BENCH_DB).split("|")]


def _balanced(pg, run) -> None:
    """``run()`` moved each transaction's delta through an account, its teller, its branch
    and the history, whole: the balances agree, and moved by the history's sum."""
    try:
        before = _books(pg)[2]
    except Exception:  # the first run creates the tables
        before = 0
    run()
    accounts, tellers, branches, history, rows = _books(pg)
    assert accounts == tellers == branches and branches - before == history and rows > 0


def _run(pg, bench_dsn: str, tmp_path, clients: list[str], *extra: str) -> dict:
    path = tmp_path / "units.json"
    argv = ["--smoke", "--dsn", bench_dsn, "--workloads", "tpcb_unit,tpcb_unit_tx",
            "--clients", ",".join(clients), "--greenlets", "16", "--connections", "4",
            "--json", str(path), *extra]
    _balanced(pg, lambda: main(argv) == 0 or pytest.fail("the bench failed"))
    document = json.loads(path.read_text())
    assert document["errors"] == []
    return document


def _measured(document: dict, client: str, workload: str) -> list[dict]:
    return [r for r in document["results"] if r["client"] == client
            and r["workload"] == workload and not r["turns_counted"]]


def _check(result: dict) -> None:
    assert result["queries"] > 0 and result["errors"] == 0, result["first_error"]
    assert result["latency_ms"]["p99"] >= result["latency_ms"]["p50"] > 0
    assert result["cpu_us_per_query"] > 0 and result["unit"] == "tx"
    assert result["peak_server_connections"] == 4


def test_the_python_clients_run_tpcb_units_and_the_books_balance(pg, bench_dsn, tmp_path):
    clients = [name for name in ("pgmux", "psycopg2", "psycopg3")
               if not CLIENTS[name].missing()]
    document = _run(pg, bench_dsn, tmp_path, clients)
    for client in clients:
        for workload in ("tpcb_unit", "tpcb_unit_tx"):
            (result,) = _measured(document, client, workload)
            _check(result)
    assert {g["id"] for g in document["goals"] if g["area"] == "atomic"} >= {
        "unit_vs_transaction", "unit_vs_pgbench"}


def test_pgbench_is_a_client_row_of_tpcb_unit(pg, bench_dsn, tmp_path):
    if CLIENTS["pgbench"].missing():
        pytest.skip("pgbench not found (PostgreSQL's client programs, or $PGMUX_PGBENCH)")
    document = _run(pg, bench_dsn, tmp_path, ["pgbench"], "--duration", "1")
    (result,) = _measured(document, "pgbench", "tpcb_unit")
    _check(result)
    assert _measured(document, "pgbench", "tpcb_unit_tx") == []  # it runs tpcb_unit only
    (counted,) = [r for r in document["results"] if r["turns_counted"]]
    assert counted["turns_per_query"] == pytest.approx(7.0, abs=0.3)  # BEGIN, 5, END


def test_the_pgbench_script_is_the_workloads_five_statements():
    script = tpcb_script()
    lines = script.splitlines()
    assert lines[:4] == ["\\set aid random(1, 100000)", "\\set bid random(1, 1)",
                         "\\set tid random(1, 10)", "\\set delta random(-5000, 5000)"]
    assert lines[4] == "BEGIN;" and lines[-1] == "END;" and len(lines) == 11
    assert lines[5] == (f"UPDATE {TABLES}_accounts SET abalance = abalance + :delta "
                        "WHERE aid = :aid;")
    assert lines[9].endswith("VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);")
    assert "$" not in script


def test_pgbench_gets_its_password_apart_from_the_command_line():
    text, password = conninfo("postgresql://app:s3cr'et@db:5433/shop?sslmode=require",
                              {"host": "127.0.0.1", "port": 6001, "application_name": "x"})
    assert password == "s3cr'et" and "s3cr" not in text
    assert text == ("user='app' host='127.0.0.1' port='6001' dbname='shop' sslmode='require' "
                    "application_name='x'")  # the DSN's order; the overrides win
    assert conninfo(None, {}) == ("", None)


def test_the_pgbench_log_gives_the_transactions_of_the_window(tmp_path):
    # client_id transaction_no time(us) script_no time_epoch time_us
    (tmp_path / "pgbench_log.123").write_text(
        "0 1 1500 0 1000 900000\n"  # ended at 1000.9: before the window
        "1 1 2500 0 1001 100000\n"  # 1001.1: inside
        "2 1 800 0 1001 999999\n"  # 1001.999999: inside
        "3 1 700 0 1002 0\n")  # 1002.0: the window's end is open
    (tmp_path / "other.txt").write_text("0 1 1 0 1001 500000\n")
    assert read_log(str(tmp_path), 1001.0, 1002.0) == [0.0025, 0.0008]


def test_pgbench_is_found_where_the_suite_finds_postgresql(monkeypatch, tmp_path):
    fake = tmp_path / "pgbench"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PGMUX_PGBENCH", str(fake))
    assert find_pgbench() == str(fake)
    monkeypatch.setenv("PGMUX_PGBENCH", str(tmp_path / "missing"))
    assert find_pgbench() is None and CLIENTS["pgbench"].missing() == ["pgbench"]
    monkeypatch.delenv("PGMUX_PGBENCH")
    found = find_pgbench()
    assert found is None or os.access(found, os.X_OK)
