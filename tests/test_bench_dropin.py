"""The psycopg2 drop-in's part of the benchmark: its cases, its http suite and the Celery
example run briefly against a throwaway server (the real psycopg2 holds 200 connections
at once there), and the pieces they are made of. No timing is asserted."""

from __future__ import annotations

import json

import pytest

from pgmux.tooling.bench import build_parser, celery_tasks, main, psycopg2_http
from pgmux.tooling.bench.clients import CLIENTS
from pgmux.tooling.bench.plan import settings_from

CLIENT_NAMES = ("pgmux-psycopg2", "pgmux-dbapi", "psycopg2-per-greenlet", "celery-pgmux",
                "celery-psycopg2", "psycopg2")
WORKLOADS = "cursor_select,psycopg2_read_tx,celery_tasks,psycopg2_http"


def _settings(*argv: str):
    return settings_from(build_parser().parse_args(list(argv)), list(argv))


def _missing() -> list[str]:
    return [f"{name}: {', '.join(CLIENTS[name].missing())}" for name in CLIENT_NAMES
            if CLIENTS[name].missing()] + psycopg2_http.missing()


@pytest.mark.slow  # 40 s: CI runs it with the benchmark's other long variants
def test_a_smoke_run_measures_every_case_of_the_drop_in(tmp_path):
    if _missing():
        pytest.skip("; ".join(_missing()))
    path = tmp_path / "dropin.json"
    assert main(["--smoke", "--goals", "--clients", ",".join(CLIENT_NAMES), "--workloads",
                 WORKLOADS, "--json", str(path)]) == 0
    document = json.loads(path.read_text())
    assert document["errors"] == []
    found = {(r["client"], r["workload"]): r for r in document["results"]}
    shapes = {("pgmux-psycopg2", "cursor_select"): (64, 64), ("pgmux-dbapi", "cursor_select"):
              (64, 64), ("pgmux-psycopg2", "psycopg2_read_tx"): (200, 200),
              ("psycopg2-per-greenlet", "psycopg2_read_tx"): (200, 200),
              ("celery-pgmux", "celery_tasks"): (500, 100),
              ("celery-psycopg2", "celery_tasks"): (500, 100)}
    for key, (greenlets, connections) in shapes.items():
        result = found[key]
        assert result["queries"] > 0 and result["errors"] == 0, result["first_error"]
        assert (result["greenlets"], result["connections"]) == (greenlets, connections)
    for key in shapes:  # the drop-in and pgmux.dbapi: the shared client's 4 + 2 at most
        if key[0] in ("pgmux-psycopg2", "pgmux-dbapi", "celery-pgmux"):
            assert 0 < found[key]["peak_server_connections"] <= 6, found[key]
    assert found[("psycopg2-per-greenlet", "psycopg2_read_tx")]["peak_server_connections"] == 200
    assert found[("celery-psycopg2", "celery_tasks")]["peak_server_connections"] == 100
    celery = found[("celery-pgmux", "celery_tasks")]
    assert celery["unit"] == "task" and celery["queries"] == 100  # --smoke's tasks, all back
    http = {(r["app"], r["endpoint"]): r for r in document["psycopg2_http"]}
    assert http.keys() == {(app, endpoint) for app in psycopg2_http.APPS
                           for endpoint in psycopg2_http.ENDPOINTS}
    for result in http.values():
        assert result["requests"] > 0 and result["errors"] == 0, result
        assert result["connections"] == psycopg2_http.CONNECTIONS
        assert result["peak_server_connections"] <= 12  # 6 per worker, either psycopg2
    judged = {g["id"]: g["status"] for g in document["goals"] if g["area"] == "psycopg2_dropin"}
    measured = {key for key, status in judged.items() if status != "not measured"}
    assert measured == set(judged) - {"dropin_http_db_rtt10", "dropin_http_queries20_rtt10",
                                      "dropin_http_updates20_rtt10",
                                      "dropin_cursor_instructions"}  # no 10 ms, no counts


def test_quick_measures_the_drop_ins_http_suite_at_10_ms_on_two_endpoints():
    quick = _settings("--quick")
    if quick.psycopg2_http_rtts:
        assert quick.psycopg2_http_rtts == [10.0]
        assert quick.psycopg2_http_endpoints == ["/db", "/updates?n=20"]
        assert quick.rows["celery_tasks"] == 200
    goals = _settings("--goals", "--workloads", "psycopg2_http")
    if not _missing():
        assert goals.psycopg2_http_rtts == [0.0, 10.0] and goals.psycopg2_http_endpoints is None
        assert goals.cases == []  # the suite alone: gevent's floor runs only with cases
    alone = _settings("--goals", "--workloads", "psycopg2_http", "--clients", "pgmux")
    assert alone.psycopg2_http_rtts == []
    assert any("needs the clients pgmux-psycopg2, psycopg2" in note for note in alone.notes)
    two = psycopg2_http.pass_of(["/db"])
    assert two.endpoints == {"/db": None} and two.connections == psycopg2_http.CONNECTIONS
    assert two.measurements(["pgmux-psycopg2"]) == 1 and two.measurements(list(
        psycopg2_http.APPS)) == 2


def test_the_celery_tasks_balance_and_check_their_results():
    steps = celery_tasks.task_plan(10, 20, 20_000, first_key=-100)
    assert [task for task, _, _ in steps] == ["lookup", "lookup", "total", "record",
                                              "transfer"] * 2
    assert steps[3] == ("record", (-97, "note 3"), -97)
    source, target, amount = steps[4][1]
    assert source != target and 1 <= amount <= 9
    assert celery_tasks.checked("transfer", {"id": 7, "source": 1}) == {"source": 1}
    assert celery_tasks.checked("total", 20_000) == 20_000


def test_the_celery_workers_database_url_keeps_the_connection_apart():
    from pgmux.io.dsn import parse_dsn

    text = celery_tasks.conninfo("postgresql://app:s3cr'et@db.example:5433/shop", {
        "application_name": "bench-1", "options": "-c search_path=pgmux_bench_celery"})
    assert parse_dsn(text) == {"user": "app", "password": "s3cr'et", "host": "db.example",
                               "port": "5433", "dbname": "shop",
                               "application_name": "bench-1",
                               "options": "-c search_path=pgmux_bench_celery"}
