"""The benchmark suite: a few-second smoke run against the test server, and its pure helpers.

No timing is asserted: only that every client produced figures and that the
figures are computed and reported as documented.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from pgmux.bench import _command, main
from pgmux.bench.clients import CLIENTS
from pgmux.bench.micro import build_streams, chunks_of
from pgmux.bench.report import evaluate_targets, naive_needed
from pgmux.bench.runner import summarize

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def _installed_clients() -> list[str]:
    return [name for name, adapter in CLIENTS.items() if not adapter.missing()]


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
        for workload in document["settings"]["workloads"]:
            found = [r for r in document["results"]
                     if r["client"] == client and r["workload"] == workload]
            assert len(found) == 1, (client, workload)
            result = found[0]
            assert result["qps"] > 0 and result["queries"] > 0, result
            assert result["errors"] == 0, result["first_error"]
            assert result["latency_ms"]["p99"] >= result["latency_ms"]["p50"] > 0
            assert result["cpu_us_per_query"] > 0
            assert result["peak_server_connections"] == result["connections"]
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
