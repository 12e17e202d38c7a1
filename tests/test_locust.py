"""Locust: PgmuxUser's request events, and headless runs of loadtest/ (database and HTTP).

Locust monkey-patches the process that imports it, so everything Locust runs in a
subprocess here; the test process stays unpatched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("locust")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_SECONDS = 3


# Locust writes its CSV statistics once a second and not again at the end, so a CSV
# can miss the run's last second. A wrapper locustfile records the final statistics
# (and, for the OpenTelemetry test, pgmux's spans) on Locust's quitting event, after
# the users have stopped.
WRAPPER = """
import json, sys
sys.path.insert(0, {loadtest!r})
{prelude}
from locust import events
from {module} import *  # noqa: F401,F403  (the users)


@events.quitting.add_listener
def _final_statistics(environment, **kwargs):
    stats = {{f"{{e.method}} {{e.name}}": [e.num_requests, e.num_failures]
              for e in environment.stats.entries.values()}}
    total = environment.stats.total
    stats["Aggregated"] = [total.num_requests, total.num_failures]
    with open({out!r}, "w") as f:
        json.dump({{"stats": stats, "spans": {spans}}}, f)
"""

OTEL_PRELUDE = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # before the users' client is made: on from the start


def span_counts():
    names = {}
    for span in exporter.get_finished_spans():
        if span.instrumentation_scope.name == "pgmux":
            names[span.name.split()[0]] = names.get(span.name.split()[0], 0) + 1
    return names
"""


def run_locust(tmp_path, locustfile: str, env: dict, *extra: str, otel: bool = False) -> dict:
    """Run loadtest/<locustfile> headless; return its final statistics
    ({"TYPE name": [requests, failures]}) and, with otel, pgmux's span counts by name."""
    out = tmp_path / "final.json"
    wrapper = tmp_path / f"wrapped_{locustfile}"
    wrapper.write_text(WRAPPER.format(
        loadtest=os.path.join(REPO, "loadtest"), module=locustfile.removesuffix(".py"),
        prelude=OTEL_PRELUDE if otel else "", out=str(out),
        spans="span_counts()" if otel else "None"))
    args = [sys.executable, "-m", "locust", "-f", str(wrapper),
            "--headless", "-u", "10", "-r", "10", "-t", f"{RUN_SECONDS}s",
            "--only-summary", "--loglevel", "WARNING", *extra]
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=RUN_SECONDS + 60)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def assert_all_succeeded(stats: dict, expected: set[str]) -> None:
    assert expected <= stats.keys(), sorted(stats)
    for key in expected:
        assert stats[key][0] > 0, key
    requests, failures = stats["Aggregated"]
    assert requests > 0
    assert failures == 0


def test_locust_against_the_database(pg, tmp_path):
    env = {**os.environ, "PGMUX_DSN": pg.dsn_for("scram_user")}
    final = run_locust(tmp_path, "locustfile_db.py", env)
    assert_all_succeeded(final["stats"], {"SQL account by id", "SQL range of 100",
                                          "TX transfer"})
    # the transfers kept the books balanced: every account started at 1000
    assert pg.admin("SELECT sum(balance) = 1000 * count(*) FROM loadtest_accounts") == "t"


def test_locust_reports_the_same_with_opentelemetry_on(pg, tmp_path):
    """The SDK configured in the Locust process: pgmux emits its spans, and Locust's
    request events (the statistics) are what they are without it."""
    pytest.importorskip("opentelemetry.sdk", reason="needs the test extra's opentelemetry-sdk")
    env = {**os.environ, "PGMUX_DSN": pg.dsn_for("scram_user")}
    final = run_locust(tmp_path, "locustfile_db.py", env, otel=True)
    stats = final["stats"]
    assert_all_succeeded(stats, {"SQL account by id", "SQL range of 100", "TX transfer"})
    commits = final["spans"].get("COMMIT", 0)
    transfers = stats["TX transfer"][0]
    # a COMMIT span per reported transfer, and the seeding's; the stop may have cut a
    # transfer short after its COMMIT, before its report (one per user at most)
    assert transfers + 1 <= commits <= transfers + 1 + 10, (commits, transfers)


def test_locust_tpcb_as_atomic_units_and_transactions(pg, tmp_path):
    env = {**os.environ, "PGMUX_DSN": pg.dsn_for("scram_user")}
    final = run_locust(tmp_path, "locustfile_tpcb.py", env)
    assert_all_succeeded(final["stats"], {"UNIT tpcb", "TX tpcb"})
    # every transaction moved the same delta through its account, teller, branch, history
    sums = pg.admin("SELECT (SELECT sum(abalance) FROM loadtest_tpcb_accounts), "
                    "(SELECT sum(tbalance) FROM loadtest_tpcb_tellers), "
                    "(SELECT sum(bbalance) FROM loadtest_tpcb_branches), "
                    "(SELECT sum(delta) FROM loadtest_tpcb_history), "
                    "(SELECT count(*) FROM loadtest_tpcb_history)").split("|")
    assert len(set(sums[:4])) == 1 and int(sums[4]) > 0, sums


def test_locust_against_the_example_app(pg, tmp_path):
    env = {**os.environ, "PGMUX_DSN": pg.dsn_for("scram_user")}
    app = subprocess.Popen([sys.executable, os.path.join(REPO, "examples", "wsgi_app.py"), "0"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = app.stdout.readline()
        assert line.startswith("serving on http://127.0.0.1:"), line + app.stderr.read()
        url = line.split()[-1].rstrip("/")
        final = run_locust(tmp_path, "locustfile_http.py", env, "--host", url)
    finally:
        app.terminate()
        app.wait(timeout=10)
    assert_all_succeeded(final["stats"], {"GET /db", "GET /queries?n=20", "GET /updates?n=5"})


EVENTS_SCRIPT = textwrap.dedent("""
    import json, sys
    from locust.env import Environment
    from pgmux.contrib.locust import PgmuxUser

    class Probe(PgmuxUser):
        dsn = sys.argv[1]
        client_options = {"pipeline_size": 1, "pinned_size": 1}

    env = Environment(user_classes=[Probe])
    events = []
    env.events.request.add_listener(lambda **kw: events.append(kw))
    first, second = Probe(env), Probe(env)
    c = first.client
    c.query("SELECT   generate_series(1, 3)\\n   AS n, 'a fairly long literal to cut' AS padding")
    c.fetchone("SELECT 1", name="one row")
    c.fetchval("SELECT 1 WHERE false")
    c.execute("SELECT generate_series(1, 4)")
    c.prepare("doubler", "SELECT $1::int * 2").fetchval([21])
    with c.transaction(name="tx block") as tx:
        tx.execute("SELECT 1")
    with c.atomic(name="unit block") as unit:
        unit.execute("SELECT 1"); unit.execute("SELECT 2")
    try:
        with c.atomic(name="failed unit") as unit:
            unit.execute("SELECT 1"); unit.execute("SELECT 1/0")
    except Exception as exc:
        unit_error = type(exc).__name__
    raised = None
    try:
        c.query("SELECT 1/0", name="division")
    except Exception as exc:
        raised = type(exc).__name__
    import gevent.event
    entered = gevent.event.Event()
    def killed_in_the_block():
        with c.transaction(name="killed tx") as tx:
            tx.execute("SELECT 1")
            entered.set()
            gevent.sleep(60)
    stuck = gevent.spawn(killed_in_the_block)
    entered.wait()
    stuck.kill()  # as Locust's stop kills a user: no request to report
    with c.transaction(name="after the kill") as tx:
        tx.execute("SELECT 1")
    shared = first.client.db is second.client.db
    env.events.quitting.fire(environment=env)
    print(json.dumps({
        "events": [{**{k: v for k, v in e.items() if k not in ("response", "exception")},
                    "exception": type(e["exception"]).__name__ if e["exception"] else None}
                   for e in events],
        "raised": raised, "unit_error": unit_error, "shared": shared,
        "closed": first.client.db.closed,
    }))
""")


def test_pgmux_user_fires_one_request_event_per_call(pg):
    done = subprocess.run([sys.executable, "-c", EVENTS_SCRIPT, pg.dsn_for("scram_user")],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    events = result["events"]
    for event in events:
        assert event["response_time"] >= 0
        assert event["context"] == {}
    seen = [(e["request_type"], e["name"], e["response_length"], e["exception"]) for e in events]
    assert seen == [
        ("SQL", "SELECT generate_series(1, 3) AS n, 'a fairly long literal to", 3, None),
        ("SQL", "one row", 1, None),
        ("SQL", "SELECT 1 WHERE false", 0, None),
        ("SQL", "SELECT generate_series(1, 4)", 4, None),
        ("SQL", "doubler", 1, None),
        ("TX", "tx block", 0, None),
        ("UNIT", "unit block", 0, None),
        ("UNIT", "failed unit", 0, "DivisionByZero"),
        ("SQL", "division", 0, "DivisionByZero"),
        ("TX", "after the kill", 0, None),
    ]
    assert len(seen[0][1]) == 60
    assert result["raised"] == "DivisionByZero"  # reported, then re-raised to the task
    assert result["unit_error"] == "DivisionByZero"
    assert result["shared"] is True  # one Client per process, shared by its users
    assert result["closed"] is True  # closed on Locust's quitting event
