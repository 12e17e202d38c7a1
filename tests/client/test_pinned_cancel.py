"""Timeouts on pinned calls: CancelRequest, recovery, races, and an unanswered cancel."""

from __future__ import annotations

import random
import time

import pytest

from pgmux import errors
from pgmux.client import Client
from pgmux.errors import OperationalError, QueryTimeout
from pgmux.io.connect import ServerConnection


@pytest.fixture
def make_client(pg):
    clients = []

    def make(dsn=None, **options):
        options.setdefault("pipeline_size", 0)
        options.setdefault("pinned_size", 1)
        client = Client(dsn or pg.dsn, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.mark.parametrize("sslmode", ["disable", "require"])
def test_timeout_cancels_quickly_and_the_session_goes_on(make_client, pg, sslmode):
    pg.need_tls(sslmode)
    db = make_client(pg.dsn_for(sslmode=sslmode))
    with db.session() as s:
        pid = s.pid
        started = time.monotonic()
        with pytest.raises(QueryTimeout) as failure:
            s.execute("SELECT pg_sleep(5)", timeout=0.2)
        elapsed = time.monotonic() - started
        assert 0.2 <= elapsed < 0.8
        assert failure.value.sqlstate == "57014"
        assert isinstance(failure.value.__cause__, errors.QueryCanceled)
        assert s.fetchval("SELECT $1::int", [7]) == 7
        assert s.transaction_status == "I"
        assert s.pid == pid
    assert db.stats()["reconnects"] == 0


def test_timeout_inside_a_transaction_leaves_it_failed_until_rollback(make_client):
    db = make_client()
    with pytest.raises(QueryTimeout), db.transaction() as tx:
        tx.execute("CREATE TEMP TABLE t (x int)")
        with pytest.raises(QueryTimeout):
            tx.execute("SELECT pg_sleep(5)", timeout=0.1)
        assert tx.session.transaction_status == "E"
        with pytest.raises(errors.InFailedSqlTransaction):
            tx.execute("SELECT 1")
        raise QueryTimeout("leave the block with an error")
    with db.session() as s:
        assert s.transaction_status == "I"
        assert s.fetchval("SELECT to_regclass('pg_temp.t')::text") is None
    assert db.stats()["reconnects"] == 0


def test_a_cancel_racing_completion_never_hits_the_next_statement(make_client, pg,
                                                                  monkeypatch):
    """Timeouts around the query's own duration: each cancel lands on its query or on
    nothing, never on the statement that follows."""
    sent = []
    send_cancel = ServerConnection.send_cancel

    def counting_cancel(self, timeout=5.0):
        sent.append(1)
        return send_cancel(self, timeout)

    monkeypatch.setattr(ServerConnection, "send_cancel", counting_cancel)
    db = make_client(pg.dsn_for(sslmode="disable"))  # a cancel costs ~6 ms here
    rng = random.Random(11)
    cancelled = completed = 0
    with db.session() as s:
        for _ in range(200):
            try:
                assert s.fetchval("SELECT 1 FROM pg_sleep(0.01)",
                                  timeout=rng.uniform(0.001, 0.012)) == 1
                completed += 1
            except QueryTimeout as exc:
                assert exc.sqlstate == "57014"
                cancelled += 1
            # long enough that a stray cancel arriving now would abort it
            assert s.fetchval("SELECT $1::int FROM pg_sleep(0.002)", [7]) == 7
            assert s.transaction_status == "I"
    late = len(sent) - cancelled  # cancels that arrived after their query had finished
    print(f"\ncancel race over 200 runs: {cancelled} cancelled, {late} cancels too late "
          f"(query completed), {completed - late} without a cancel")
    assert cancelled > 0 and late > 0
    assert db.stats()["reconnects"] == 0


def test_unanswered_cancel_closes_and_replaces_the_connection(make_client, monkeypatch):
    db = make_client()
    db._pinned.cancel_grace = 0.3
    monkeypatch.setattr(ServerConnection, "send_cancel", lambda self, timeout=5.0: None)
    with db.session() as s:
        pid = s.pid
        started = time.monotonic()
        with pytest.raises(QueryTimeout, match="no answer") as failure:
            s.execute("SELECT pg_sleep(3)", timeout=0.1)
        assert time.monotonic() - started < 1.0
        assert failure.value.sqlstate is None
        with pytest.raises(OperationalError, match="unusable"):
            s.fetchval("SELECT 1")
    assert db.stats()["pinned"] == {"size": 1, "active": 0, "free": 1, "waiting": 0}
    with db.session() as s:
        assert s.pid != pid
        assert s.fetchval("SELECT 1") == 1
    assert db.stats()["reconnects"] == 1
