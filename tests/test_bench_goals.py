"""The goal lines of ``pgmux bench --goals``, judged on figures made up for the purpose (no
timing here): each line says met / not met / not measured as its threshold says, a line
whose figures are missing is never met, and the areas plan the cases their lines need."""

from __future__ import annotations

import importlib.util

import pytest

from pgmux.tooling.bench import goals
from pgmux.tooling.bench.goals import (
    atomic,
    control_path,
    fan_out,
    hot_path,
    http_apps,
    orm,
    psycopg2_dropin,
    pure_python,
    results,
    telemetry,
    transactions,
    transport,
)
from pgmux.tooling.bench.goals.common import Plan, Run
from pgmux.tooling.bench.scaling import plot_scaling, scaling_table

AREA_IDS = {  # every line, by area, in order
    "hot_path": ["select_vs_psycopg2", "select_cpu", "select_qps", "select_python_vs_psycopg2",
                 "callers_4096_cpu", "callers_4096_qps", "callers_1024_unchanged",
                 "rtt10_vs_naive", "rtt10_p99", "rtt10_connections", "rtt10_unchanged",
                 "slow_mix_p99"],
    "control_path": ["select_floor_multiple", "select_instructions", "unit_instructions",
                     "transaction_instructions", "sequential_qps", "sequential_cpu",
                     "sqlalchemy_short_selects", "sqlalchemy_single_inserts"],
    "fan_out": ["queries20_local", "queries20_rtt10"],
    "atomic": ["unit_vs_transaction", "unit_vs_pgbench", "unit_vs_one_shot",
               "unit_vs_transaction_rtt10", "unit_vs_one_shot_rtt10"],
    "transactions": ["tpcb_vs_psycopg2", "tpcb_round_trips", "tpcb_scale1_vs_psycopg2",
                     "tpcb_scale1_server_cpu"],
    "orm": ["orm_read_local", "orm_read_rtt10", "orm_mixed_local", "orm_mixed_rtt10",
            "orm_write_local", "orm_write_rtt10", "orm_sessions"],
    "results": ["wide_speed", "wide_cpu_per_row", "wide_stream_speed",
                "wide_stream_cpu_per_row", "wide_stream_memory"],
    "http_apps": ["db_local", "db_rtt10", "updates5_local", "updates20_local",
                  "updates20_rtt10"],
    "psycopg2_dropin": ["dropin_http_db_local", "dropin_http_queries20_local",
                        "dropin_http_updates20_local", "dropin_http_db_rtt10",
                        "dropin_http_queries20_rtt10", "dropin_http_updates20_rtt10",
                        "dropin_greenlets_connections", "dropin_greenlets_throughput",
                        "dropin_cursor_cpu", "dropin_cursor_instructions",
                        "dropin_celery_connections", "dropin_celery_tasks"],
    "pure_python": ["python_select_instructions", "python_unit_instructions",
                    "python_transaction_instructions", "python_select_int",
                    "python_select_int_4096", "python_point_lookup", "python_wide",
                    "python_tpcb"],
    "telemetry": ["telemetry_select_int_compiled", "telemetry_tpcb_unit_compiled",
                  "telemetry_select_int_python", "telemetry_tpcb_unit_python"],
    "transport": ["field_copies", "retained_buffers"],
}


def op(client: str, workload: str, qps: float, cpu: float = 10.0, greenlets: int = 64,
       rtt: float = 0.0, connections: int = 4, **extra) -> dict:
    return {"client": client, "workload": workload, "qps": qps, "cpu_us_per_query": cpu,
            "greenlets": greenlets, "connections": connections, "rtt_ms": rtt,
            "queries": extra.pop("queries", int(qps) + 1), "unit": extra.pop("unit", "query"),
            "latency_ms": {"p50": 1.0, "p99": extra.pop("p99", 2.0),
                           "max": extra.pop("max_ms", 3.0)}, **extra}


def web(app: str, endpoint: str, rps: float, rtt: float = 0.0, connections: int = 64,
        peak: int = 12) -> dict:
    return {"app": app, "endpoint": endpoint, "rtt_ms": rtt, "requests": int(rps) + 1,
            "rps": rps, "latency_ms": {"p50": 5.0, "p99": 10.0}, "connections": connections,
            "peak_server_connections": peak}


def verdicts(lines: list[dict]) -> dict[str, str]:
    return {line["id"]: line["status"] for line in lines}


def test_every_area_is_listed_with_its_lines_and_nothing_measured_is_never_met():
    judged = goals.judge(Run([], asked=True))
    assert {key: [g["id"] for g in judged if g["area"] == key] for key in AREA_IDS} == AREA_IDS
    assert [area.key for area in goals.AREAS] == list(AREA_IDS)
    assert {g["status"] for g in judged} == {"not measured"}
    assert all(g["target"] and g["measured"] for g in judged)
    assert len({g["id"] for g in judged}) == len(judged)  # ids are unique across areas
    assert goals.judge(Run([])) == []  # not asked, nothing measured: no area


def test_an_area_is_judged_without_goals_when_its_figures_are_there():
    judged = goals.judge(Run([op("pgmux", "select_int", 70_000)]))
    assert {g["area"] for g in judged} == {"hot_path"}


def test_the_multiplexed_hot_path():
    found = [
        op("pgmux", "select_int", 90_000, 7.5), op("pgmux-python", "select_int", 60_000, 10),
        op("psycopg2", "select_int", 28_000, 20),
        op("pgmux", "select_int", 85_000, 8.0, greenlets=256),
        op("pgmux", "select_int", 82_000, 8.8, greenlets=4096),  # 1.17x the CPU, 0.91x q/s
        op("pgmux", "select_int", 80_000, 9.0, greenlets=1024),
        op("psycopg2", "select_int", 20_000, 20, greenlets=1024),  # 4.0x now
        op("pgmux", "select_int", 5_000, rtt=10.0, p99=25.0, peak_server_connections=4),
        op("psycopg2", "select_int", 400, rtt=10.0),
        op("pgmux-inflight1", "select_int", 390, rtt=10.0),
        op("pgmux", "slow_mix", 9_000, kinds={"fast": {"latency_ms": {"p99": 5.0}}}),
        op("pgmux", "point_lookup", 9_000, p99=2.0),
    ]
    baseline = {"results": [op("pgmux", "select_int", 5_000, rtt=10.0),
                            op("psycopg2", "select_int", 380, rtt=10.0),  # 13.2x before
                            op("pgmux", "select_int", 80_000, greenlets=1024),
                            op("psycopg2", "select_int", 16_000, greenlets=1024)]}  # 5x
    lines = {g["id"]: g for g in hot_path.judge(Run(found, baseline=baseline))}
    assert verdicts(list(lines.values())) == {
        "select_vs_psycopg2": "met",  # 3.2x
        "select_cpu": "met",  # 7.5 us
        "select_qps": "met",
        "select_python_vs_psycopg2": "met",  # 2.1x
        "callers_4096_cpu": "met", "callers_4096_qps": "met",
        "callers_1024_unchanged": "not met",  # 4.0x < 90 % of 5.0x
        "rtt10_vs_naive": "met",  # 12.5x psycopg2, the strongest naive pool
        "rtt10_p99": "not met",  # 25 ms >= 2 x 10 ms
        "rtt10_connections": "met",  # 4 against 5,000 / (400 / 4) = 50: 12.5x
        "rtt10_unchanged": "met",  # 12.5x >= 90 % of 13.2x
        "slow_mix_p99": "met",  # 2.5x
    }
    assert lines["rtt10_connections"]["measured"] == "12.5x (50 vs 4)"
    assert hot_path.naive_needed(found[7], found[8]) == 50
    assert verdicts(hot_path.judge(Run(found)))["rtt10_unchanged"] == "not measured"
    slower = [*found[:4], op("pgmux", "select_int", 70_000, 9.4, greenlets=4096)]
    assert verdicts(hot_path.judge(Run(slower)))["callers_4096_cpu"] == "not met"  # 1.25x


def test_the_scaling_table_and_plot(tmp_path):
    found = [op("pgmux", "select_int", 90_000, 7.5),
             op("pgmux", "select_int", 85_000, 8.0, greenlets=256),
             op("pgmux", "select_int", 80_000, 9.0, greenlets=4096)]
    text = scaling_table(found)
    assert "85,000 q/s (0.94x), 8.0 us (1.07x)" in text
    assert "80,000 q/s (0.89x), 9.0 us (1.20x)" in text
    assert scaling_table([]) == ""
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("needs matplotlib")
    path = str(tmp_path / "scaling.png")
    assert plot_scaling(path, found) == path and (tmp_path / "scaling.png").stat().st_size > 1000
    assert plot_scaling(str(tmp_path / "none.png"), []) is None


def _counts(implementation: str, select: float, unit: float, transaction: float,
            config: str = "absent") -> list[dict]:
    return [{"implementation": implementation, "config": config, "workload": workload,
             "instructions": value, "runs": [value], "n": 100, "greenlets": 1,
             "connections": 1}
            for workload, value in (("select_int", select), ("tpcb_unit", unit),
                                    ("transaction", transaction))]


def test_the_control_path_cost():
    found = [op("gevent", "floor", 800_000, 1.25, connections=0, unit="round"),
             op("pgmux", "select_int", 90_000, 5.0),  # 4.0x the floor
             op("pgmux", "select_int", 12_000, 60.0, greenlets=1, connections=1),
             op("psycopg2", "select_int", 11_000, 62.0, greenlets=1, connections=1)]
    tests = [{"suite": "short_selects", "test": "test_a", "ratio": 1.1},
             {"suite": "short_selects", "test": "test_b", "ratio": 0.9},
             {"suite": "single_inserts", "test": "test_c", "ratio": 1.0}]
    run = Run(found, instructions=_counts("compiled", 24_000, 260_000, 200_000),
              sqlalchemy_examples=tests,
              baseline={"instructions": _counts("compiled", 50_000, 390_000, 350_000)})
    lines = {g["id"]: g for g in control_path.judge(run)}
    assert verdicts(list(lines.values())) == {
        "select_floor_multiple": "met", "select_instructions": "met",
        "unit_instructions": "not met",  # 260,000 > 250,000
        "transaction_instructions": "met",  # 57 % of 350,000
        "sequential_qps": "met", "sequential_cpu": "met",  # 1.09x, 1.03x
        "sqlalchemy_short_selects": "not met",  # test_b at 0.90x
        "sqlalchemy_single_inserts": "met",
    }
    assert lines["select_floor_multiple"]["measured"] == "4.0x"
    assert lines["transaction_instructions"]["measured"] == "200,000 (57%)"
    assert lines["sqlalchemy_short_selects"]["measured"] == "0.90x at worst (test_b)"
    alone = verdicts(control_path.judge(Run(found, instructions=_counts(
        "compiled", 24_000, 240_000, 200_000))))
    assert alone["transaction_instructions"] == "not measured"  # no baseline to judge by
    failed = [{"suite": "single_inserts", "test": None, "error": "no network"}]
    line = {g["id"]: g for g in control_path.judge(Run(found, sqlalchemy_examples=failed))}
    assert line["sqlalchemy_single_inserts"]["status"] == "not measured"
    assert line["sqlalchemy_single_inserts"]["detail"] == "no network"


def test_fan_out_and_the_http_apps():
    http = [web("pgmux", "/queries?n=20", 3_000), web("psycopg2", "/queries?n=20", 1_300),
            web("pgmux", "/queries?n=20", 600, 10.0), web("psycopg2", "/queries?n=20", 30, 10.0),
            web("pgmux", "/db", 14_000), web("psycopg2", "/db", 8_500),
            web("pgmux", "/db", 5_800, 10.0),
            web("pgmux", "/updates?n=20", 1_900), web("psycopg2", "/updates?n=20", 1_000)]
    assert verdicts(fan_out.judge(Run([], http))) == {"queries20_local": "met",
                                                       "queries20_rtt10": "met"}  # 2.3x, 20x
    assert verdicts(http_apps.judge(Run([], http))) == {
        "db_local": "met",  # 1.65x
        "db_rtt10": "met",  # 5,800 >= 90 % of 6,400
        "updates5_local": "not measured", "updates20_local": "not met",  # 1.9x
        "updates20_rtt10": "not measured"}


def test_atomic_units():
    found = [
        op("pgmux", "tpcb_unit", 6_000, unit="tx"), op("psycopg2", "tpcb_unit", 5_000),
        op("psycopg3", "tpcb_unit", 6_500),  # the best one-shot form: 0.92x, not met
        op("pgbench", "tpcb_unit", 3_500),  # 1.71x: not met
        op("psycopg2", "tpcb_unit_tx", 2_500),  # 2.4x: met
        op("pgmux", "tpcb_unit", 3_000, rtt=10.0), op("psycopg2", "tpcb_unit", 240, rtt=10.0),
        op("psycopg2", "tpcb_unit_tx", 40, rtt=10.0),  # 75x: met; 12.5x psycopg2's one string
        op("pgmux", "tpcb_unit", 100, turns_counted=True, turns_per_query=0.1),
    ]
    lines = {g["id"]: g for g in atomic.judge(Run(found))}
    assert verdicts(list(lines.values())) == {
        "unit_vs_transaction": "met", "unit_vs_pgbench": "not met",
        "unit_vs_one_shot": "not met", "unit_vs_transaction_rtt10": "met",
        "unit_vs_one_shot_rtt10": "met"}
    assert lines["unit_vs_one_shot"]["measured"] == "0.92x (vs psycopg3 pipeline)"
    assert "0.10 round trips/tx" in lines["unit_vs_transaction"]["detail"]


def test_transactions_on_pinned_connections():
    found = [op("pgmux", "tpcb", 2_000, unit="tx"), op("psycopg2", "tpcb", 1_900),
             op("pgmux", "tpcb", 100, turns_counted=True, turns_per_query=6.0),
             op("pgmux", "tpcb_unit_tx", 3_000, server_cpu_us_per_query=260.0),
             op("psycopg2", "tpcb_unit_tx", 2_900, server_cpu_us_per_query=240.0)]
    assert verdicts(transactions.judge(Run(found))) == {
        "tpcb_vs_psycopg2": "met", "tpcb_round_trips": "met",
        "tpcb_scale1_vs_psycopg2": "not met",  # 1.03x < 1.5x
        "tpcb_scale1_server_cpu": "not met"}  # 0.92x


def test_the_orm():
    def request(client: str, workload: str, qps: float, rtt: float = 0.0, **extra) -> dict:
        return op(client, workload, qps, 300.0, rtt=rtt, unit="request",
                  server_cpu_us_per_query=100.0, **extra)

    found = [
        request("orm-pgmux", "orm_read", 6_000), request("orm-psycopg2", "orm_read", 2_200),
        request("orm-pgmux", "orm_read", 1_400, 10.0),
        request("orm-psycopg2", "orm_read", 100, 10.0),  # 14x < 15x
        request("orm-pgmux", "orm_mixed", 2_000), request("orm-psycopg2", "orm_mixed", 1_600),
        request("orm-pgmux", "orm_write", 1_000, kinds={"write": {"latency_ms": {"p99": 4.0}}}),
        request("orm-psycopg2", "orm_write", 800),  # 1.25x < 1.3x
        request("orm-pgmux", "orm_write", 70, 10.0), request("orm-psycopg2", "orm_write", 75, 10.0),
        op("orm-pgmux", "orm_sessions", 5, greenlets=1, connections=2, max_ms=180.0,
           censored=0),
    ]
    lines = {g["id"]: g for g in orm.judge(Run(found))}
    assert verdicts(list(lines.values())) == {
        "orm_read_local": "met", "orm_read_rtt10": "not met", "orm_mixed_local": "not met",
        "orm_mixed_rtt10": "not measured", "orm_write_local": "not met",
        "orm_write_rtt10": "not met", "orm_sessions": "met"}
    assert lines["orm_read_local"]["measured"] == "2.73x"
    assert "orm-pgmux (pipeline 1 + pinned 3) 6,000 req/s" in lines["orm_read_local"]["detail"]
    assert lines["orm_sessions"]["measured"] == "0.18 s"
    slow = [op("orm-pgmux", "orm_sessions", 0, greenlets=1, connections=2, max_ms=5_000.0,
               queries=0, censored=1)]  # still running at the window's end: counted so far
    assert verdicts(orm.judge(Run(slow)))["orm_sessions"] == "not met"


def test_large_results_and_streams():
    found = [op("pgmux", "wide", 200, greenlets=16, rows_per_s=200_000, cpu_us_per_row=2.0),
             op("psycopg2", "wide", 90, greenlets=16, rows_per_s=90_000, cpu_us_per_row=3.5),
             op("pgmux", "wide_stream", 1, greenlets=1, rows_per_s=140_000,
                cpu_us_per_row=2.0, rss_growth_mib=20.0),
             op("psycopg2", "wide_stream", 1, greenlets=1, rows_per_s=100_000,
                cpu_us_per_row=3.5)]
    assert verdicts(results.judge(Run(found))) == {
        "wide_speed": "met", "wide_cpu_per_row": "met",  # 2.2x, 1.75x
        "wide_stream_speed": "not met", "wide_stream_cpu_per_row": "met",  # 1.4x, 1.75x
        "wide_stream_memory": "not met"}  # +20 MiB


def test_pure_python():
    python = {"pgmux_implementation": "python"}
    counts = _counts("python", 75_000, 520_000, 470_000)
    before = {"results": [op("pgmux", "select_int", 90_000, **python),
                          op("psycopg2", "select_int", 29_000)],
              "instructions": _counts("python", 74_000, 500_000, 470_000)}
    found = [op("pgmux-python", "select_int", 90_000), op("psycopg2", "select_int", 30_000),
             op("pgmux-python", "wide", 96, greenlets=16, cpu=10.4),
             op("pgmux-before", "wide", 100, greenlets=16, cpu=10.0)]  # 0.96x, 0.96x
    assert verdicts(pure_python.judge(Run(found, instructions=counts, baseline=before))) == {
        "python_select_instructions": "met",  # 1.4 % more: within the counts' noise
        "python_unit_instructions": "not met",  # 4 % more
        "python_transaction_instructions": "met",
        "python_select_int": "met",  # 3.0x psycopg2 against 3.1x
        "python_select_int_4096": "not measured", "python_point_lookup": "not measured",
        "python_wide": "met", "python_tpcb": "not measured"}
    compiled = [op("pgmux", "select_int", 90_000), op("psycopg2", "select_int", 30_000)]
    assert verdicts(pure_python.judge(Run(compiled, baseline=before)))[
        "python_select_int"] == "not measured"  # pgmux compiled is not pure Python


def test_telemetry_cost():
    counts = [*_counts("compiled", 50_000, 390_000, 350_000),
              *_counts("compiled", 50_500, 399_000, 350_000, "api"),
              *_counts("compiled", 600_000, 900_000, 350_000, "sdk")]
    lines = {g["id"]: g for g in telemetry.judge(Run([], instructions=counts))}
    assert verdicts(list(lines.values())) == {
        "telemetry_select_int_compiled": "met",  # +1.0 %
        "telemetry_tpcb_unit_compiled": "not met",  # +2.3 %
        "telemetry_select_int_python": "not measured",
        "telemetry_tpcb_unit_python": "not measured"}
    assert lines["telemetry_select_int_compiled"]["measured"].startswith("+1.00 %")
    assert "+1100.0 %" in lines["telemetry_select_int_compiled"]["detail"]


def test_the_transport():
    micro = [{"stream": "field_1mib_text", "mode": "256k", "payload_copies": 3,
              "peak_over_payload": 3.1, "retained_buffer_bytes": 0}]
    assert verdicts(transport.judge(Run([], micro=micro))) == {
        "field_copies": "not met", "retained_buffers": "met"}


def test_the_psycopg2_drop_in():
    http = [web(app, endpoint, rps, rtt, 256, peak)
            for app, peak, figures in (("pgmux-psycopg2", 8, (5_000, 1_200, 460, 4_400, 520,
                                                             380)),
                                       ("psycopg2", 12, (4_000, 600, 300, 800, 35, 35)))
            for (endpoint, rtt), rps in zip(
                [(e, r) for r in (0.0, 10.0) for e in ("/db", "/queries?n=20",
                                                      "/updates?n=20")], figures, strict=True)]
    http.append(web("pgmux-psycopg2", "/db", 99_000, 10.0, 64))  # another load: not judged
    results = [op("pgmux-psycopg2", "psycopg2_read_tx", 8_000, greenlets=200, connections=200,
                  peak_server_connections=4, unit="tx"),
               op("psycopg2-per-greenlet", "psycopg2_read_tx", 3_000, greenlets=200,
                  connections=200, peak_server_connections=200, unit="tx"),
               op("pgmux-psycopg2", "cursor_select", 35_000, cpu=13.0, greenlets=64,
                  connections=64, peak_server_connections=4),
               op("pgmux-dbapi", "cursor_select", 36_000, cpu=12.0, greenlets=64,
                  connections=64, peak_server_connections=4),
               op("celery-pgmux", "celery_tasks", 380, greenlets=500, connections=100,
                  peak_server_connections=7, unit="task"),
               op("celery-psycopg2", "celery_tasks", 360, greenlets=500, connections=100,
                  peak_server_connections=100, unit="task")]
    counts = [{"implementation": "compiled", "config": "absent", "workload": workload,
               "instructions": count} for workload, count in (("psycopg2_cursor", 110_000),
                                                              ("dbapi_cursor", 85_000))]
    lines = {g["id"]: g for g in psycopg2_dropin.judge(
        Run(results, instructions=counts, psycopg2_http=http))}
    assert verdicts(lines.values()) == {
        "dropin_http_db_local": "not met",  # 1.25x
        "dropin_http_queries20_local": "met", "dropin_http_updates20_local": "met",  # 2x, 1.5x
        "dropin_http_db_rtt10": "not met",  # 5.5x
        "dropin_http_queries20_rtt10": "met", "dropin_http_updates20_rtt10": "met",  # 15x, 11x
        "dropin_greenlets_connections": "met", "dropin_greenlets_throughput": "met",
        "dropin_cursor_cpu": "met",  # 1.08x
        "dropin_cursor_instructions": "not met",  # 1.29x
        "dropin_celery_connections": "not met",  # 7 > 4 + 2
        "dropin_celery_tasks": "met"}
    assert lines["dropin_greenlets_connections"]["measured"] == "4 (psycopg2 200)"
    assert lines["dropin_http_db_rtt10"]["measured"].startswith("5.50x")
    assert "12 server connections" in lines["dropin_http_db_rtt10"]["detail"]
    quick = psycopg2_dropin.judge(Run(results[:2]))
    assert verdicts(quick)["dropin_http_db_local"] == "not measured"
    assert verdicts(quick)["dropin_cursor_cpu"] == "not measured"
    dropin = Plan(["pgmux-psycopg2", "pgmux-dbapi", "psycopg2-per-greenlet", "celery-pgmux",
                   "celery-psycopg2"], [0.0, 10.0])
    assert psycopg2_dropin.cases(dropin) == [
        (0.0, "cursor_select", 64, 64, "pgmux-psycopg2"),
        (0.0, "cursor_select", 64, 64, "pgmux-dbapi"),
        (0.0, "psycopg2_read_tx", 200, 200, "pgmux-psycopg2"),
        (0.0, "psycopg2_read_tx", 200, 200, "psycopg2-per-greenlet"),
        (0.0, "celery_tasks", 500, 100, "celery-pgmux"),
        (0.0, "celery_tasks", 500, 100, "celery-psycopg2")]
    assert psycopg2_dropin.cases(Plan(["pgmux-psycopg2"], [0.0], ["celery_tasks"])) == []


def test_the_areas_plan_the_cases_their_lines_need():
    cases = goals.cases(Plan(["pgmux", "psycopg2", "gevent"], [0.0]))
    assert len(cases) == len(set(cases))
    assert (0.0, "floor", 64, 0, "gevent") in cases
    assert (0.0, "select_int", 1, 1, "pgmux") in cases  # one greenlet, one connection
    assert {(g, c) for _, w, g, _, c in cases if w == "select_int"} == {
        (g, c) for g in (1, 64, 256, 1024, 4096) for c in ("pgmux", "psycopg2")}
    assert all(rtt == 0.0 for rtt, *_ in cases)
    assert {c[1] for c in goals.cases(Plan(["pgmux"], [0.0, 10.0], ["tpcb"]))} == {"tpcb"}
    assert hot_path.cases(Plan(["pgmux"], [10.0], ["tpcb"])) == []
    far = goals.cases(Plan(["orm-pgmux", "orm-psycopg2"], [10.0]))
    assert far == [(10.0, w, 64, 4, c) for w in ("orm_read", "orm_mixed", "orm_write")
                   for c in ("orm-pgmux", "orm-psycopg2")]


def test_goals_plan_the_checkout_before_beside_pure_python_when_it_is_given(
        monkeypatch, tmp_path):
    from pgmux.tooling.bench import build_parser
    from pgmux.tooling.bench.plan import settings_from

    def planned() -> set[str]:
        settings = settings_from(build_parser().parse_args(["--goals"]), ["--goals"])
        return {client for *_, client in settings.cases
                if client in ("pgmux-python", "pgmux-before")}

    monkeypatch.delenv("PGMUX_BENCH_BEFORE", raising=False)
    assert planned() == {"pgmux-python"}
    (tmp_path / "pgmux").mkdir()  # a checkout to compare with
    monkeypatch.setenv("PGMUX_BENCH_BEFORE", str(tmp_path))
    assert planned() == {"pgmux-python", "pgmux-before"}
