"""Spans of the multiplexed path with the real SDK against the real server: queries,
prepared statements, atomic units, the fan-out; what only the multiplexer knows (slot wait,
connection, described); parenting across greenlets; errors; the slow-query log."""

from __future__ import annotations

import logging

import gevent
import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the test extra's opentelemetry-sdk")
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402
from support.mux import drivers, join_all, unique_name  # noqa: E402

from pgmux.errors import (  # noqa: E402
    DivisionByZero,
    IndeterminateResultError,
    OperationalError,
    QueryTimeout,
)


def test_a_query_is_one_client_span_with_what_the_multiplexer_knows(clients, sdk):
    db = clients(pipeline_size=2, **sdk.options)
    assert db.fetchval("SELECT $1::int + 1", [1]) == 2
    assert db.fetchval("SELECT $1::int + 1", [2]) == 3
    first, second = sdk.spans()
    dbname = db.conninfo.dbname
    for span in (first, second):
        assert span.kind is SpanKind.CLIENT and span.name == f"SELECT {dbname}"
        assert span.attributes["db.query.text"] == "SELECT $1::int + 1"
        assert span.attributes["db.system.name"] == "postgresql"
        assert span.attributes["pgmux.connection.kind"] == "pipelined"
        assert span.attributes["pgmux.connection.index"] in (0, 1)
        assert 0 <= span.attributes["pgmux.slot_wait"] < (span.end_time - span.start_time) / 1e9
        assert span.attributes["db.response.returned_rows"] == 1
        assert "pgmux.retried" not in span.attributes
    assert first.attributes["pgmux.described"] is True  # a round trip to learn its shape
    assert second.attributes["pgmux.described"] is False


def test_errors_carry_their_sqlstate(clients, sdk):
    db = clients(pipeline_size=1, **sdk.options)
    with pytest.raises(DivisionByZero):
        db.fetchval("SELECT 1 / $1::int", [0])
    with pytest.raises(QueryTimeout):
        db.fetchval("SELECT pg_sleep(1)", timeout=0.05)
    divided, timed_out = sdk.spans()
    assert divided.status.status_code is StatusCode.ERROR
    assert divided.attributes["db.response.status_code"] == "22012"
    assert divided.attributes["error.type"] == "22012"
    assert divided.name == "postgresql"
    assert timed_out.attributes["error.type"] == "pgmux.errors.QueryTimeout"
    duration = sdk.point("db.client.operation.duration", error__type="22012")
    assert duration.count == 1 and duration.attributes["db.response.status_code"] == "22012"


def test_a_lost_connection_says_indeterminate(clients, sdk, pg_admin):
    db = clients(pipeline_size=1, application_name="otel-lost", **sdk.options)
    db.fetchval("SELECT 1")
    job = gevent.spawn(db.fetchval, "SELECT pg_sleep(30)")
    gevent.sleep(0.2)
    pg_admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
             "WHERE application_name = 'otel-lost'")
    join_all([job])
    # The query was written and the server ended the connection (FATAL 57P01) before its
    # ReadyForQuery: it may or may not have run, whatever the FATAL said.
    assert isinstance(job.exception, IndeterminateResultError)
    span = sdk.spans()[-1]
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["pgmux.outcome"] == "indeterminate"
    assert span.attributes["error.type"] == "pgmux.errors.IndeterminateResultError"
    assert "db.response.status_code" not in span.attributes


def test_prepared_statements_units_and_the_fan_out(clients, sdk):
    db = clients(pipeline_size=2, **sdk.options)
    by_id = db.prepare("otel_by_id", "SELECT $1::int AS id")
    sdk.clear()
    assert by_id.fetchval([5]) == 5
    (prepared,) = sdk.spans()
    assert prepared.attributes["db.query.text"] == "SELECT $1::int AS id"
    assert prepared.name == f"SELECT {db.conninfo.dbname}"
    sdk.clear()
    with db.atomic() as unit:
        unit.fetchval("SELECT $1::int", [1])
        unit.fetchval("SELECT $1::int", [2])
        unit.execute("SELECT 3")
    (atomic,) = sdk.spans()
    assert atomic.attributes["db.operation.batch.size"] == 3
    assert atomic.attributes["db.query.text"] == "SELECT $1::int; SELECT ?"  # no parameters
    assert atomic.name == f"BATCH SELECT {db.conninfo.dbname}"
    assert atomic.attributes["pgmux.connection.index"] in (0, 1)
    sdk.clear()
    with sdk.tracer.start_as_current_span("request") as parent:
        results = db.gather([("SELECT $1::int", [i]) for i in range(5)])
    assert [r[0][0] for r in results] == list(range(5))
    spans = sdk.spans()
    assert len(spans) == 5
    assert {s.parent.span_id for s in spans} == {parent.get_span_context().span_id}
    assert all(s.attributes["db.query.text"] == "SELECT $1::int" for s in spans)


def test_each_of_100_greenlets_gets_its_spans_under_its_own_parent(clients, sdk):
    db = clients(pipeline_size=4, **sdk.options)
    parents = {}

    def work(index):
        with sdk.tracer.start_as_current_span(f"request-{index}") as parent:
            parents[index] = parent.get_span_context().span_id
            assert db.fetchval("SELECT $1::int", [index]) == index
            gevent.sleep(0)
            with db.atomic() as unit:
                unit.execute("SELECT $1::int", [index])
                unit.execute("SELECT $1::int + 1", [index])

    join_all([gevent.spawn(work, i) for i in range(100)])
    spans = sdk.spans()
    assert len(spans) == 200
    by_parent: dict[int, list] = {}
    for span in spans:
        by_parent.setdefault(span.parent.span_id, []).append(span)
    assert set(by_parent) == set(parents.values())
    assert all(sorted(s.name.split()[0] for s in children) == ["BATCH", "SELECT"]
               for children in by_parent.values())


def test_the_slot_wait_is_told_apart_in_span_metric_and_slow_log(clients, sdk, caplog):
    db = clients(pipeline_size=1, max_in_flight=1, log_slow_queries=0.2, **sdk.options)
    db.fetchval("SELECT $1::int", [0])  # described already: one round trip each below
    sdk.clear()
    with caplog.at_level(logging.WARNING, logger="pgmux.slow_queries"):
        sleeper = gevent.spawn(db.fetchval, "SELECT pg_sleep(0.3)")
        gevent.sleep(0.05)
        assert db.fetchval("SELECT $1::int", [7]) == 7  # waits for the only slot
        join_all([sleeper])
    waited = [s for s in sdk.spans() if s.attributes["db.query.text"] == "SELECT $1::int"][0]
    assert waited.attributes["pgmux.slot_wait"] > 0.15
    messages = [r.getMessage() for r in caplog.records if r.getMessage().endswith("$1::int")]
    (line,) = messages
    wait = float(line.split("(")[1].split("s waiting")[0])
    assert wait > 0.15 and "SELECT $1::int" in line and "7" not in line.split(": ")[-1]
    wait_time = sdk.point("db.client.connection.wait_time", pgmux__pool__kind="pipelined")
    assert wait_time.count == 3 and wait_time.max > 0.15


def test_dbapi_execute_carries_the_connection_it_rode(pg, sdk):
    import pgmux.dbapi
    from pgmux.dbapi.connection import close_shared_clients

    conn = pgmux.dbapi.connect(pg.dsn, autocommit=True, **sdk.options)
    try:
        cur = conn.cursor()
        cur.execute("SELECT %s::int", (3,))
        (span,) = sdk.spans()
        assert span.attributes["pgmux.connection.kind"] == "pipelined"
        assert span.attributes["pgmux.connection.index"] >= 0
        assert span.attributes["db.query.text"] == "SELECT %s::int"
    finally:
        conn.close()
        close_shared_clients()


def test_described_and_reprepared_as_the_engine_said(clients, sdk):
    """A first-time unit or query was described, not re-prepared (a prepared handle was
    described by prepare()); a statement whose cached plan went stale (its table changed)
    was re-prepared."""
    db = clients(pipeline_size=1, **sdk.options)
    with db.session() as s:
        s.execute("DROP TABLE IF EXISTS otel_stale")
        s.execute("CREATE TABLE otel_stale (id int)")
    try:
        db.execute("INSERT INTO otel_stale VALUES ($1)", [1])
        sdk.clear()
        with db.atomic() as unit:
            unit.fetchval("SELECT $1::int + 40", [2])
        by_id = db.prepare("otel_described", "SELECT $1::int * 2")
        assert by_id.fetchval([21]) == 42
        assert db.query("SELECT * FROM otel_stale WHERE id = $1", [1])[0] == (1,)
        with db.session() as s:
            s.execute("ALTER TABLE otel_stale ADD COLUMN name text")
        assert db.query("SELECT * FROM otel_stale WHERE id = $1", [1])[0] == (1, None)
        unit, prepared, first, _alter, stale = sdk.spans()
        for fresh in (unit, prepared, first):
            assert "pgmux.reprepared" not in fresh.attributes, fresh.name
        assert unit.attributes["pgmux.described"] is first.attributes["pgmux.described"] is True
        assert prepared.attributes["pgmux.described"] is False  # prepare() described it
        assert stale.attributes["pgmux.reprepared"] is True
    finally:
        with db.session() as s:
            s.execute("DROP TABLE otel_stale")


def test_a_query_summary_given_by_the_caller(clients, sdk):
    """query_summary() sets db.query.summary on what runs in its block (this greenlet's
    only), and names a span whose operation no command tag told."""
    from pgmux.telemetry import query_summary

    db = clients(pipeline_size=1, **sdk.options)
    other = []
    with query_summary("divide by parameter"):
        with pytest.raises(DivisionByZero):
            db.fetchval("SELECT 1 / $1::int", [0])
        assert db.fetchval("SELECT $1::int", [3]) == 3
        job = gevent.spawn(lambda: other.append(db.fetchval("SELECT $1::int", [4])))
        join_all([job])
    db.fetchval("SELECT $1::int", [5])
    failed, named, elsewhere, after = sdk.spans()
    assert failed.name == "divide by parameter"  # no tag came back
    assert named.name == f"SELECT {db.conninfo.dbname}"  # the tag's operation first
    for span in (failed, named):
        assert span.attributes["db.query.summary"] == "divide by parameter"
    for span in (elsewhere, after):
        assert "db.query.summary" not in span.attributes
    duration = sdk.point("db.client.operation.duration", error__type="22012")
    assert duration.attributes["db.query.summary"] == "divide by parameter"


def test_multiplexed_text_without_parameters_has_its_literals_replaced(pg, clients, sdk):
    import pgmux.dbapi
    from pgmux.dbapi.connection import close_shared_clients

    db = clients(pipeline_size=1, **sdk.options)
    db.fetchval("SELECT 'q-secret'")
    db.gather(["SELECT 'g-secret'", ("SELECT $1::int, 'g-kept'", [1])])
    with db.atomic() as unit:
        unit.execute("SELECT 'u-secret'")
        unit.execute("SELECT $1::int, 'u-kept'", [1])
    conn = pgmux.dbapi.connect(pg.dsn, autocommit=True, **sdk.options)
    try:
        cur = conn.cursor()
        cur.execute("SELECT 'd-secret'")
        cur.execute("SELECT %s, 'd-kept'", (1,))
    finally:
        conn.close()
        close_shared_clients()
    assert [span.attributes["db.query.text"] for span in sdk.spans()] == [
        "SELECT ?", "SELECT ?", "SELECT $1::int, 'g-kept'", "SELECT ?; SELECT $1::int, 'u-kept'",
        "SELECT ?", "SELECT %s, 'd-kept'"]


def test_queries_sent_again_on_another_connection_say_retried(clients, sdk):
    """A connection that fails before writing what callers queued on it: those queries go
    to the other connection (NotDispatched there, UNSENT to the engine) and say so."""
    db = clients(pipeline_size=2, **sdk.options)
    db.fetchval("SELECT $1::int", [0])  # described on both connections already
    db.gather([("SELECT $1::int", [0])] * 4)
    sdk.clear()
    victim = drivers(db)[0]
    jobs = [gevent.spawn(db.fetchval, "SELECT $1::int", [i]) for i in range(40)]
    # Runs after every caller queued its query and before either writer wakes up.
    killer = gevent.spawn(lambda: (victim.load, victim.fail(OperationalError("test: cut"))))
    join_all(jobs + [killer])
    assert killer.value[0] > 0, "the victim had nothing pending: the test proved nothing"
    assert [job.value for job in jobs] == list(range(40))
    retried = [span for span in sdk.spans() if span.attributes.get("pgmux.retried")]
    assert len(retried) == killer.value[0]
    for span in retried:
        assert span.attributes["pgmux.retried"] == 1
        assert span.status.status_code is StatusCode.UNSET
        assert "pgmux.reprepared" not in span.attributes


def test_an_atomic_unit_replayed_after_a_serialization_failure_says_replays(clients, sdk, pg):
    """Replays (retries=, after 40001/40P01) are ``pgmux.replays``, not ``pgmux.retried``
    (sent to another connection), which the last attempt would otherwise overwrite."""
    name = unique_name("conflict")
    pg.admin(f"CREATE SEQUENCE {name}_seq; CREATE FUNCTION {name}() RETURNS int "
             "LANGUAGE plpgsql AS $$ BEGIN IF nextval("
             f"'{name}_seq') <= 2 THEN RAISE EXCEPTION 'conflict' USING ERRCODE = "
             "'serialization_failure'; END IF; RETURN 1; END $$")
    try:
        db = clients(pipeline_size=1, **sdk.options)
        with db.atomic(retries=3) as unit:
            answer = unit.fetchval(f"SELECT {name}()")
        assert answer.result() == 1
        (atomic,) = sdk.spans()
        assert atomic.attributes["pgmux.replays"] == 2
        assert "pgmux.retried" not in atomic.attributes
        assert atomic.status.status_code is StatusCode.UNSET
    finally:
        pg.admin(f"DROP FUNCTION {name}(); DROP SEQUENCE {name}_seq")
