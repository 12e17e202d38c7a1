"""examples/gunicorn_otel.conf.py: the SDK set up in each gevent worker, a request span per
request and pgmux's spans under it (the console exporter's output, read back)."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the test extra's opentelemetry-sdk")
pytest.importorskip("gunicorn")

from support.gunicorn import REPO, http_get, running  # noqa: E402

CONFIG = os.path.join(REPO, "examples", "gunicorn_otel.conf.py")


def console_spans(output: str) -> list[dict]:
    """The span objects ConsoleSpanExporter printed (JSON, one object per span)."""
    decoder = json.JSONDecoder()
    spans, index = [], 0
    while (start := output.find("\n{", index)) != -1:
        try:
            item, index = decoder.raw_decode(output, start + 1)
        except json.JSONDecodeError:
            index = start + 2
            continue
        if isinstance(item, dict) and "context" in item and "name" in item:
            spans.append(item)
    return spans


def test_request_spans_with_pgmux_spans_under_them(pg):
    env = {**os.environ, "PGMUX_DSN": pg.dsn_for("scram_user"), "OTEL_BSP_SCHEDULE_DELAY": "50"}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    with running(CONFIG, env, workers=1) as gunicorn:
        for path in ("/db", "/queries?n=3", "/updates?n=2"):
            assert http_get(gunicorn.base + path)[0] == 200
    spans = console_spans(gunicorn.output)
    by_id = {span["context"]["span_id"]: span for span in spans}
    requests = {span["name"]: span for span in spans if span["kind"] == "SpanKind.SERVER"}
    assert {"GET /db", "GET /queries", "GET /updates"} <= requests.keys()
    children: dict[str, list[dict]] = {}
    for span in spans:
        parent = by_id.get(span.get("parent_id"))
        if parent is not None and span["kind"] == "SpanKind.CLIENT":
            children.setdefault(parent["name"], []).append(span)
    dbname = pg.params_for()["dbname"] if hasattr(pg, "params_for") else None
    assert [s["name"].split()[0] for s in children["GET /db"]] == ["SELECT"]
    assert len(children["GET /queries"]) == 3
    updates = children["GET /updates"]
    assert [s["name"].split()[0] for s in updates].count("SELECT") == 2
    (unit,) = [s for s in updates if s["attributes"].get("db.operation.batch.size") == 2]
    assert unit["name"].startswith("BATCH UPDATE")
    for span in spans:
        if span["kind"] == "SpanKind.CLIENT":
            assert span["attributes"]["db.system.name"] == "postgresql"
    assert dbname is None or all(s["attributes"]["db.namespace"] == dbname
                                 for s in children["GET /db"])
