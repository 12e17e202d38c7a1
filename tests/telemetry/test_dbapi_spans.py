"""DB-API spans: one per execute/executemany, saying which kind of connection carried it,
never a second one for the query under it; parenting under each caller's own span."""

from __future__ import annotations

import gevent
import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the test extra's opentelemetry-sdk")
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from support.mux import join_all
from support.otel import all_attribute_values

import pgmux.dbapi
from pgmux.dbapi.connection import close_shared_clients


@pytest.fixture
def connect(pg, sdk):
    """connect(**options) -> a DB-API connection whose client reports to ``sdk``."""
    made = []

    def make(autocommit=False, **options):
        conn = pgmux.dbapi.connect(pg.dsn, autocommit=autocommit, **sdk.options, **options)
        made.append(conn)
        return conn
    yield make
    for conn in made:
        if not conn.closed:
            conn.close()
    close_shared_clients()


def test_execute_in_a_transaction_is_one_pinned_span(connect, sdk):
    setup = connect(autocommit=True).cursor()
    setup.execute("CREATE TABLE IF NOT EXISTS otel_dbapi (id int)")
    conn = connect()
    cur = conn.cursor()
    sql = "INSERT INTO otel_dbapi VALUES (%s) RETURNING id + 1"
    cur.execute(sql, (41,))  # a write: it runs on the transaction's pinned connection
    assert cur.fetchone() == (42,)
    conn.rollback()
    setup.execute("DROP TABLE otel_dbapi")
    (span,) = [s for s in sdk.spans() if s.attributes["db.query.text"] == sql]
    (rollback,) = [s for s in sdk.spans() if s.attributes["db.query.text"] == "ROLLBACK"]
    assert rollback.name == f"ROLLBACK {conn.client.conninfo.dbname}"
    assert span.attributes["pgmux.connection.kind"] == "pinned"
    assert span.name == f"INSERT {conn.client.conninfo.dbname}"
    assert span.attributes["db.response.returned_rows"] == 1
    assert span.kind is SpanKind.CLIENT


def test_autocommit_execute_is_one_multiplexed_span(connect, sdk):
    conn = connect(autocommit=True)
    cur = conn.cursor()
    cur.execute("SELECT %(n)s::int", {"n": 7})
    assert cur.fetchone() == (7,)
    (span,) = sdk.spans()
    assert span.attributes["pgmux.connection.kind"] == "pipelined"
    assert span.attributes["db.query.text"] == "SELECT %(n)s::int"
    assert "7" not in [str(v) for v in span.attributes.values()]


def test_executemany_is_one_batch_span(connect, sdk):
    conn = connect(autocommit=True)
    cur = conn.cursor()
    cur.execute("CREATE TABLE IF NOT EXISTS otel_many (id int)")
    sdk.clear()
    cur.executemany("INSERT INTO otel_many VALUES (%s)", [(i,) for i in range(5)])
    assert cur.rowcount == 5
    cur.execute("DROP TABLE otel_many")
    batch = sdk.spans()[0]
    assert batch.attributes["db.operation.batch.size"] == 5
    assert batch.attributes["db.query.text"] == "INSERT INTO otel_many VALUES (%s)"
    assert not any(k.startswith("db.query.parameter") for k in batch.attributes)
    dbname = conn.client.conninfo.dbname
    assert batch.name == f"BATCH INSERT {dbname}"  # from the command tags, as a unit's
    assert batch.attributes["db.operation.name"] == "BATCH INSERT"


def test_executemany_on_a_lease_and_of_one_set_are_named_from_their_tags(connect, sdk):
    setup = connect(autocommit=True).cursor()
    setup.execute("CREATE TABLE IF NOT EXISTS otel_many_pinned (id int)")
    try:
        conn = connect()
        cur = conn.cursor()
        cur.execute("SELECT txid_current()")  # the transaction pinned: a lease's pipeline
        sdk.clear()
        cur.executemany("INSERT INTO otel_many_pinned VALUES (%s)", [(1,), (2,)])
        cur.executemany("UPDATE otel_many_pinned SET id = %s", [(3,)])
        conn.commit()
        pinned, single = sdk.spans()[:2]
        dbname = conn.client.conninfo.dbname
        assert pinned.attributes["pgmux.connection.kind"] == "pinned"
        assert pinned.name == f"BATCH INSERT {dbname}"
        assert single.name == f"UPDATE {dbname}"  # one operation is no batch
        assert "db.operation.batch.size" not in single.attributes
    finally:
        setup.execute("DROP TABLE otel_many_pinned")


def test_each_of_100_greenlets_gets_its_spans_under_its_own_parent(connect, sdk):
    conn_per_greenlet = [connect(autocommit=True) for _ in range(100)]
    parents = {}

    def work(index):
        with sdk.tracer.start_as_current_span(f"request-{index}") as parent:
            parents[index] = parent.get_span_context().span_id
            cur = conn_per_greenlet[index].cursor()
            cur.execute("SELECT %s::int", (index,))
            assert cur.fetchone() == (index,)
            gevent.sleep(0)
            cur.execute("SELECT %s::int * 2", (index,))
    join_all([gevent.spawn(work, i) for i in range(100)])
    spans = sdk.spans()
    assert len(spans) == 200
    by_parent = {}
    for span in spans:
        by_parent.setdefault(span.parent.span_id, []).append(span)
    assert set(by_parent) == set(parents.values())
    assert all(len(children) == 2 for children in by_parent.values())


def test_a_foreign_database_span_is_enriched_not_doubled(connect, sdk):
    """SQLAlchemy's instrumentation opens a CLIENT span with db.system per statement: pgmux
    then adds its attributes to that span instead of emitting a second one."""
    conn = connect(autocommit=True)
    cur = conn.cursor()
    with sdk.tracer.start_as_current_span("SELECT app", kind=SpanKind.CLIENT,
                                          attributes={"db.system": "postgresql"}):
        cur.execute("SELECT 1")
    assert sdk.spans() == []
    (theirs,) = [s for s in sdk.exporter.get_finished_spans() if s.name == "SELECT app"]
    assert theirs.attributes["pgmux.connection.kind"] == "pipelined"
    with trace.use_span(trace.INVALID_SPAN):
        cur.execute("SELECT 1")
    assert len(sdk.spans()) == 1



PIPELINED_ONLY = ("pgmux.connection.index", "pgmux.described", "pgmux.slot_wait",
                  "pgmux.retried", "pgmux.reprepared", "pgmux.replays")


def test_a_statement_that_pinned_carries_no_pipelined_attempts_facts(connect, sdk):
    """Deciding that txid_current() needs the transaction asks pg_proc on the multiplexed
    path first: what that attempt showed is not the pinned statement's."""
    conn = connect()
    cur = conn.cursor()
    cur.execute("SELECT txid_current()")
    conn.rollback()
    statement = sdk.spans()[0]
    assert statement.attributes["db.query.text"] == "SELECT txid_current()"
    assert statement.attributes["pgmux.connection.kind"] == "pinned"
    assert not [key for key in PIPELINED_ONLY if key in statement.attributes]
    sdk.clear()
    cur.execute("SELECT %s::int", (1,))  # a plain read: multiplexed, no lease
    conn.rollback()
    (read,) = sdk.spans()
    assert read.attributes["pgmux.connection.kind"] == "pipelined"
    assert "pgmux.connection.index" in read.attributes
    assert "pgmux.connection_wait" not in read.attributes


def test_a_named_cursor_is_one_span_with_the_callers_text(connect, sdk):
    """A server-side cursor (SQLAlchemy's stream_results, Django's .iterator()): one span
    for its execute, with the parameterized text, never the DECLARE with values inline."""
    conn = connect()
    cur = conn.cursor(name="otel_named")
    sql = "SELECT generate_series(1, %s) AS n WHERE %s <> ''"
    cur.execute(sql, (5, "hidden-4711"))
    assert [row[0] for row in cur.fetchall()] == [1, 2, 3, 4, 5]
    cur.close()
    conn.rollback()
    statement = sdk.spans()[0]
    assert statement.attributes["db.query.text"] == sql
    assert statement.attributes["pgmux.connection.kind"] == "pinned"
    assert not any("hidden-4711" in value or "DECLARE" in value
                   for value in all_attribute_values(sdk.spans()))


def test_traced_parameters_are_keyed_by_name_or_index(connect, sdk):
    conn = connect(autocommit=True, trace_parameters=True)
    cur = conn.cursor()
    cur.execute("SELECT %(name)s::text, %(n)s::int", {"name": "jdoe", "n": 7})
    cur.execute("SELECT %s::text, %s::int", ("jdoe", 7))
    named, positional = sdk.spans()
    assert {k: v for k, v in named.attributes.items() if k.startswith("db.query.parameter.")} \
        == {"db.query.parameter.name": "jdoe", "db.query.parameter.n": "7"}
    assert {k: v for k, v in positional.attributes.items()
            if k.startswith("db.query.parameter.")} == {"db.query.parameter.0": "jdoe",
                                                         "db.query.parameter.1": "7"}
