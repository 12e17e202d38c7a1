"""Issue 27's goal lines, judged on figures made up for the purpose (no timing here): each
line says met / not met / not measured as the issue's thresholds say, and the scaling table
and plot show what was measured."""

from __future__ import annotations

import importlib.util

import pytest

from pgmux.tooling.bench.hot_goals import (
    evaluate_hot_goals,
    hot_goal_cases,
    plot_scaling,
    scaling_table,
)


def result(client: str, workload: str, qps: float, cpu: float, greenlets: int = 64,
           rtt: float = 0.0) -> dict:
    return {"client": client, "workload": workload, "qps": qps, "cpu_us_per_query": cpu,
            "greenlets": greenlets, "connections": 4, "rtt_ms": rtt, "queries": 1000,
            "latency_ms": {"p99": 1.0}}


def http(app: str, endpoint: str, rps: float) -> dict:
    return {"app": app, "endpoint": endpoint, "rtt_ms": 0.0, "requests": 100, "rps": rps,
            "latency_ms": {"p99": 10.0}}


RESULTS = [
    result("pgmux", "select_int", 90_000, 7.5), result("pgmux-python", "select_int", 60_000, 10),
    result("psycopg2", "select_int", 28_000, 20),
    result("pgmux", "select_int", 80_000, 9.0, greenlets=4096),
    result("pgmux", "select_int", 85_000, 8.0, greenlets=256),
    result("pgmux", "tpcb_unit", 4_000, 60, rtt=10.0),
    result("psycopg2", "tpcb_unit", 320, 50, rtt=10.0),
    result("psycopg3", "tpcb_unit", 340, 55, rtt=10.0),
    result("pgmux", "tpcb_unit", 11_000, 60), result("pgbench", "tpcb_unit", 4_300, 40),
]
HTTP = [http("pgmux", "/queries?n=20", 3_000), http("psycopg2", "/queries?n=20", 1_300),
        http("pgmux", "/updates?n=20", 1_900), http("psycopg2", "/updates?n=20", 1_000),
        http("pgmux", "/db", 14_000), http("psycopg2", "/db", 8_500)]


def test_every_line_is_judged_by_the_issues_threshold():
    verdicts = {g["id"]: g["status"] for g in evaluate_hot_goals(RESULTS, HTTP)}
    assert verdicts == {
        "mux_local_27": "met",  # 90,000 / 28,000 = 3.2x >= 3x
        "mux_cpu_27": "met",  # 7.5 us <= 8
        "mux_python_27": "met",  # 60,000 / 28,000 = 2.1x >= 2x
        "flat_cpu_27": "met",  # 9.0 / 7.5 = 1.2x <= 1.3x
        "flat_qps_27": "met",  # 80,000 / 90,000 = 89 % >= 80 %
        "http_queries20_27": "met",  # 2.3x >= 2x
        "http_updates20_27": "not met",  # 1.9x < 2x
        "http_db_27": "met",  # 14,000 / 8,500 = 1.65x >= 1.6x
        "unit_rtt10_27": "not met",  # 4,000 / 340 = 11.8x < 12x (psycopg 3's is the best)
        "unit_pgbench_27": "met",  # 11,000 / 4,300 = 2.6x
        "pure_select_int_27": "not measured",  # no pgmux-before, no baseline
    }


def test_nothing_measured_is_said_so():
    verdicts = {g["id"]: g["status"] for g in evaluate_hot_goals([], [])}
    assert set(verdicts.values()) == {"not measured"}


def test_the_scaling_cases_and_table():
    assert hot_goal_cases(["pgmux", "psycopg2"], [0.0, 10.0], None) == [
        (0.0, "select_int", g, 4, c) for g in (64, 256, 1024, 4096) for c in ("pgmux", "psycopg2")]
    assert hot_goal_cases(["pgmux"], [10.0], None) == []
    assert hot_goal_cases(["pgmux"], [0.0], ["tpcb"]) == []
    text = scaling_table(RESULTS)
    assert "85,000 q/s (0.94x), 8.0 us (1.07x)" in text  # 256 against 64
    assert "80,000 q/s (0.89x), 9.0 us (1.20x)" in text
    assert scaling_table([]) == ""


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs matplotlib")
def test_the_scaling_plot(tmp_path):
    path = str(tmp_path / "scaling.png")
    assert plot_scaling(path, RESULTS) == path
    assert (tmp_path / "scaling.png").stat().st_size > 1000
    assert plot_scaling(str(tmp_path / "none.png"), []) is None
