"""dbapi.lease.Lease: a pinned connection held across calls, used by one greenlet at a time."""

from __future__ import annotations

import gevent
import pytest
from support.mux import wait_until

from pgmux import InterfaceError
from pgmux.dbapi.lease import Lease


def test_greenlets_take_turns_and_the_state_stays(pinned_client):
    db = pinned_client(pinned_size=1)
    lease = Lease(db.session()).open()

    def use(sql):
        with lease.using():
            return lease.fetchval(sql)

    gevent.spawn(use, "SET application_name = 'leased'").get(timeout=10)
    assert gevent.spawn(use, "SELECT current_setting('application_name')").get(
        timeout=10) == "leased"
    with pytest.raises(InterfaceError, match="greenlet that opened it"):
        lease.fetchval("SELECT 1")  # outside using(): no greenlet has the turn
    lease.close()
    with db.session() as s:  # reset before the next borrower
        assert s.fetchval("SELECT current_setting('application_name')") != "leased"


def test_one_greenlet_at_a_time(pinned_client):
    db = pinned_client(pinned_size=1)
    lease = Lease(db.session()).open()

    def sleep():
        with lease.using():
            lease.execute("SELECT pg_sleep(0.3)")

    sleeper = gevent.spawn(sleep)
    wait_until(lambda: lease._owner is sleeper, what="the sleeper's turn")
    with pytest.raises(InterfaceError, match="another greenlet"), lease.using():
        pass
    lease.close()  # while the sleeper has the turn: takes effect when it leaves
    assert not lease.closed
    sleeper.get(timeout=10)
    assert lease.closed and db.stats()["pinned"]["active"] == 0


def test_a_killed_greenlet_leaves_a_connection_the_pool_replaces(pinned_client):
    db = pinned_client(pinned_size=1)
    lease = Lease(db.session()).open()
    with lease.using():
        lease.execute("BEGIN")
        pid = lease.pid

    def sleep():
        with lease.using():
            lease.execute("SELECT pg_sleep(30)")

    victim = gevent.spawn(sleep)
    # the victim yields only once its statement is written and it waits for the reply
    wait_until(lambda: lease._owner is victim, what="the victim inside its statement")
    victim.kill(timeout=10)
    assert lease.broken  # interrupted mid-reply: never reused
    lease.close()
    with db.session() as s:
        assert s.pid != pid and s.transaction_status == "I"
    assert db.stats()["pinned"]["active"] == 0 and db.stats()["reconnects"] == 1
