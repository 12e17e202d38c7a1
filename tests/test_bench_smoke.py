"""The benchmark suite: a few-second smoke run against the test server, and its pure helpers.

No timing is asserted: only that every client produced figures and that the
figures are computed and reported as documented.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shutil

import pytest
from gevent import socket
from gevent.server import StreamServer
from support.mux import wait_until

import pgmux
import pgmux._native
from pgmux.tooling.bench import SMOKE_STREAM_ROWS, _command, build_parser, main, settings_from
from pgmux.tooling.bench.clients import CLIENTS
from pgmux.tooling.bench.goals import GOAL_CASES, evaluate_goals
from pgmux.tooling.bench.hot_goals import SCALING_GREENLETS
from pgmux.tooling.bench.http import ENDPOINTS, dsn_via, http_result
from pgmux.tooling.bench.http import missing as missing_http
from pgmux.tooling.bench.micro import build_streams, chunks_of
from pgmux.tooling.bench.report import evaluate_targets, naive_needed
from pgmux.tooling.bench.runner import summarize
from pgmux.tooling.bench.suite import profile_breakdown, worker_groups
from pgmux.tooling.bench.turns import TurnCountingProxy

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def _installed_clients() -> list[str]:
    return [name for name, adapter in CLIENTS.items() if not adapter.missing() and adapter.in_all]


def _runs(client: str, workload: str) -> bool:
    only = CLIENTS[client].workloads  # pgbench runs tpcb_unit only
    return only is None or workload in only


def test_smoke_run_gives_figures_for_every_client(pg, tmp_path):
    path = tmp_path / "bench.json"
    plot = tmp_path / "bench.png"
    argv = ["--smoke", "--dsn", pg.dsn, "--json", str(path)]
    if HAS_MATPLOTLIB:
        argv += ["--plot", str(plot)]
    assert main(argv) == 0
    document = json.loads(path.read_text())
    clients = _installed_clients()
    assert document["settings"]["clients"] == clients
    for client in clients:
        for workload in filter(lambda w: _runs(client, w), document["settings"]["workloads"]):
            found = [r for r in document["results"]
                     if r["client"] == client and r["workload"] == workload]
            assert len(found) == 1, (client, workload)
            result = found[0]
            assert result["qps"] > 0 and result["queries"] > 0, result
            assert result["errors"] == 0, result["first_error"]
            assert result["latency_ms"]["p99"] >= result["latency_ms"]["p50"] > 0
            assert result["cpu_us_per_query"] > 0
            assert result["peak_server_connections"] == result["connections"]
            assert result["pgmux_implementation"] == pgmux.implementation
    assert document["machine"]["pgmux_implementation"] == pgmux._native.describe()
    multiplexed = [r for r in document["results"] if r["client"] == "pgmux"]
    assert all(r["fill"]["units_per_readable"] > 0 for r in multiplexed)
    assert pg.dsn not in path.read_text()  # a DSN may carry a password
    if HAS_MATPLOTLIB:
        assert plot.read_bytes().startswith(b"\x89PNG")


def test_smoke_run_through_the_delay_proxy(pg, tmp_path):
    path = tmp_path / "bench.json"
    argv = ["--smoke", "--dsn", pg.dsn, "--clients", "pgmux", "--workloads", "select_int",
            "--rtt-ms", "2", "--json", str(path)]
    assert main(argv) == 0
    (result,) = json.loads(path.read_text())["results"]
    assert result["rtt_ms"] == 2 and result["qps"] > 0
    assert result["latency_ms"]["p50"] >= 2.0  # every query crossed the delay line


def test_micro_benchmarks_report_copies_and_retained_buffers(tmp_path):
    path = tmp_path / "micro.json"
    assert main(["--micro", "--quick", "--json", str(path)]) == 0
    document = json.loads(path.read_text())
    micro = document["micro"]
    assert {m["stream"] for m in micro} >= {"rows256", "field_1mib_text", "copy_128x8k",
                                            "error_drain"}
    for m in micro:
        assert m["time_us"] > 0 and m["peak_alloc_bytes"] > 0
        assert m["retained_buffer_bytes"] >= 0
    field = [m for m in micro if m["stream"] == "field_1mib_text"]
    assert all(m["payload_copies"] >= 1 for m in field)  # the decoded value is one copy
    assert {t["id"] for t in document["targets"]} == {"field_copies", "retained_buffers"}


# -- pure helpers ------------------------------------------------------------------------------


def test_summarize_gives_percentiles_and_a_monotone_cdf():
    latencies = [i / 1000 for i in range(1, 1001)]  # 1 ms .. 1000 ms
    figures = summarize(latencies)
    assert figures["latency_ms"]["p50"] == pytest.approx(500, abs=1)
    assert figures["latency_ms"]["p99"] == pytest.approx(990, abs=1)
    assert figures["latency_ms"]["max"] == 1000
    cdf = figures["cdf_ms"]
    assert len(cdf) == 101 and cdf == sorted(cdf) and cdf[0] == 1 and cdf[-1] == 1000
    assert summarize([]) == {"latency_ms": {}, "cdf_ms": []}


def test_every_delivery_mode_reassembles_the_stream():
    for stream in build_streams():
        for mode in ("bytes-1", "header-split", "1448", "16k", "256k"):
            if mode == "bytes-1" and len(stream.data) > 100_000:
                continue
            chunks = chunks_of(stream.data, mode)
            assert b"".join(chunks) == stream.data, (stream.name, mode)
    rows = build_streams()[0].data
    assert max(len(c) for c in chunks_of(rows, "bytes-1")) == 1


def _result(client: str, rtt: float, qps: float, p99: float = 1.0, cpu: float = 10.0,
            connections: int = 4) -> dict:
    return {"client": client, "workload": "select_int", "greenlets": 64,
            "connections": connections, "rtt_ms": rtt, "qps": qps, "queries": int(qps),
            "cpu_us_per_query": cpu, "peak_server_connections": connections,
            "latency_ms": {"p50": p99 / 2, "p99": p99}}


def test_targets_are_judged_from_the_figures():
    results = [
        _result("pgmux", 0, 70_000, cpu=12.0), _result("psycopg2", 0, 30_000),
        _result("pgmux", 10, 5_000, p99=25.0), _result("psycopg2", 10, 400),
        _result("pgmux-inflight1", 10, 390),
    ]
    micro = [{"stream": "field_1mib_text", "mode": "256k", "payload_copies": 3,
              "peak_over_payload": 3.1, "retained_buffer_bytes": 0}]
    status = {t["id"]: t["status"] for t in evaluate_targets(results, micro)}
    assert status == {
        "local_vs_psycopg2": "met",  # 2.33x
        "local_qps": "met",
        "local_cpu": "met",
        "rtt_throughput": "met",  # 12.5x the strongest naive pool (psycopg2)
        "rtt_p99": "not met",  # 25 ms >= 2 x 10 ms
        "rtt_connections": "met",  # 4 conns vs 5000 / (400 / 4) = 50 needed: 12.5x
        "field_copies": "not met",
        "retained_buffers": "met",
    }


def test_missing_figures_are_not_measured_rather_than_met():
    status = {t["id"]: t["status"] for t in evaluate_targets([_result("pgmux", 0, 90_000)], [])}
    assert status["local_vs_psycopg2"] == "not measured"
    assert status["rtt_throughput"] == "not measured"
    assert "field_copies" not in status  # the micro-benchmarks did not run


def test_naive_connections_needed_to_match():
    assert naive_needed(_result("pgmux", 10, 5_000), _result("psycopg2", 10, 400)) == 50


def test_the_recorded_command_leaves_the_dsn_out():
    shown = _command(["--dsn", "postgresql://u:secret@h/db", "--quick", "--dsn=x://p:w@h"])
    assert "secret" not in shown and "p:w" not in shown
    assert shown == "pgmux bench --dsn DSN --quick --dsn=DSN"


# -- issue 14's workloads and goals ------------------------------------------------------------

GOAL_WORKLOADS = ("select_int", "point_lookup", "slow_mix", "tpcb", "wide", "wide_stream")
GOAL_IDS = {
    "tpcb_throughput", "tpcb_round_trips", "wide_rows", "wide_cpu", "wide_stream_rows",
    "wide_stream_cpu", "wide_stream_memory", "mux_local", "mux_cpu", "mux_rtt10", "mux_g1024",
    "http_db_local", "http_queries_local", "http_updates_local", "http_db_rtt10",
    "http_queries_rtt10", "slow_mix_p99",
}
COMPILED_GOAL_IDS = {  # issue 21's
    "wide_rows_21", "wide_cpu_21", "wide_stream_rows_21", "wide_stream_cpu_21", "mux_local_21",
    "mux_cpu_21", "tpcb_21", "http_db_local_21", "http_queries_local_21", "flat_cpu_21",
    "flat_qps_21", "pure_select_int_21", "pure_wide_21", "pure_tpcb_21",
}


BENCH_DB = "pgmux_bench_smoke"


@pytest.fixture(scope="module")
def bench_dsn(pg):
    """A database of the bench's own: its tables (and the example's `world`, created by the
    superuser) must not change what the other tests' roles may do in the test database."""
    return pg.database(BENCH_DB)


def _measured(document: dict, client: str, workload: str) -> list[dict]:
    return [r for r in document["results"] if r["client"] == client
            and r["workload"] == workload and not r["turns_counted"]]


# About a minute (every goal case, each client): a long variant, run by .ci/run.
@pytest.mark.slow
def test_goal_smoke_run_exercises_every_new_workload(bench_dsn, tmp_path):
    clients = [c for c in ("pgmux", "psycopg2") if c in _installed_clients()]
    path = tmp_path / "goals.json"
    argv = ["--smoke", "--goals", "--dsn", bench_dsn, "--clients", ",".join(clients),
            "--json", str(path)]
    if HAS_MATPLOTLIB:
        argv += ["--plot", str(tmp_path / "goals.png")]
    assert main(argv) == 0
    document = json.loads(path.read_text())
    assert document["errors"] == []
    for client in clients:
        for workload in GOAL_WORKLOADS:
            found = _measured(document, client, workload)
            greenlets = {g for w, g, rtt in GOAL_CASES if w == workload and rtt == 0}
            if workload == "select_int":  # and issue 27's scaling cases
                greenlets |= set(SCALING_GREENLETS)
            assert len(found) == len(greenlets), (client, workload)
            for result in found:
                assert result["queries"] > 0 and result["errors"] == 0, result["first_error"]
                assert result["peak_server_connections"] == 4
                assert result["rss_peak_mib"] > 0 and result["rss_growth_mib"] >= 0
        (wide,) = _measured(document, client, "wide")
        assert wide["rows_per_op"] == 1000 and wide["cpu_us_per_row"] > 0
        assert wide["rows_per_s"] == pytest.approx(wide["qps"] * 1000, rel=0.01)
        (stream,) = _measured(document, client, "wide_stream")
        assert stream["rows_per_op"] == SMOKE_STREAM_ROWS and stream["unit"] == "stream"
        (mix,) = _measured(document, client, "slow_mix")
        assert mix["kinds"]["fast"]["latency_ms"]["p99"] > 0
        assert sum(k["queries"] for k in mix["kinds"].values()) == mix["queries"]
        (counted,) = [r for r in document["results"] if r["client"] == client
                      and r["workload"] == "tpcb" and r["turns_counted"]]
        # each of the 5 statements waits for its reply, and so does COMMIT
        assert counted["turns_per_query"] >= 5.5 and counted["bytes_out_per_query"] > 0
    if "psycopg2" in clients:  # BEGIN, 5 statements, COMMIT: one round trip each
        (counted,) = [r for r in document["results"] if r["client"] == "psycopg2"
                      and r["workload"] == "tpcb" and r["turns_counted"]]
        assert counted["turns_per_query"] == pytest.approx(7.0, abs=0.5)
    goals = {g["id"]: g for g in document["goals"]}
    assert goals.keys() == GOAL_IDS | COMPILED_GOAL_IDS
    assert all(g["status"] in ("met", "not met", "not measured") for g in goals.values())
    assert goals["mux_rtt10"]["status"] == "not measured"  # no 10 ms RTT in a smoke run
    assert goals["http_db_rtt10"]["status"] == "not measured"
    both = "psycopg2" in clients  # the ratio goals need both sides
    for key in ("tpcb_throughput", "wide_rows", "wide_stream_cpu", "mux_local", "slow_mix_p99"):
        assert (goals[key]["status"] != "not measured") == both, goals[key]
    _check_http(document, clients, goals)
    _check_units(document, clients)
    _check_hot(document, clients)


HOT_GOAL_IDS = {"mux_local_27", "mux_cpu_27", "mux_python_27", "flat_cpu_27", "flat_qps_27",
                "http_queries20_27", "http_updates20_27", "http_db_27", "unit_rtt10_27",
                "unit_pgbench_27", "pure_select_int_27"}


def _check_hot(document: dict, clients: list[str]) -> None:
    """Issue 27's goals are judged where both sides ran; its scaling cases ran."""
    hot = {g["id"]: g["status"] for g in document["hot_goals"]}
    assert hot.keys() == HOT_GOAL_IDS
    both = "psycopg2" in clients
    assert (hot["mux_local_27"] != "not measured") == both
    assert hot["mux_cpu_27"] != "not measured" and hot["flat_cpu_27"] != "not measured"
    assert hot["mux_python_27"] == "not measured"  # pgmux-python is not among the clients
    assert hot["unit_rtt10_27"] == hot["unit_pgbench_27"] == "not measured"
    for client in clients:
        assert {r["greenlets"] for r in _measured(document, client, "select_int")} == set(
            SCALING_GREENLETS)


UNIT_GOAL_IDS = {"unit_vs_tx", "unit_vs_pgbench", "unit_vs_one_shot", "unit_vs_tx_rtt10",
                 "unit_vs_one_shot_rtt10", "http_updates20", "http_updates20_rtt10"}


def _check_units(document: dict, clients: list[str]) -> None:
    """Issue 19's cases ran for both clients, its goals are judged where both sides ran."""
    for client in clients:
        for workload in ("tpcb_unit", "tpcb_unit_tx"):
            (result,) = _measured(document, client, workload)
            assert result["queries"] > 0 and result["errors"] == 0, result["first_error"]
            assert result["unit"] == "tx" and result["peak_server_connections"] == 4
    counted = {r["client"]: r for r in document["results"]
               if r["workload"] == "tpcb_unit" and r["turns_counted"]}
    assert counted.keys() == set(clients)
    assert counted["pgmux"]["turns_per_query"] < 1  # many greenlets' units share each write
    if "psycopg2" in counted:  # the five statements in one string: one round trip
        assert counted["psycopg2"]["turns_per_query"] == pytest.approx(1.0, abs=0.2)
    units = {g["id"]: g["status"] for g in document["unit_goals"]}
    assert units.keys() == UNIT_GOAL_IDS
    both = "psycopg2" in clients
    assert (units["unit_vs_tx"] != "not measured") == both
    assert (units["unit_vs_one_shot"] != "not measured") == both
    assert units["unit_vs_pgbench"] == "not measured"  # pgbench is not among the clients
    assert units["unit_vs_tx_rtt10"] == units["http_updates20_rtt10"] == "not measured"


def _check_http(document: dict, clients: list[str], goals: dict) -> None:
    reasons = missing_http(clients)
    if reasons:
        (note,) = [n for n in document["notes"] if n.startswith("http suite skipped")]
        assert all(reason in note for reason in reasons)
        assert document["http"] == [] and goals["http_db_local"]["status"] == "not measured"
        return
    for app in clients:
        found = {r["endpoint"]: r for r in document["http"] if r["app"] == app}
        assert found.keys() == set(ENDPOINTS), app
        for result in found.values():
            assert result["requests"] > 0 and result["errors"] == 0, result
            assert result["latency_ms"]["p99"] >= result["latency_ms"]["p50"] > 0
            assert result["app_cpu_us_per_request"] > 0
            assert 1 <= result["peak_server_connections"] <= 12  # 6 per worker at most
    judged = goals["http_db_local"]["status"] != "not measured"
    assert judged == ("psycopg2" in clients)


def test_a_turn_is_a_write_after_a_reply_however_it_is_cut():
    """Two writes before the reply are one round trip; the next write after it is another."""

    def read(sock, size: int) -> bytes:
        data = b""
        while len(data) < size and (chunk := sock.recv(size - len(data))):
            data += chunk
        return data

    def serve(sock, _address):  # answers each 4 bytes with 2, whatever the chunks
        with sock:
            while len(read(sock, 4)) == 4:
                sock.sendall(b"ok")

    server = StreamServer(("127.0.0.1", 0), serve)
    server.start()
    proxy = TurnCountingProxy(server.address).start()
    try:
        with socket.create_connection(proxy.address) as client:
            for _ in range(3):
                client.sendall(b"ab")
                client.sendall(b"cd")
                assert read(client, 2) == b"ok"
        wait_until(lambda: proxy.counts.bytes_in == 6, timeout=5, what="the replies")
        assert (proxy.counts.turns, proxy.counts.bytes_out) == (3, 12)
    finally:
        proxy.stop()
        server.stop()


def test_the_comparison_clients_run_in_their_own_implementation(pg, tmp_path, monkeypatch):
    """pgmux-python runs with PGMUX_PURE_PYTHON=1; pgmux-before runs the checkout named by
    $PGMUX_BENCH_BEFORE (this one here) as "pgmux", and its results come back under its name."""
    before = tmp_path / "before"  # a checkout whose runner says which checkout ran
    shutil.copytree(os.path.join(os.path.dirname(EXAMPLES), "pgmux"), before / "pgmux",
                    ignore=shutil.ignore_patterns("__pycache__"))
    runner = before / "pgmux" / "tooling" / "bench" / "runner.py"
    runner.write_text(runner.read_text().replace(
        '"pgmux_implementation": implementation,', '"pgmux_implementation": "before",'))
    monkeypatch.setenv("PGMUX_BENCH_BEFORE", str(before))
    path = tmp_path / "variants.json"
    assert main(["--smoke", "--dsn", pg.dsn, "--clients", "pgmux-python,pgmux-before",
                 "--workloads", "select_int", "--json", str(path)]) == 0
    results = json.loads(path.read_text())["results"]
    assert {r["client"]: r["pgmux_implementation"] for r in results} == {
        "pgmux-python": "python", "pgmux-before": "before"}
    assert all(r["queries"] > 0 and r["errors"] == 0 for r in results)
    monkeypatch.delenv("PGMUX_BENCH_BEFORE")
    assert CLIENTS["pgmux-before"].missing() and not CLIENTS["pgmux-python"].missing()


def _settings(*argv: str):
    parser = build_parser()
    return settings_from(parser.parse_args(list(argv)), list(argv))


def test_the_goal_cases_are_planned_as_issue_14_says():
    settings = _settings("--goals", "--clients", "pgmux,psycopg2")
    assert settings.goals and settings.interleave and settings.connections == [4]
    assert {(rtt, w, g) for rtt, w, g, c, _ in settings.cases} == {
        (rtt, w, g) for w, g, rtt in GOAL_CASES} | {  # and issue 19's
        (rtt, w, 64) for w in ("tpcb_unit", "tpcb_unit_tx") for rtt in (0.0, 10.0)} | {
        (0.0, "select_int", g) for g in SCALING_GREENLETS}  # and issue 27's scaling
    assert {c[3] for c in settings.cases} == {4}  # 4 server connections each
    assert {c[4] for c in settings.cases} == {"pgmux", "psycopg2"}
    assert set(settings.profile_workloads) == {"select_int", "tpcb", "wide", "tpcb_unit"}
    if not missing_http(["pgmux", "psycopg2"]):
        assert settings.http_rtts == [0.0, 10.0] and settings.http_apps == ["pgmux", "psycopg2"]
    filtered = _settings("--goals", "--workloads", "tpcb", "--rtt-ms", "0", "--clients", "pgmux")
    assert filtered.cases == [(0.0, "tpcb", 64, 4, "pgmux")] and filtered.http_rtts == []
    matrix = _settings("--workloads", "tpcb,select_int", "--greenlets", "8", "--rtt-ms", "0",
                       "--clients", "pgmux-inflight1,pgmux")
    assert not matrix.goals  # explicit workloads: the matrix only
    # tpcb needs transactions: only pgmux, psycopg2 and psycopg3 run it
    assert sorted(matrix.cases) == [(0.0, "select_int", 8, 4, "pgmux"),
                                    (0.0, "select_int", 8, 4, "pgmux-inflight1"),
                                    (0.0, "tpcb", 8, 4, "pgmux")]
    with pytest.raises(ValueError):
        _settings("--stream-rows", "100001")


def test_workers_group_cases_by_client_or_one_per_case():
    cases = [(0.0, "select_int", 64, 4, "pgmux"), (0.0, "wide_stream", 1, 4, "pgmux"),
             (0.0, "tpcb", 64, 4, "pgmux"), (0.0, "tpcb", 64, 4, "psycopg2")]
    assert worker_groups(cases) == [("pgmux", 4, [("select_int", 64), ("tpcb", 64)]),
                                    ("pgmux", 4, [("wide_stream", 1)]),
                                    ("psycopg2", 4, [("tpcb", 64)])]
    # the goal runs: a worker per case, in the order given (a case's clients back to back)
    assert worker_groups(cases, interleave=True) == [
        ("pgmux", 4, [("select_int", 64)]), ("pgmux", 4, [("wide_stream", 1)]),
        ("pgmux", 4, [("tpcb", 64)]), ("psycopg2", 4, [("tpcb", 64)])]


def _op(client: str, workload: str, qps: float, greenlets: int = 64, **extra) -> dict:
    return {"client": client, "workload": workload, "greenlets": greenlets, "connections": 4,
            "rtt_ms": extra.pop("rtt_ms", 0.0), "qps": qps, "queries": int(qps) + 1,
            "cpu_us_per_query": extra.pop("cpu", 100.0), "unit": "query",
            "latency_ms": {"p50": 1.0, "p99": extra.pop("p99", 2.0)}, **extra}


def _web(app: str, endpoint: str, rps: float, rtt: float = 0.0) -> dict:
    return {"app": app, "endpoint": endpoint, "rtt_ms": rtt, "rps": rps, "requests": int(rps),
            "latency_ms": {"p99": 10.0}}


def test_goals_are_judged_from_the_figures():
    results = [
        _op("pgmux", "tpcb", 2_000), _op("psycopg2", "tpcb", 1_600),  # 1.25x: not met
        _op("pgmux", "tpcb", 100, turns_counted=True, turns_per_query=6.0,
            bytes_out_per_query=500, bytes_in_per_query=200),
        _op("pgmux", "wide", 100, 16, rows_per_s=100_000, cpu_us_per_row=3.0),
        _op("psycopg2", "wide", 90, 16, rows_per_s=90_000, cpu_us_per_row=3.3),
        _op("pgmux", "wide_stream", 1, 1, rows_per_s=90_000, cpu_us_per_row=4.0,
            rss_growth_mib=20.0),
        _op("psycopg2", "wide_stream", 1, 1, rows_per_s=100_000, cpu_us_per_row=3.0),
        _op("pgmux", "select_int", 80_000, cpu=9.0), _op("psycopg2", "select_int", 30_000),
        _op("pgmux", "select_int", 5_000, rtt_ms=10.0), _op("psycopg2", "select_int", 400,
                                                            rtt_ms=10.0),
        _op("pgmux", "slow_mix", 9_000, kinds={"fast": {"latency_ms": {"p99": 5.0}}}),
        _op("pgmux", "point_lookup", 9_000, p99=2.0),  # 2.5x without slow queries: met
    ]
    http = [_web("pgmux", "/db", 12_000), _web("psycopg2", "/db", 6_000),
            _web("pgmux", "/queries?n=20", 1_500), _web("psycopg2", "/queries?n=20", 600),
            _web("pgmux", "/db", 5_800, 10.0), _web("psycopg2", "/db", 900, 10.0)]
    baseline = [_op("pgmux", "select_int", 5_000, rtt_ms=10.0),
                _op("psycopg2", "select_int", 380, rtt_ms=10.0)]  # 13.2x before, 12.5x now
    status = {g["id"]: g["status"] for g in evaluate_goals(results, http, baseline)
              if not g["id"].endswith("_21")}
    assert status == {
        "tpcb_throughput": "not met", "tpcb_round_trips": "met",
        "wide_rows": "met", "wide_cpu": "met",
        "wide_stream_rows": "not met", "wide_stream_cpu": "not met",
        "wide_stream_memory": "not met",  # +20 MiB
        "mux_local": "met", "mux_cpu": "met",
        "mux_rtt10": "met",  # 12.5x >= 90% of 13.2x
        "mux_g1024": "not measured",
        "http_db_local": "met", "http_queries_local": "not met",  # 2.5x < 3x
        "http_updates_local": "not measured",
        "http_db_rtt10": "met",  # 5,800 >= 90% of 6,400
        "http_queries_rtt10": "not measured",
        "slow_mix_p99": "met",
    }
    worse = [_op("pgmux", "select_int", 5_000, rtt_ms=10.0),
             _op("psycopg2", "select_int", 250, rtt_ms=10.0)]  # 20x before
    status = {g["id"]: g["status"] for g in evaluate_goals(results, http, worse)}
    assert status["mux_rtt10"] == "not met"
    assert {g["id"]: g["status"] for g in evaluate_goals(results, http)}["mux_rtt10"] == (
        "not measured")  # no baseline given


def test_issue_21_goals_are_judged_from_the_figures():
    python = {"pgmux_implementation": "python"}
    results = [
        _op("pgmux", "wide", 150, 16, rows_per_s=150_000, cpu_us_per_row=2.0, **python),
        _op("psycopg2", "wide", 100, 16, rows_per_s=100_000, cpu_us_per_row=3.5),
        _op("pgmux", "wide_stream", 1, 1, rows_per_s=140_000, cpu_us_per_row=2.0),
        _op("psycopg2", "wide_stream", 1, 1, rows_per_s=100_000, cpu_us_per_row=3.5),
        _op("pgmux", "select_int", 90_000, cpu=7.5, **python),
        _op("psycopg2", "select_int", 30_000),
        _op("pgmux", "select_int", 70_000, 4096, cpu=9.0),  # 1.2x the CPU, 78% the q/s
        _op("pgmux", "tpcb", 3_000, **python), _op("psycopg2", "tpcb", 4_000),
    ]
    http = [_web("pgmux", "/db", 16_000), _web("psycopg2", "/db", 10_000),
            _web("pgmux", "/queries?n=20", 1_900), _web("psycopg2", "/queries?n=20", 1_000)]
    baseline = [_op("pgmux", "select_int", 90_000), _op("psycopg2", "select_int", 29_000),
                _op("pgmux", "tpcb", 3_300), _op("psycopg2", "tpcb", 4_000)]
    status = {g["id"]: g["status"] for g in evaluate_goals(results, http, baseline)
              if g["id"].endswith("_21")}
    assert status == {
        "wide_rows_21": "met", "wide_cpu_21": "met",  # 1.5x, 1.75x
        "wide_stream_rows_21": "not met", "wide_stream_cpu_21": "met",  # 1.4x, 1.75x
        "mux_local_21": "met", "mux_cpu_21": "met", "tpcb_21": "not met",
        "http_db_local_21": "met", "http_queries_local_21": "not met",  # 1.6x, 1.9x
        "flat_cpu_21": "met", "flat_qps_21": "not met",
        "pure_select_int_21": "met",  # 3.0x >= 95% of 3.1x
        "pure_wide_21": "not measured",  # not in the baseline
        "pure_tpcb_21": "not met",  # 0.75x < 95% of 0.825x
    }
    compiled = [{**r, "pgmux_implementation": "compiled"} for r in results]
    assert {g["id"]: g["status"] for g in evaluate_goals(compiled, http, baseline)}[
        "pure_select_int_21"] == "not measured"  # needs a pure-Python run
    side_by_side = [*compiled, _op("pgmux-python", "wide", 96, 16, cpu=10.4),
                    _op("pgmux-before", "wide", 100, 16, cpu=10.0),  # 0.96x, 0.96x: met
                    _op("pgmux-python", "tpcb", 100, cpu=11.0),
                    _op("pgmux-before", "tpcb", 100, cpu=10.0)]  # 0.91x the CPU: not met
    status = {g["id"]: g["status"] for g in evaluate_goals(side_by_side, http)}
    assert (status["pure_wide_21"], status["pure_tpcb_21"]) == ("met", "not met")


def test_wrk_figures_become_a_result():
    wrk = {"requests": 5_000, "duration_us": 2_000_000, "connect": 0, "read": 1, "write": 0,
           "status": 2, "timeout": 0, "mean_us": 4_000.0, "max_us": 30_000.0,
           "p50_us": 3_500.0, "p90_us": 6_000.0, "p99_us": 12_000.0, "p999_us": 25_000.0}
    from pgmux.tooling.bench.http import APPS

    result = http_result(APPS["pgmux"], "/db", 10.0, wrk, cpu=1.0, peak=6)
    assert result["rps"] == 2_500 and result["errors"] == 3 and result["non_2xx"] == 2
    assert result["latency_ms"]["p99"] == 12.0 and result["app_cpu_us_per_request"] == 200
    assert result["peak_server_connections"] == 6
    assert result["pgmux_implementation"] == pgmux.implementation


def test_the_apps_dsn_goes_through_the_delay_proxy():
    dsn = dsn_via("postgresql://app:s3cr'et@db.example:5432/shop?sslmode=disable",
                  "127.0.0.1", 6001)
    from pgmux.io.dsn import parse_dsn

    assert parse_dsn(dsn) == {"user": "app", "password": "s3cr'et", "dbname": "shop",
                              "sslmode": "disable", "host": "127.0.0.1", "port": "6001"}


def test_the_psycopg2_app_serves_the_same_endpoints(pg, bench_dsn, monkeypatch):
    pytest.importorskip("psycogreen")
    pytest.importorskip("psycopg2")
    monkeypatch.setenv("PGMUX_DSN", bench_dsn)
    monkeypatch.syspath_prepend(EXAMPLES)
    from pgmux.tooling.bench.http import seed_world

    seed_world(bench_dsn)
    app = importlib.import_module("wsgi_app_psycopg2")
    try:
        def get(path: str, query: str = "") -> tuple[str, object]:
            seen = []
            body = app.application({"PATH_INFO": path, "QUERY_STRING": query},
                                   lambda status, headers: seen.append(status))
            return seen[0], json.loads(b"".join(body))

        status, row = get("/db")
        assert status == "200 OK" and set(row) == {"id", "randomNumber"}
        status, rows = get("/queries", "n=20")
        assert status == "200 OK" and len(rows) == 20
        status, updated = get("/updates", "n=5")
        assert status == "200 OK" and len(updated) == 5
        for world in updated:  # committed
            stored = pg.admin(f"SELECT randomnumber FROM world WHERE id = {world['id']}",
                              dbname=BENCH_DB)
            assert int(stored) == world["randomNumber"]
        assert get("/nowhere")[0] == "404 Not Found"
    finally:
        app.close_client()


def test_a_profile_is_broken_down_per_operation_and_per_file(tmp_path):
    import cProfile

    def decode(row: bytes) -> list[int]:
        return [int(part) for part in row.split(b",")]

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(200):  # 200 operations of 10 rows
        for _ in range(10):
            decode(b"1,2,3,4,5,6,7,8")
    profiler.disable()
    path = str(tmp_path / "p.prof")
    profiler.dump_stats(path)
    text = profile_breakdown(path, operations=200, rows=10, unit="result", count=5,
                             measured_cpu_us=50.0)
    header, *lines = text.splitlines()
    assert header.split()[:6] == ["share", "us/result", "us/row", "est", "us/result", "est"]
    (decoder,) = [line for line in lines if "(decode)" in line]
    assert decoder.split()[-2] == "10.00"  # calls per operation
    by_file = lines[lines.index("by file (own time of its functions; builtins by name):") + 1:]
    assert any(line.endswith("test_bench_smoke.py") for line in by_file)
    shares = [float(line.split()[0].rstrip("%")) for line in by_file[:-1]]
    assert shares == sorted(shares, reverse=True) and sum(shares) <= 100.5
    assert by_file[-1].startswith("total own time") and "50.0 us/result measured" in by_file[-1]
