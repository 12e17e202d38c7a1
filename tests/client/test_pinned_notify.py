"""LISTEN/NOTIFY and notices on sessions, against a real server."""

from __future__ import annotations

import logging
import time

import gevent
import pytest
from gevent.event import Event

import pgmux
from pgmux.client import Client


@pytest.fixture
def db(pinned_client):
    return pinned_client(pinned_size=2)


def notify_from_another_connection(db, channel, payloads, start=None):
    """In another greenlet (so on another pinned connection): one NOTIFY per payload."""

    def run():
        if start is not None:
            start.wait()
        with db.session() as s:
            for payload in payloads:
                s.execute("SELECT pg_notify($1, $2)", [channel, payload])
            return s.pid

    return gevent.spawn(run)


def test_notify_from_another_connection_reaches_wait_notify(db):
    with db.session() as s:
        s.listen("jobs")
        sender = notify_from_another_connection(db, "jobs", ["first"])
        note = s.wait_notify(timeout=5)
        assert note == pgmux.Notification(sender.get(), "jobs", "first")
        assert (note.pid, note.channel, note.payload) == (sender.value, "jobs", "first")


def test_notifications_arriving_during_other_queries_are_queued(db):
    with db.session() as s:
        s.listen("events")
        busy = Event()
        sender = notify_from_another_connection(db, "events", ["a", "b", "c"], start=busy)
        busy.set()
        assert s.fetchval("SELECT 1 FROM pg_sleep(0.3)") == 1  # the NOTIFYs happen meanwhile
        sender.get()
        assert s.fetchval("SELECT 2") == 2
        received = [s.wait_notify(timeout=0) for _ in range(3)]  # already here: no waiting
        assert [note.payload for note in received] == ["a", "b", "c"]
        assert s.wait_notify(timeout=0) is None


def test_wait_notify_times_out_with_none(db):
    with db.session() as s:
        s.listen("quiet")
        started = time.monotonic()
        assert s.wait_notify(timeout=0.1) is None
        assert 0.09 <= time.monotonic() - started < 0.5
        assert s.fetchval("SELECT 1") == 1  # the wait left the connection clean


def test_unlisten_stops_delivery(db):
    with db.session() as s:
        s.listen("one")
        s.listen("two")
        s.unlisten("one")
        s.execute("SELECT pg_notify('one', 'dropped'), pg_notify('two', 'kept')")
        assert s.wait_notify(timeout=1).payload == "kept"
        s.unlisten()
        s.execute("SELECT pg_notify('two', 'dropped too')")
        assert s.wait_notify(timeout=0.1) is None


def test_channel_names_are_quoted_exactly(db):
    channel = 'Mixed Case "quoted" channel'
    with db.session() as s:
        s.listen(channel)
        assert s.fetchval("SELECT pg_listening_channels()") == channel
        notify_from_another_connection(db, channel, ["ok"]).get()
        assert s.wait_notify(timeout=5).channel == channel


def test_a_notify_is_delivered_when_its_transaction_commits(db):
    notified, commit = Event(), Event()

    def sender():
        with db.transaction() as tx:
            tx.execute("SELECT pg_notify('txn', 'after commit')")
            notified.set()
            commit.wait()

    with db.session() as s:
        s.listen("txn")
        job = gevent.spawn(sender)
        assert notified.wait(5)
        assert s.wait_notify(timeout=0.2) is None  # not before the COMMIT
        commit.set()
        job.get()
        assert s.wait_notify(timeout=5).payload == "after commit"


def test_notices_go_to_the_client_callback(pg):
    notices = []
    client = Client(pg.dsn, pipeline_size=0, pinned_size=1, notice_handler=notices.append)
    try:
        with client.session() as s:
            s.execute("DO $$ BEGIN RAISE NOTICE 'hello %', 42; END $$")
            assert s.fetchval("SELECT 1") == 1
    finally:
        client.close()
    assert [fields["M"] for fields in notices] == ["hello 42"]
    assert notices[0]["V"] == "NOTICE"


def test_notices_go_to_the_pgmux_logger_by_default(db, caplog):
    with caplog.at_level(logging.INFO, logger="pgmux"), db.session() as s:
        s.execute("DO $$ BEGIN RAISE WARNING 'careful'; END $$")
    assert any("careful" in record.getMessage() and record.levelno == logging.WARNING
               for record in caplog.records)
