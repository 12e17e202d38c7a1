"""The example WSGI app over real HTTP (gevent's WSGI server in-process), and the tour script."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys

import pytest
from gevent.pool import Pool

geventhttpclient = pytest.importorskip("geventhttpclient")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(REPO, "examples")
WORLD_ROWS = 10_000


def load_example(alias: str):
    """A fresh copy of examples/wsgi_app.py (its own Client), not registered in sys.modules."""
    spec = importlib.util.spec_from_file_location(alias, os.path.join(EXAMPLES, "wsgi_app.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def app(pg):
    with pytest.MonkeyPatch.context() as patch:
        # plain TCP: over TLS each record is its own read, which hides the batching in stats
        patch.setenv("PGMUX_DSN", pg.dsn_for("scram_user", sslmode="disable"))
        patch.delenv("DATABASE_URL", raising=False)
        module = load_example("wsgi_app_under_test")
        server = module.make_server("127.0.0.1", 0)
        server.start()
        http = geventhttpclient.HTTPClient("127.0.0.1", server.address[1], concurrency=100,
                                           connection_timeout=10, network_timeout=30)
        try:
            yield module, http
        finally:
            http.close()
            server.stop()
            module.close_client()


def get(http, path: str):
    response = http.get(path)
    body = response.read()
    assert response["content-type"] == "application/json"
    return response.status_code, json.loads(body)


def world_number(pg, world_id: int) -> int:
    return int(pg.admin(f"SELECT randomnumber FROM world WHERE id = {int(world_id)}"))


def test_health_seeds_and_answers(app, pg):
    _, http = app
    assert get(http, "/health") == (200, {"status": "ok", "database": True})
    assert pg.admin("SELECT count(*) FROM world") == str(WORLD_ROWS)


def test_db_returns_one_stored_row(app, pg):
    _, http = app
    for _ in range(3):
        status, row = get(http, "/db")
        assert status == 200
        assert set(row) == {"id", "randomNumber"}
        assert 1 <= row["id"] <= WORLD_ROWS
        assert row["randomNumber"] == world_number(pg, row["id"])


def test_queries_returns_n_stored_rows(app, pg):
    _, http = app
    status, rows = get(http, "/queries?n=20")
    assert status == 200
    assert len(rows) == 20
    for row in rows[:5]:
        assert row["randomNumber"] == world_number(pg, row["id"])


@pytest.mark.parametrize(("query", "count"), [("n=0", 1), ("n=abc", 1), ("n=501", 500), ("", 1)])
def test_queries_clamps_n(app, query, count):
    _, http = app
    status, rows = get(http, f"/queries?{query}")
    assert (status, len(rows)) == (200, count)


def test_updates_commits_new_numbers(app, pg):
    _, http = app
    status, rows = get(http, "/updates?n=5")
    assert status == 200
    assert len(rows) == 5
    assert len({row["id"] for row in rows}) == 5
    for row in rows:
        assert world_number(pg, row["id"]) == row["randomNumber"]


def test_updates_reads_multiplexed_and_writes_one_atomic_unit(app, pg):
    module, http = app
    db = module.get_client()
    get(http, "/updates?n=20")  # warm: every statement described and prepared
    before = db.stats()
    status, rows = get(http, "/updates?n=20")
    after = db.stats()
    assert status == 200 and len(rows) == 20 and len({row["id"] for row in rows}) == 20
    assert [row["id"] for row in rows] == sorted(row["id"] for row in rows)  # lock order
    for row in rows:
        assert world_number(pg, row["id"]) == row["randomNumber"]  # committed, as returned
    # 20 lookups, each its own exchange, then one exchange carrying the 20 UPDATEs
    assert _totals(after)[0] - _totals(before)[0] == 21
    assert after["pinned"]["active"] == 0 and after["pinned"]["waiting"] == 0


def test_concurrent_updates_all_commit_and_each_row_holds_a_value_one_returned(app, pg):
    _, http = app
    answers = Pool(32).map(lambda _: get(http, "/updates?n=20"), range(32))
    assert [status for status, _ in answers] == [200] * 32  # no deadlock: rows in id order
    returned: dict[int, set[int]] = {}
    for _, rows in answers:
        assert len(rows) == 20
        for row in rows:
            returned.setdefault(row["id"], set()).add(row["randomNumber"])
    ids = ",".join(map(str, returned))
    stored = dict(tuple(map(int, line.split("|"))) for line in pg.admin(
        f"SELECT id, randomnumber FROM world WHERE id IN ({ids})").splitlines())
    assert stored.keys() == returned.keys()
    assert all(stored[world_id] in numbers for world_id, numbers in returned.items())


def test_stats_reports_this_process(app):
    _, http = app
    status, stats = get(http, "/stats")
    assert status == 200
    assert stats["pid"] == os.getpid()
    assert stats["pipeline"]["size"] == 2
    assert stats["pinned"]["size"] == 4
    assert stats["prepared_statements"] == 2  # world_by_id, world_update


def test_unknown_path_is_404(app):
    _, http = app
    assert get(http, "/nope") == (404, {"error": "not found"})


def _totals(stats: dict) -> tuple[int, int]:
    drivers = stats["pipeline"]["drivers"]
    return sum(d["units"] for d in drivers), sum(d["readables"] for d in drivers)


def test_queries_under_100_concurrent_requests_are_multiplexed(app):
    module, http = app
    before = module.get_client().stats()
    jobs = Pool(100).map(lambda _: get(http, "/queries?n=20"), range(100))
    assert [status for status, _ in jobs] == [200] * 100
    assert all(len(rows) == 20 for _, rows in jobs)
    after = module.get_client().stats()
    units = _totals(after)[0] - _totals(before)[0]
    readables = _totals(after)[1] - _totals(before)[1]
    assert units == 100 * 20  # every lookup went through the pipeline ...
    assert after["pipeline"]["live"] == 2  # ... on the same two connections
    assert units / readables > 1  # and one socket read served several lookups


def test_database_failure_is_a_503_not_a_crash(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("PGMUX_DSN", f"postgresql://app:s3cret@127.0.0.1:{port}/app")
    module = load_example("wsgi_app_without_db")
    seen = {}

    def start_response(status, headers):
        seen["status"] = status

    body = b"".join(module.application({"PATH_INFO": "/health"}, start_response))
    assert seen["status"] == "503 Service Unavailable"
    error = json.loads(body)
    assert error["error"] == "OperationalError"
    assert "refused" in error["message"].lower()
    assert "s3cret" not in body.decode()


def test_tour_runs(pg):
    done = subprocess.run([sys.executable, os.path.join(EXAMPLES, "tour.py"),
                           pg.dsn_for("scram_user")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for expected in ("10 concurrent queries: [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]",
                     "10 queries in one batch: [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]",
                     "refused on the multiplexed path: UnsafeMultiplexError",
                     "COPY in: 3 rows",
                     "COPY out: ['1,cat,4', '2,parrot,2', '3,snake,0']",
                     "savepoint rolled back: 23505",
                     "after the transaction: [('cat', 5), ('parrot', 2), ('snake', 0)]",
                     "pipelined: 3 pets, 7 legs",
                     "streamed sum: 5000050000",
                     "notification: tour 'hello, listener'",
                     "prepared: [0, 1, 4, 9, 16]",
                     "in a transaction: repeatable read"):
        assert expected in out, out


def test_example_app_modules_do_not_connect_at_import(pg, monkeypatch):
    monkeypatch.setenv("PGMUX_DSN", pg.dsn_for("scram_user"))
    module = load_example("wsgi_app_import_only")
    assert module._client is None  # what makes gunicorn --preload safe
