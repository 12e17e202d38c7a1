"""Metrics with the real SDK: the conventions' names, units and buckets, values that agree
with db.stats(); db.stats()'s pool counters; the slow-query log."""

from __future__ import annotations

import logging

import gevent
import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the test extra's opentelemetry-sdk")
from support.mux import join_all, wait_until

from pgmux.errors import PoolTimeout
from pgmux.telemetry import names


def test_pinned_pool_metrics_agree_with_stats(pinned_client, sdk):
    db = pinned_client(pinned_size=1, **sdk.options)
    for _ in range(3):
        with db.transaction() as tx:
            tx.execute("SELECT 1")
    stats = db.stats()["counters"]["pinned"]
    assert stats["requests"] == 3 and stats["connections_made"] == stats["connections"] == 1
    assert stats["usage_time"] > 0 and stats["connections_lost"] == 0
    pinned = {"db.client.connection.pool.name": f"{db.conninfo.hosts[0]}:"
                                                f"{db.conninfo.ports[0]}/{db.conninfo.dbname}",
              "pgmux.pool.kind": "pinned"}
    wait = sdk.point("db.client.connection.wait_time", **_key(pinned))
    assert wait.count == stats["requests"]
    assert sdk.point("db.client.connection.create_time", **_key(pinned)).count == 1
    use = sdk.point("db.client.connection.use_time", **_key(pinned))
    assert use.count == 3 and use.sum == pytest.approx(stats["usage_time"], abs=1e-5)
    idle = sdk.point("db.client.connection.count", **_key(pinned),
                     db__client__connection__state="idle")
    assert idle.value == 1
    assert sdk.point("db.client.connection.max", **_key(pinned)).value == 1
    duration = sdk.point("db.client.operation.duration", db__operation__name="SELECT")
    assert duration.count == 3
    assert list(duration.explicit_bounds) == list(names.DURATION_BUCKETS)


def test_timeouts_and_pending_requests_agree_with_stats(pinned_client, sdk):
    db = pinned_client(pinned_size=1, acquire_timeout=0.2, **sdk.options)
    held = db.session().__enter__()
    seen = {}

    def waiter():
        with pytest.raises(PoolTimeout), db.session():
            pass

    job = gevent.spawn(waiter)
    gevent.sleep(0.05)
    seen["pending"] = sdk.point("db.client.connection.pending_requests",
                                pgmux__pool__kind="pinned").value
    join_all([job])
    held.__exit__(None, None, None)
    stats = db.stats()["counters"]["pinned"]
    assert seen["pending"] == 1
    assert stats["timeouts"] == stats["requests_errors"] == 1
    assert stats["requests_queued"] == 0  # the one that queued never got a connection
    assert sdk.point("db.client.connection.timeouts", pgmux__pool__kind="pinned").value == 1


def test_pipelined_pool_observed_from_stats(clients, sdk):
    db = clients(pipeline_size=2, **sdk.options)
    assert db.fetchval("SELECT 1") == 1
    stats = db.stats()["counters"]["pipeline"]
    assert stats["connections_made"] == 2 and stats["connections_lost"] == 0
    assert stats["requests"] >= 1 and stats["waiting"] == stats["timeouts"] == 0
    assert sdk.point("db.client.connection.max", pgmux__pool__kind="pipelined").value == 2
    used = sdk.point("db.client.connection.count", pgmux__pool__kind="pipelined",
                     db__client__connection__state="used").value
    idle = sdk.point("db.client.connection.count", pgmux__pool__kind="pipelined",
                     db__client__connection__state="idle").value
    assert used + idle == db.stats()["pipeline"]["live"] == 2
    assert sdk.point("db.client.connection.create_time",
                     pgmux__pool__kind="pipelined").count == 2
    in_flight = sdk.metrics()["pgmux.connection.in_flight"]
    assert sorted(p.attributes["pgmux.connection.index"] for p in in_flight) == [0, 1]
    (host,) = sdk.metrics()["pgmux.host.up"]
    assert host.value == 1


def test_returned_rows_only_for_statements_that_return_rows(clients, sdk):
    db = clients(pipeline_size=1, **sdk.options)
    with db.session() as s:
        s.execute("CREATE TABLE IF NOT EXISTS otel_rows (id int)")
    try:
        sdk.clear()
        assert db.execute("INSERT INTO otel_rows SELECT generate_series(1, $1::int)", [3]) == 3
        assert db.execute("UPDATE otel_rows SET id = id + $1", [1]) == 3
        assert len(db.query("SELECT id FROM otel_rows WHERE id > $1", [0])) == 3
        insert, update, select = sdk.spans()
        for command in (insert, update):
            assert "db.response.returned_rows" not in command.attributes, command.name
        assert select.attributes["db.response.returned_rows"] == 3
        (point,) = sdk.metrics()["db.client.response.returned_rows"]
        assert point.attributes["db.operation.name"] == "SELECT"
        assert (point.count, point.sum) == (1, 3)
        assert list(point.explicit_bounds) == list(names.ROWS_BUCKETS)
    finally:
        with db.session() as s:
            s.execute("DROP TABLE otel_rows")


def test_a_reconnect_is_counted_as_stats_says(clients, sdk, pg_admin):
    """A pipelined backend terminated by the server: its connection is replaced, and the
    reconnects metric says what db.stats() says."""
    db = clients(pipeline_size=2, application_name="otel-reconnect", **sdk.options)
    assert db.fetchval("SELECT 1") == 1
    pg_admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
             "WHERE application_name = 'otel-reconnect' LIMIT 1")
    wait_until(lambda: db.stats()["counters"]["pipeline"]["reconnects"] >= 1
               and db.stats()["pipeline"]["live"] == 2, what="the connection replaced")
    assert db.fetchval("SELECT 2") == 2
    counted = db.stats()["counters"]["pipeline"]["reconnects"]
    assert counted == db.stats()["reconnects"] == 1
    assert sdk.point("pgmux.connection.reconnects", pgmux__pool__kind="pipelined").value == 1
    assert sdk.point("pgmux.connection.reconnects", pgmux__pool__kind="pinned").value == 0
    assert db.stats()["counters"]["pipeline"]["connections_lost"] == 1


def test_every_metric_has_its_unit(clients, sdk):
    db = clients(pipeline_size=1, **sdk.options)
    db.fetchval("SELECT $1::int", [1])
    with db.transaction() as tx:
        tx.execute("SELECT 1")
    db.observer.instruments.sample()
    units = {metric.name: metric.unit
             for resource in sdk.reader.get_metrics_data().resource_metrics
             for scope in resource.scope_metrics for metric in scope.metrics}
    expected = {spec[0]: spec[1] for spec in (
        names.OPERATION_DURATION, names.RETURNED_ROWS, names.CONNECTION_COUNT,
        names.CONNECTION_MAX, names.PENDING_REQUESTS, names.CONNECTION_TIMEOUTS,
        names.CREATE_TIME, names.WAIT_TIME, names.USE_TIME, names.IN_FLIGHT,
        names.UNITS_PER_READABLE, names.RECONNECTS, names.ROTATIONS, names.HOST_UP)}
    assert units == expected
    assert units["db.client.operation.duration"] == "s"  # the conventions' units
    assert units["db.client.response.returned_rows"] == "{row}"
    assert units["db.client.connection.count"] == "{connection}"


def test_units_per_readable_is_sampled_per_connection(clients, sdk):
    db = clients(pipeline_size=1, **sdk.options)
    join_all([gevent.spawn(db.fetchval, "SELECT $1::int", [i]) for i in range(50)])
    db.observer.instruments.sample()  # what the once-a-second timer does
    (point,) = sdk.metrics()["pgmux.connection.units_per_readable"]
    driver = db.stats()["pipeline"]["drivers"][0]
    assert point.count == 1
    assert point.sum == pytest.approx(driver["units"] / driver["readables"])


def test_slow_query_log_splits_waiting_from_executing(pinned_client, caplog):
    db = pinned_client(log_slow_queries=0.05)
    assert db.observer is not None and db.observer.tracer is None  # the log alone
    with caplog.at_level(logging.WARNING, logger="pgmux.slow_queries"), db.session() as s:
        s.execute("SELECT pg_sleep($1)", [0.1])
        s.execute("SELECT $1::text", ["fast-secret"])
    (record,) = caplog.records
    message = record.getMessage()
    assert "waiting for a connection" in message and "executing" in message
    assert message.endswith("SELECT pg_sleep($1)")
    assert "0.1" not in message.split(": ")[-1]  # the text, never the values


@pytest.mark.parametrize("path", ["transaction", "session", "dbapi"])
def test_the_wait_for_a_pinned_connection_is_the_operations_wait(pg, pinned_client, sdk,
                                                                 caplog, path):
    """On every pinned path the wait for the connection is told apart from executing: in the
    slow-query log and on the span (pgmux.connection_wait), as the slot wait is."""
    import pgmux.dbapi
    from pgmux.dbapi.connection import close_shared_clients

    options = dict(pinned_size=1, log_slow_queries=0.2, **sdk.options)
    conn = pgmux.dbapi.connect(pg.dsn, **options) if path == "dbapi" else None
    db = conn.client if conn is not None else pinned_client(**options)
    def hold():
        with db.session():
            gevent.sleep(0.3)

    gevent.spawn(hold)
    gevent.sleep(0.01)
    try:
        with caplog.at_level(logging.WARNING, logger="pgmux.slow_queries"):
            if path == "dbapi":
                conn.cursor().execute("SELECT txid_current()")  # it needs the transaction
                conn.rollback()
            else:
                with getattr(db, path)() as s:
                    s.execute("SELECT $1::int", [1])
    finally:
        if conn is not None:
            conn.close()
            close_shared_clients()
    (line,) = [r.getMessage() for r in caplog.records]
    wait, executing = (float(part.split("s ")[0]) for part in line.split("(")[1].split(", "))
    assert wait > 0.2 and executing < 0.2, line
    span = sdk.spans()[0]
    assert span.attributes["pgmux.connection.kind"] == "pinned"
    assert span.attributes["pgmux.connection_wait"] > 0.2
    # the span lasts what the metric (and the log) recorded, the wait included
    duration = sdk.point("db.client.operation.duration", db__operation__name="SELECT")
    assert span.name.startswith("SELECT") and duration.count == 1 and duration.sum > 0.2
    assert (span.end_time - span.start_time) / 1e9 == pytest.approx(duration.sum, abs=1e-6)


def test_stats_counters_without_opentelemetry(pinned_client):
    db = pinned_client(pinned_size=1)
    assert db.observer is None
    with db.session():
        pass
    stats = db.stats()["counters"]["pinned"]
    for key in ("requests", "requests_queued", "wait_time", "timeouts", "requests_errors",
                "usage_time", "connections_made", "connect_time", "connections_failed",
                "connections_lost"):
        assert key in stats
    assert stats["requests"] == stats["connections_made"] == 1
    assert stats["connect_time"] > 0


def _key(attributes):
    return {k.replace(".", "__"): v for k, v in attributes.items()}


def test_each_client_has_a_pool_name_of_its_own(clients, sdk):
    """Two clients of one database are two pools (the SDK would sum their observations
    under one name): the first keeps the server/database name, the next gets #2; a
    pool_name given is used as it is."""
    first = clients(pipeline_size=2, **sdk.options)
    second = clients(pipeline_size=3, **sdk.options)
    named = clients(pipeline_size=1, pool_name="reports", **sdk.options)
    for db in (first, second, named):
        db.fetchval("SELECT 1")
    info = first.conninfo
    base = f"{info.hosts[0]}:{info.ports[0]}/{info.dbname}"
    sizes = {point.attributes["db.client.connection.pool.name"]: point.value
             for point in sdk.metrics()["db.client.connection.max"]
             if point.attributes["pgmux.pool.kind"] == "pipelined"}
    assert sizes == {base: 2, f"{base}#2": 3, "reports": 1}
