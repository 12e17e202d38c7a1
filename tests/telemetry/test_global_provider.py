"""Switched on by the application's SDK alone: nothing is emitted while no provider is set,
and a provider set after the client was made is noticed (in a fresh interpreter: a global
provider can be set once per process)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the test extra's opentelemetry-sdk")

SCRIPT = textwrap.dedent("""
    import sys, time
    import gevent
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import pgmux

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    db = pgmux.Client(sys.argv[1], pipeline_size=0)
    off = pgmux.Client(sys.argv[1], pipeline_size=0, telemetry=False)

    def run(client):
        with client.session() as s:
            s.execute("SELECT 1")

    run(db)
    print("before", db.observer is None, len(exporter.get_finished_spans()))
    trace.set_tracer_provider(provider)  # the application configures its SDK, later
    deadline = time.monotonic() + 10
    while db.observer is None and time.monotonic() < deadline:
        gevent.sleep(0.05)
    run(db)
    run(off)
    spans = exporter.get_finished_spans()
    print("after", db.observer is not None, off.observer is None,
          [span.instrumentation_scope.name for span in spans])
""")


def test_on_with_the_global_provider_and_noticed_later(pg):
    done = subprocess.run([sys.executable, "-c", SCRIPT, pg.dsn], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    before, after = done.stdout.strip().splitlines()
    assert before == "before True 0"
    assert after == "after True True ['pgmux']"  # one span: db's statement; off's none
