"""Spans of the pinned path with the real SDK against the real server: each statement of a
transaction or session, COMMIT/ROLLBACK, COPY, streams and explicit pipelines."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the test extra's opentelemetry-sdk")
from opentelemetry.trace import SpanKind, StatusCode
from support.otel import all_attribute_values

from pgmux.errors import Error, UndefinedTable

DB_KEYS = {"db.system.name", "db.namespace", "server.address", "db.query.text",
           "pgmux.connection.kind"}


def _base(span, db):
    assert span.kind is SpanKind.CLIENT
    assert set(span.attributes) >= DB_KEYS
    assert span.attributes["db.system.name"] == "postgresql"
    assert span.attributes["db.namespace"] == db.conninfo.dbname
    assert span.attributes["server.address"] == db.conninfo.hosts[0]
    port = db.conninfo.ports[0]
    assert span.attributes.get("server.port") == (None if port == 5432 else port)


def test_each_statement_of_a_transaction_and_its_commit(pinned_client, sdk):
    db = pinned_client(**sdk.options)
    with db.transaction() as tx:
        tx.execute("CREATE TEMP TABLE otel_t (id int) ON COMMIT DROP")
        tx.execute("INSERT INTO otel_t SELECT generate_series(1, $1::int)", [3])
        assert len(tx.query("SELECT id FROM otel_t WHERE id > $1", [0])) == 3
    spans = sdk.spans()
    dbname = db.conninfo.dbname
    assert [s.name for s in spans] == [f"CREATE TABLE {dbname}", f"INSERT {dbname}",
                                       f"SELECT {dbname}", f"COMMIT {dbname}"]
    for span in spans:
        _base(span, db)
        assert span.attributes["pgmux.connection.kind"] == "pinned"
        assert span.status.status_code is StatusCode.UNSET
    insert, select, commit = spans[1:]
    assert insert.attributes["db.query.text"] == \
        "INSERT INTO otel_t SELECT generate_series(1, $1::int)"
    assert insert.attributes["db.operation.name"] == "INSERT"
    assert "db.response.returned_rows" not in insert.attributes
    assert select.attributes["db.response.returned_rows"] == 3
    assert commit.attributes["db.query.text"] == "COMMIT"


def test_a_failed_statement_carries_its_sqlstate_and_the_rollback_its_own_span(
        pinned_client, sdk):
    db = pinned_client(**sdk.options)
    with pytest.raises(UndefinedTable), db.transaction() as tx:
        tx.execute("SELECT * FROM otel_no_such_table WHERE id = $1", [1])
    failed, rollback = sdk.spans()
    assert failed.name == "postgresql"  # no command tag came back
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["db.response.status_code"] == "42P01"
    assert failed.attributes["error.type"] == "42P01"
    assert rollback.name == f"ROLLBACK {db.conninfo.dbname}"
    assert rollback.status.status_code is StatusCode.UNSET


def test_a_session_statement_that_loses_its_connection_says_how(pinned_client, sdk):
    db = pinned_client(**sdk.options)
    with db.session() as s:
        pid = s.pid
        with pytest.raises(Error) as caught:
            s.execute(f"SELECT pg_terminate_backend({pid})")
    (span,) = sdk.spans()
    assert span.status.status_code is StatusCode.ERROR
    expected = getattr(caught.value, "sqlstate", None) or (
        f"{type(caught.value).__module__}.{type(caught.value).__qualname__}")
    assert span.attributes["error.type"] == expected  # the SQLSTATE (57P01), else the class


def test_stream_span_ends_with_the_rows_it_handed_out(pinned_client, sdk):
    db = pinned_client(**sdk.options)
    with db.session() as s:
        rows = list(s.stream("SELECT generate_series(1, $1::int)", [25], batch=10))
        assert len(rows) == 25
        assert sdk.spans() and sdk.spans()[0].attributes["db.response.returned_rows"] == 25
        sdk.clear()
        stream = s.stream("SELECT generate_series(1, 1000)", batch=10)
        next(stream)
        stream.close()  # left early: the span ends then
    (early,) = sdk.spans()
    assert early.attributes["db.response.returned_rows"] == 10


def test_a_stream_never_iterated_ends_its_span_when_abandoned_or_dropped(pinned_client, sdk):
    db = pinned_client(**sdk.options)
    with db.session() as s:
        s.stream("SELECT generate_series(1, 1000)", batch=10)  # dropped at once, unstarted
        (dropped,) = sdk.spans()
        series = "SELECT generate_series(?, ?)"  # (no parameters: its literals replaced)
        assert dropped.attributes["db.query.text"] == series
        sdk.clear()
        kept = s.stream("SELECT generate_series(1, 1000)", batch=10)
        assert sdk.spans() == []  # still open: its portal is
        assert s.fetchval("SELECT 1") == 1  # another statement abandons the stream
        abandoned, select_1 = sdk.spans()
        assert abandoned.attributes["db.query.text"] == series
        assert select_1.attributes["db.query.text"] == "SELECT ?"
        sdk.clear()
        whole = s.stream("SELECT generate_series(1, 5)", batch=10)  # read in one batch
        del whole  # its portal ended before the first row was handed out: dropped, it ends
        assert [span.attributes["db.query.text"] for span in sdk.spans()] == [series]
        sdk.clear()
        copy = s.copy_out("COPY (SELECT 1) TO STDOUT")
    # the session's end abandons the COPY, never iterated either
    (abandoned_copy,) = sdk.spans()
    assert abandoned_copy.attributes["db.query.text"] == "COPY (SELECT ?) TO STDOUT"
    assert abandoned_copy.attributes["db.operation.name"] == "COPY"
    del kept, copy


def test_copy_in_and_out_are_copy_operations(pinned_client, sdk):
    db = pinned_client(**sdk.options)
    with db.session() as s:
        s.execute("CREATE TEMP TABLE otel_copy (id int, name text)")
        sdk.clear()
        assert s.copy_in("COPY otel_copy FROM STDIN", [(1, "a"), (2, "b")]) == 2
        data = b"".join(s.copy_out("COPY otel_copy TO STDOUT"))
    assert data == b"1\ta\n2\tb\n"
    copy_in, copy_out = sdk.spans()
    for span in (copy_in, copy_out):
        assert span.name == f"COPY {db.conninfo.dbname}"
        assert span.attributes["db.operation.name"] == "COPY"
    assert copy_in.attributes["db.query.text"] == "COPY otel_copy FROM STDIN"
    assert copy_out.attributes["db.query.text"] == "COPY otel_copy TO STDOUT"


def test_an_explicit_pipeline_is_one_batch_span(pinned_client, sdk):
    db = pinned_client(**sdk.options)
    with db.session() as s, s.pipeline() as p:
        handles = [p.query("SELECT $1::int", [i]) for i in range(3)]
        p.query("SELECT 'other'")
        p.sync()
    assert [h.result()[0][0] for h in handles] == [0, 1, 2]
    (span,) = sdk.spans()
    assert span.attributes["db.operation.batch.size"] == 4
    assert span.attributes["db.query.text"] == "SELECT $1::int; SELECT ?"
    assert span.attributes["pgmux.connection.kind"] == "pinned"


def test_no_parameter_values_unless_asked(pinned_client, sdk):
    secret = "s3cr3t-value-4711"
    db = pinned_client(**sdk.options)
    with db.session() as s:
        assert s.fetchval("SELECT $1::text", [secret]) == secret
    assert not any(secret in value for value in all_attribute_values(sdk.spans()))
    sdk.clear()
    asking = pinned_client(trace_parameters=True, **sdk.options)
    with asking.session() as s:
        s.fetchval("SELECT $1::text, $2::int", [secret, 7])
    (span,) = sdk.spans()
    assert span.attributes["db.query.parameter.0"] == secret
    assert span.attributes["db.query.parameter.1"] == "7"


def test_telemetry_false_emits_nothing(pinned_client, sdk):
    db = pinned_client(telemetry=False, **sdk.options)
    assert db.observer is None
    with db.transaction() as tx:
        tx.execute("SELECT 1")
    assert sdk.spans() == []
    assert "db.client.operation.duration" not in sdk.metrics()


def test_a_failed_operation_of_a_pipeline_fails_its_span(pinned_client, sdk):
    """An error seen only through its handle (the block exits normally) still fails the
    pipeline's span, with the first error's SQLSTATE; a clean one is named from its tags."""
    db = pinned_client(**sdk.options)
    with db.session() as s:
        with s.pipeline() as p:
            ok = p.query("SELECT $1::int", [1])
            p.sync()
            bad = p.query("SELECT 1 / $1::int", [0])
            later = p.execute("SELECT $1::int", [2])
        assert ok.result()[0][0] == 1
        with pytest.raises(Error):
            bad.result()
        with pytest.raises(Error):
            later.result()  # aborted by the error before it
        with s.pipeline() as p:
            p.query("SELECT $1::int", [1])
            p.execute("SELECT $1::int", [2])
        with s.pipeline() as p:
            p.query("SELECT $1::int", [1])
    failed, clean, single = sdk.spans()
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["db.response.status_code"] == "22012"
    assert failed.attributes["error.type"] == "22012"
    dbname = db.conninfo.dbname
    assert clean.name == f"BATCH SELECT {dbname}"
    assert clean.attributes["db.operation.name"] == "BATCH SELECT"
    assert single.name == f"SELECT {dbname}"  # a batch of one is a single operation


def test_text_without_parameters_is_recorded_with_its_literals_replaced(pinned_client, sdk,
                                                                          caplog):
    db = pinned_client(log_slow_queries=0.0, **sdk.options)
    with caplog.at_level(logging.WARNING, logger="pgmux.slow_queries"), db.session() as s:
        s.execute("SELECT 'secret-4711' AS v, 271828182845, E'x\\'y', $q$dollar-secret$q$")
        s.execute("SELECT $1::text, 'kept'", ["value"])  # parameterized: as given
        with s.pipeline() as p:
            p.query("SELECT 'pipe-secret'")
            p.query("SELECT $1::int", [1])
    plain, parameterized, pipeline = sdk.spans()
    assert plain.attributes["db.query.text"] == "SELECT ? AS v, ?, ?, ?"
    assert parameterized.attributes["db.query.text"] == "SELECT $1::text, 'kept'"
    assert pipeline.attributes["db.query.text"] == "SELECT ?; SELECT $1::int"
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert "SELECT ? AS v, ?, ?, ?" in logged
    for secret in ("secret-4711", "271828182845", "dollar-secret", "pipe-secret"):
        assert secret not in logged
        assert not any(secret in value for value in all_attribute_values(sdk.spans()))


def test_savepoint_ends_and_listen_are_spans_of_their_own(pinned_client, sdk):
    db = pinned_client(**sdk.options)
    with db.transaction() as tx:
        with tx.savepoint() as sp:
            sp.execute("SELECT $1::int", [1])
        with pytest.raises(UndefinedTable), tx.savepoint() as sp:
            sp.execute("SELECT * FROM otel_no_such_table")
    with db.session() as s:
        s.listen("otel channel")
        s.unlisten("otel channel")
    dbname = db.conninfo.dbname
    names = [span.name.removesuffix(f" {dbname}") for span in sdk.spans()]
    assert names == ["SELECT", "RELEASE", "postgresql", "ROLLBACK", "COMMIT", "LISTEN",
                     "UNLISTEN"]
    release, rollback_to = sdk.spans()[1], sdk.spans()[3]
    assert release.attributes["db.query.text"] == 'RELEASE SAVEPOINT "pgmux_sp_1"'
    assert rollback_to.attributes["db.query.text"] == (
        'ROLLBACK TO SAVEPOINT "pgmux_sp_2"; RELEASE SAVEPOINT "pgmux_sp_2"')
    for span in sdk.spans():
        assert span.attributes["pgmux.connection.kind"] == "pinned"
