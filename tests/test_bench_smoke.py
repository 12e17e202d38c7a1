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
from pgmux.tooling.bench import build_parser, goals, main
from pgmux.tooling.bench.clients import CLIENTS
from pgmux.tooling.bench.goals.common import Plan
from pgmux.tooling.bench.http import ENDPOINTS, dsn_via, http_result
from pgmux.tooling.bench.http import missing as missing_http
from pgmux.tooling.bench.micro import build_streams, chunks_of
from pgmux.tooling.bench.plan import SMOKE_STREAM_ROWS, command, settings_from
from pgmux.tooling.bench.profiles import profile_breakdown
from pgmux.tooling.bench.runner import summarize
from pgmux.tooling.bench.turns import TurnCountingProxy
from pgmux.tooling.bench.workers import worker_groups

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def _installed_clients() -> list[str]:
    return [name for name, adapter in CLIENTS.items() if not adapter.missing() and adapter.in_all]


def _runs(client: str, workload: str) -> bool:
    only = CLIENTS[client].workloads  # pgbench runs tpcb_unit only, gevent the floor
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
    workloads = [w for w in document["settings"]["workloads"] if w != "floor"]
    for client in clients:
        for workload in filter(lambda w: _runs(client, w), workloads):
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
    _check_floor(document)
    assert pg.dsn not in path.read_text()  # a DSN may carry a password
    if HAS_MATPLOTLIB:
        assert plot.read_bytes().startswith(b"\x89PNG")


def _check_floor(document: dict) -> None:
    """gevent's floor ran first, and each case's CPU per operation is a multiple of it."""
    (floor,) = [r for r in document["results"] if r["workload"] == "floor"]
    assert document["settings"]["cases"][0] == [0.0, "floor", 64, 0, "gevent"]
    assert floor["client"] == "gevent" and floor["queries"] > 0 and floor["unit"] == "round"
    assert floor["cpu_us_per_query"] > 0 and floor["cpu_floor_multiple"] == 1.0
    assert document["floor"] == floor
    for r in document["results"]:
        assert r["cpu_floor_multiple"] == pytest.approx(
            r["cpu_us_per_query"] / floor["cpu_us_per_query"], abs=0.01), r


def test_smoke_run_through_the_delay_proxy(pg, tmp_path):
    path = tmp_path / "bench.json"
    argv = ["--smoke", "--dsn", pg.dsn, "--clients", "pgmux", "--workloads", "select_int",
            "--rtt-ms", "2", "--json", str(path)]
    assert main(argv) == 0
    (result,) = [r for r in json.loads(path.read_text())["results"] if r["client"] == "pgmux"]
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
    assert {g["id"] for g in document["goals"]} == {"field_copies", "retained_buffers"}


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


def test_the_recorded_command_leaves_the_dsn_out():
    shown = command(["--dsn", "postgresql://u:secret@h/db", "--quick", "--dsn=x://p:w@h"])
    assert "secret" not in shown and "p:w" not in shown
    assert shown == "pgmux bench --dsn DSN --quick --dsn=DSN"


# -- the goal cases -----------------------------------------------------------------------------

GOAL_WORKLOADS = ("select_int", "point_lookup", "slow_mix", "tpcb", "wide", "wide_stream")


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
def test_goal_smoke_run_exercises_every_goal_case(bench_dsn, tmp_path):
    clients = [c for c in ("pgmux", "psycopg2") if c in _installed_clients()]
    path = tmp_path / "goals.json"
    markdown = tmp_path / "page.md"
    argv = ["--smoke", "--goals", "--dsn", bench_dsn, "--clients", ",".join(clients),
            "--json", str(path), "--markdown", str(markdown)]
    if HAS_MATPLOTLIB:
        argv += ["--plot", str(tmp_path / "goals.png")]
    assert main(argv) == 0
    document = json.loads(path.read_text())
    assert document["errors"] == []
    planned = _floor_first(goals.cases(Plan([*clients, "gevent"], [0.0])))
    assert [tuple(c) for c in document["settings"]["cases"]] == planned
    for client in clients:
        for workload in GOAL_WORKLOADS:
            found = _measured(document, client, workload)
            shapes = {(g, c) for _, w, g, c, who in planned if (w, who) == (workload, client)}
            assert {(r["greenlets"], r["connections"]) for r in found} == shapes, workload
            for result in found:
                assert result["queries"] > 0 and result["errors"] == 0, result["first_error"]
                assert result["peak_server_connections"] == result["connections"]
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
    _check_floor(document)
    judged = {g["id"]: g for g in document["goals"]}
    assert document["areas"] == goals.titles()
    assert [g["area"] for g in document["goals"]] == [
        key for key in goals.titles() for g in document["goals"] if g["area"] == key]
    assert all(g["status"] in ("met", "not met", "not measured") for g in judged.values())
    for key in ("rtt10_vs_naive", "rtt10_unchanged", "orm_read_rtt10", "queries20_rtt10",
                "unit_vs_transaction_rtt10"):  # no 10 ms RTT in a smoke run
        assert judged[key]["status"] == "not measured", key
    both = "psycopg2" in clients  # the ratio lines need both sides
    for key in ("tpcb_vs_psycopg2", "wide_speed", "wide_stream_cpu_per_row",
                "select_vs_psycopg2", "sequential_qps", "sequential_cpu",
                "unit_vs_transaction", "unit_vs_one_shot", "tpcb_scale1_vs_psycopg2"):
        assert (judged[key]["status"] != "not measured") == both, judged[key]
    for key in ("select_cpu", "callers_4096_cpu", "select_floor_multiple", "slow_mix_p99",
                "tpcb_round_trips", "wide_stream_memory"):
        assert judged[key]["status"] != "not measured", judged[key]
    assert judged["unit_vs_pgbench"]["status"] == "not measured"  # pgbench not among them
    assert judged["select_python_vs_psycopg2"]["status"] == "not measured"  # nor pgmux-python
    for client in clients:
        assert {r["greenlets"] for r in _measured(document, client, "select_int")} == {
            1, 64, 256, 1024, 4096}
    _check_units(document, clients)
    _check_http(document, clients, judged)
    page = markdown.read_text()
    assert page.startswith("<!-- pgmux bench --render") and "### `select_int`" in page


def _check_units(document: dict, clients: list[str]) -> None:
    """The atomic units' cases ran for both clients; their round trips were counted."""
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


def _check_http(document: dict, clients: list[str], judged: dict) -> None:
    reasons = missing_http(clients)
    if reasons:
        (note,) = [n for n in document["notes"] if n.startswith("http suite skipped")]
        assert all(reason in note for reason in reasons)
        assert document["http"] == [] and judged["db_local"]["status"] == "not measured"
        return
    for app in clients:
        found = {r["endpoint"]: r for r in document["http"] if r["app"] == app}
        assert found.keys() == set(ENDPOINTS), app
        for result in found.values():
            assert result["requests"] > 0 and result["errors"] == 0, result
            assert result["latency_ms"]["p99"] >= result["latency_ms"]["p50"] > 0
            assert result["app_cpu_us_per_request"] > 0
            assert 1 <= result["peak_server_connections"] <= 12  # 6 per worker at most
    assert (judged["db_local"]["status"] != "not measured") == ("psycopg2" in clients)
    assert (judged["queries20_local"]["status"] != "not measured") == ("psycopg2" in clients)


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
    results = [r for r in json.loads(path.read_text())["results"]
               if r["workload"] == "select_int"]
    assert {r["client"]: r["pgmux_implementation"] for r in results} == {
        "pgmux-python": "python", "pgmux-before": "before"}
    assert all(r["queries"] > 0 and r["errors"] == 0 for r in results)
    monkeypatch.delenv("PGMUX_BENCH_BEFORE")
    assert CLIENTS["pgmux-before"].missing() and not CLIENTS["pgmux-python"].missing()


def _settings(*argv: str):
    parser = build_parser()
    return settings_from(parser.parse_args(list(argv)), list(argv))


def _floor_first(cases: list[tuple]) -> list[tuple]:
    """The planned order: gevent's floor first, then the areas' cases in turn."""
    floor = (0.0, "floor", 64, 0, "gevent")
    return [floor, *(c for c in cases if c != floor)]


def test_the_presets_plan_the_goal_cases():
    settings = _settings("--goals", "--clients", "pgmux,psycopg2")
    assert settings.goals and settings.grouping == "case" and settings.connections == [4]
    assert settings.cases == _floor_first(goals.cases(Plan(["pgmux", "psycopg2", "gevent"],
                                                           [0.0, 10.0])))
    assert {c[4] for c in settings.cases} == {"pgmux", "psycopg2", "gevent"}
    assert set(settings.profile_workloads) == {"select_int", "tpcb", "wide", "tpcb_unit"}
    assert settings.instructions == "telemetry" and settings.micro == "full"
    assert settings.sqlalchemy == (1000, 3)
    if not missing_http(["pgmux", "psycopg2"]):
        assert settings.http_rtts == [0.0, 10.0] and settings.http_apps == ["pgmux", "psycopg2"]
    quick = _settings("--quick", "--clients", "pgmux,psycopg2")
    assert quick.cases == settings.cases and quick.grouping == "shared"
    assert quick.turn_clients == ("pgmux",) and quick.http_seconds == (0, 1)
    assert quick.instructions == "control" and quick.instruction_implementations == (
        "compiled",)
    filtered = _settings("--goals", "--workloads", "tpcb", "--rtt-ms", "0", "--clients", "pgmux")
    assert filtered.cases == [(0.0, "floor", 64, 0, "gevent"), (0.0, "tpcb", 64, 4, "pgmux")]
    assert filtered.http_rtts == [] and filtered.instructions == "none"
    assert filtered.sqlalchemy is None and filtered.micro == "none"  # the cases alone
    matrix = _settings("--workloads", "tpcb,select_int", "--greenlets", "8", "--rtt-ms", "0",
                       "--clients", "pgmux-inflight1,pgmux")
    assert not matrix.goals  # explicit workloads: the matrix only
    # tpcb needs transactions: only pgmux, psycopg2 and psycopg3 run it
    assert sorted(matrix.cases) == [(0.0, "floor", 64, 0, "gevent"),
                                    (0.0, "select_int", 8, 4, "pgmux"),
                                    (0.0, "select_int", 8, 4, "pgmux-inflight1"),
                                    (0.0, "tpcb", 8, 4, "pgmux")]
    alone = _settings("--instructions")
    assert alone.cases == [] and alone.instructions == "telemetry" and alone.micro == "none"
    assert _settings("--sqlalchemy-examples", "--quick").sqlalchemy == (50, 1)
    with pytest.raises(ValueError):
        _settings("--stream-rows", "100001")


def test_workers_group_cases_by_client_by_case_or_shared():
    cases = [(0.0, "select_int", 64, 4, "pgmux"), (0.0, "wide_stream", 1, 4, "pgmux"),
             (0.0, "tpcb", 64, 4, "pgmux"), (0.0, "tpcb", 64, 4, "psycopg2"),
             (0.0, "select_int", 1, 1, "pgmux")]
    assert worker_groups(cases) == [
        ("pgmux", [("select_int", 64, 4), ("tpcb", 64, 4)]), ("pgmux", [("wide_stream", 1, 4)]),
        ("psycopg2", [("tpcb", 64, 4)]), ("pgmux", [("select_int", 1, 1)])]
    # the goal runs: a worker per case, in the order given (a case's clients back to back)
    assert worker_groups(cases, "case") == [
        ("pgmux", [("select_int", 64, 4)]), ("pgmux", [("wide_stream", 1, 4)]),
        ("pgmux", [("tpcb", 64, 4)]), ("psycopg2", [("tpcb", 64, 4)]),
        ("pgmux", [("select_int", 1, 1)])]
    # --quick: a worker per client, whatever its cases' connections
    assert worker_groups(cases, "shared") == [
        ("pgmux", [("select_int", 64, 4), ("wide_stream", 1, 4), ("tpcb", 64, 4),
                   ("select_int", 1, 1)]), ("psycopg2", [("tpcb", 64, 4)])]


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
