"""Parenting on every path with the real SDK: 100 greenlets at once, each under a span of
its own, and every pgmux span a child of its own greenlet's span (started in the caller's
greenlet, whichever greenlet did the I/O; the greenlet's index is the statement's traced
parameter where it has one)."""

from __future__ import annotations

import gevent
import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the test extra's opentelemetry-sdk")
from support.mux import join_all  # noqa: E402

GREENLETS = 100


def _transaction(db, i):
    with db.transaction() as tx:
        tx.execute("SELECT $1::int", [i])


def _session(db, i):
    with db.session() as s:
        assert s.fetchval("SELECT $1::int", [i]) == i


def _stream(db, i):
    with db.session() as s:
        rows = list(s.stream("SELECT generate_series($1::int, $1::int + 2)", [i], batch=2))
        assert len(rows) == 3


def _copy(db, i):
    with db.session() as s:
        assert b"".join(s.copy_out("COPY (SELECT 1) TO STDOUT")) == b"1\n"


def _pipeline(db, i):
    with db.session() as s, s.pipeline() as p:
        p.query("SELECT $1::int", [i])
        p.query("SELECT $1::int + 1", [i])


def _gather(db, i):
    assert [r[0][0] for r in db.gather([("SELECT $1::int", [i]), ("SELECT $1::int", [-i])])] \
        == [i, -i]


def _batch(db, i):
    with db.batch() as b:
        first, second = b.fetchval("SELECT $1::int", [i]), b.fetchval("SELECT $1::int", [i])
    assert first.result() == second.result() == i


# path -> (what a greenlet does, the spans it makes)
PATHS = {"transaction": (_transaction, 2), "session": (_session, 1), "stream": (_stream, 1),
         "copy": (_copy, 1), "pipeline": (_pipeline, 1), "gather": (_gather, 2),
         "batch": (_batch, 2)}


@pytest.mark.parametrize("path", PATHS)
def test_each_of_100_greenlets_gets_its_spans_under_its_own_parent(clients, sdk, path):
    work, per_greenlet = PATHS[path]
    db = clients(pipeline_size=4, pinned_size=8, trace_parameters=True, **sdk.options)
    parents: dict[int, int] = {}

    def greenlet(index):
        with sdk.tracer.start_as_current_span(f"request-{index}") as parent:
            parents[index] = parent.get_span_context().span_id
            gevent.sleep(0)
            work(db, index)

    join_all([gevent.spawn(greenlet, i) for i in range(GREENLETS)])
    spans = sdk.spans()
    assert len(spans) == GREENLETS * per_greenlet
    by_parent: dict[int, int] = {}
    for span in spans:
        assert span.parent is not None, span.name
        by_parent[span.parent.span_id] = by_parent.get(span.parent.span_id, 0) + 1
        index = span.attributes.get("db.query.parameter.0")  # (the greenlet's, if it has one)
        if index is not None:
            assert span.parent.span_id == parents[abs(int(index))]
    assert by_parent == {parent: per_greenlet for parent in parents.values()}
