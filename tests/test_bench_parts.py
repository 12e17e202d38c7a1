"""The benchmark's parts outside the timed cases: gevent's floor, callgrind's counts, the
SQLAlchemy examples' runner, the Markdown page. No timing is asserted."""

from __future__ import annotations

import json

import gevent
import pytest

from pgmux.tooling.bench import callgrind, instructions, markdown, sqla_examples
from pgmux.tooling.bench.floor import ParkAndWake, add_multiples


def test_the_floor_parks_and_wakes_every_caller_in_rounds():
    counted = ParkAndWake(8, rounds=100)
    counted.run()  # returns when the rounds are done and every greenlet has left
    assert 100 <= counted.rounds < 108 and all(g.dead for g in counted.greenlets)
    loop = ParkAndWake(8)
    loop.start()
    gevent.sleep(0.05)
    assert loop.rounds > 8  # every caller went round more than once
    loop.stop()
    assert all(g.dead for g in loop.greenlets) and loop.parked == []
    rounds = loop.rounds
    gevent.sleep(0.01)
    assert loop.rounds == rounds  # nothing runs after the stop


def test_each_result_is_a_multiple_of_the_floor():
    results = [{"workload": "floor", "queries": 100, "cpu_us_per_query": 1.5},
               {"workload": "select_int", "queries": 100, "cpu_us_per_query": 12.0},
               {"workload": "select_int", "queries": 0, "cpu_us_per_query": None}]
    assert add_multiples(results) is results[0]
    assert [r["cpu_floor_multiple"] for r in results] == [1.0, 8.0, None]
    alone = [{"workload": "select_int", "queries": 100, "cpu_us_per_query": 12.0}]
    assert add_multiples(alone) is None and alone[0]["cpu_floor_multiple"] is None


def test_the_instruction_counts_run_the_control_path_then_the_telemetry_configurations():
    sizes = instructions.SMOKE_SIZES
    every = ("select_int", "tpcb_unit", "transaction")
    cursors = ("dbapi_cursor", "psycopg2_cursor")  # the drop-in's cost, compiled only
    assert instructions.plan(False, sizes) == [  # gevent's floor alone has no pgmux in it
        instructions.Count("compiled", "absent", ("floor", *every, *cursors)),
        instructions.Count("python", "absent", every)]
    assert instructions.plan(False, instructions.QUICK_SIZES)[0].workloads == (
        "floor", *every)  # --quick leaves the cursors to the full runs
    runs = instructions.plan(True, sizes, repeats=2, implementations=("compiled",))
    assert [(c.config, c.workloads) for c in runs] == [
        ("absent", ("floor", *every, *cursors)),
        ("api", ("select_int", "tpcb_unit")), ("absent", ("select_int", "tpcb_unit")),
        ("api", ("select_int", "tpcb_unit")), ("sdk", ("select_int", "tpcb_unit"))]
    rows = [{"implementation": "compiled", "config": "absent", "workload": "select_int",
             "instructions": 50_000.0}]
    assert instructions.per_operation(rows, "compiled", "select_int") == 50_000.0
    assert instructions.per_operation(rows, "python", "select_int") is None


@pytest.mark.slow
@pytest.mark.skipif(not callgrind.available(), reason="needs valgrind")
def test_callgrind_counts_each_workload_of_the_control_path(pg, tmp_path):
    """A few operations of each, counted: gevent's round, and pgmux's operations, each more
    than a round and less than a millisecond's worth."""
    rows = instructions.measure(pg.dsn, [instructions.Count(
        "compiled", "absent", instructions.WORKLOADS)], instructions.SMOKE_SIZES)
    assert [r["workload"] for r in rows] == list(instructions.WORKLOADS)
    floor, *others = rows
    assert 1_000 < floor["instructions"] < 50_000, floor
    for row in rows:
        assert floor["instructions"] <= row["instructions"] < 5_000_000, row
        assert row["runs"] == [row["instructions"]] and row["n"] == instructions.SMOKE_SIZES[
            row["workload"]]


def test_the_sqlalchemy_examples_get_the_password_apart_and_a_database_of_their_own():
    address, env = sqla_examples.url("postgresql://app:s3cr'et@db.example:5433/shop",
                                     "psycopg2")
    assert address == f"postgresql+psycopg2://app@db.example:5433/{sqla_examples.DATABASE}"
    assert env == {"PGPASSWORD": "s3cr'et"}
    address, env = sqla_examples.url("host=/var/run/postgresql user=me", "pgmux")
    assert address == (f"postgresql+pgmux://me@/{sqla_examples.DATABASE}"
                       "?host=/var/run/postgresql&port=5432")
    assert env == {}


@pytest.mark.slow
def test_sqlalchemy_examples_run_on_both_drivers(pg):
    pytest.importorskip("psycopg2")
    import sqlalchemy

    try:
        sqla_examples.source(sqlalchemy.__version__)
    except Exception as exc:  # no package index here and nothing cached
        pytest.skip(f"SQLAlchemy's source distribution unavailable: {exc}")
    rows = sqla_examples.measure(pg.dsn, num=5, pairs=1)
    assert {r["suite"] for r in rows} == set(sqla_examples.SUITES)
    assert all(r.get("error") is None for r in rows), rows
    tests = {r["test"] for r in rows}
    assert {"test_orm_query_classic_style", "test_core_reuse_stmt", "test_orm_commit",
            "test_dbapi_raw_w_pool"} <= tests
    for row in rows:
        assert row["num"] == 5 and len(row["ratios"]) == 1 and row["ratio"] > 0
        assert row["pgmux_s"][0] > 0 and row["psycopg2_s"][0] > 0


def test_the_sqlalchemy_examples_report_lines_are_read():
    report = ("Tests to run: test_core\n"
              "test_core : Individual INSERT/COMMIT pairs using Core. (100 iterations); "
              "total time 0.115000 sec\n"
              "test_dbapi_raw_w_pool : Individual INSERT/COMMIT pairs w/ DBAPI + connection "
              "pool (100 iterations); total time 0.056 sec\n")
    found = {name: float(seconds) for name, _, _, seconds in sqla_examples.REPORT.findall(
        report)}
    assert found == {"test_core": 0.115, "test_dbapi_raw_w_pool": 0.056}


DOCUMENT = {
    "command": "pgmux bench --goals --json run.json --clients pgmux,psycopg2 --plot=x.png",
    "created": "2026-12-07",
    "machine": {"cpu_model": "AMD EPYC", "cpus": 2, "memory_gib": 23.4, "os": "Debian 12",
                "platform": "Linux-6", "python": "3.11.7", "implementation": "CPython",
                "gevent": "26.9.0", "postgresql": "15.18", "pgmux_implementation": "compiled",
                "load_average_at_start": [0.1, 0.2, 0.3]},
    "server": "embedded PostgreSQL 15.18",
    "settings": {"goals": True, "duration_s": 5.0, "warmup_s": 1.0,
                 "sqlalchemy_examples": [1000, 3], "http_seconds": [1, 5]},
    "areas": {"hot_path": "multiplexed hot path"},
    "goals": [{"area": "hot_path", "id": "select_cpu", "status": "not met",
               "target": "SELECT $1::int | 64 greenlets: CPU <= 8 us", "measured": "9.9 us"}],
    "results": [{"client": "pgmux", "workload": "select_int", "rtt_ms": 0.0, "greenlets": 64,
                 "connections": 4, "qps": 50_000.0, "unit": "query", "queries": 50_000,
                 "latency_ms": {"p50": 1.0, "p99": 5.0}, "cpu_us_per_query": 9.9,
                 "cpu_floor_multiple": 8.3, "peak_server_connections": 4},
                {"client": "pgmux", "workload": "select_int", "rtt_ms": 0.0, "greenlets": 64,
                 "connections": 4, "qps": 40_000.0, "queries": 40_000, "turns_counted": True}],
    "http": [], "instructions": [{"implementation": "compiled", "config": "absent",
                                  "workload": "select_int", "instructions": 49_742.0,
                                  "runs": [49_742.0]}],
    "sqlalchemy_examples": [{"suite": "short_selects", "test": "test_core_reuse_stmt",
                             "pgmux_s": [1.0, 1.2], "psycopg2_s": [1.1, 1.1],
                             "ratio": 1.01}],
}


def test_a_run_renders_as_the_pages_tables(tmp_path):
    block = markdown.render(DOCUMENT)
    assert block.startswith(markdown.BEGIN) and block.rstrip().endswith(markdown.END)
    assert "| CPU | AMD EPYC, 2 cores |" in block and "| RAM | 23.4 GiB |" in block
    # MyST reads a $ pair as math and a | as a cell's end: both escaped
    assert "| **not met** | SELECT \\$1::int \\| 64 greenlets: CPU <= 8 us | 9.9 us |" in block
    assert "0 of 1 met." in block
    assert "`pgmux bench --goals --clients pgmux,psycopg2`, 2026-12-07" in block
    assert "pgmux bench --goals --workloads select_int --clients pgmux,psycopg2" in block
    assert "| 0 ms | pgmux | 64 | 4 | 50,000 | 1.00 | 5.00 | 9.9 | 8.3 | - |" in block
    assert "40,000" not in block  # the turn-counted case is not a figure of the workload
    assert "| compiled | absent | `select_int` | 49,742 | 1 |" in block
    assert "| short_selects | `test_core_reuse_stmt` | 1.100 | 1.100 | 1.01x |" in block
    page = tmp_path / "benchmarks.md"
    page.write_text(f"# Benchmarks\n\nBefore.\n\n{markdown.BEGIN}\nold\n{markdown.END}\n\nAfter.\n")
    run = tmp_path / "run.json"
    run.write_text(json.dumps(DOCUMENT))
    from pgmux.tooling.bench import main

    assert main(["--render", str(run), "--markdown", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Benchmarks\n\nBefore.\n\n" + markdown.BEGIN)
    assert text.endswith(markdown.END + "\n\nAfter.\n") and "\nold\n" not in text
    # the goals judged again from the run's figures, by area
    assert "### Multiplexed hot path" in text and "### Control path cost" in text
    assert "| **not met** | select_int (SELECT \\$1::int), 4 connections, 64 greenlets: pgmux " \
           "client CPU <= 8 us/query | 9.9 us | `select_cpu` |" in text
    fresh = tmp_path / "fresh.md"
    assert main(["--render", str(run), "--markdown", str(fresh)]) == 0
    assert fresh.read_text() == text[text.index(markdown.BEGIN):text.index(markdown.END)] + (
        markdown.END + "\n")



def test_a_baseline_runs_counts_stand_beside_the_runs(tmp_path):
    baseline = tmp_path / "before.json"
    baseline.write_text(json.dumps({"instructions": [
        {"implementation": "compiled", "config": "absent", "workload": "select_int",
         "instructions": 99_484.0, "runs": [99_484.0]}]}))
    run = tmp_path / "run.json"
    run.write_text(json.dumps(DOCUMENT))
    page = tmp_path / "page.md"
    from pgmux.tooling.bench import main

    assert main(["--render", str(run), "--baseline", str(baseline), "--markdown", str(page)]) == 0
    text = page.read_text()
    assert "| pgmux | OpenTelemetry | operation | instructions | runs | baseline | change |" in text
    assert "| compiled | absent | `select_int` | 49,742 | 1 | 99,484 | -50.0% |" in text
    assert "| baseline | change |" not in markdown.render(DOCUMENT)  # none without a baseline
