"""The pinned pool against a real server: reset on return, lending, limits, kills."""

from __future__ import annotations

import json
import os
import random
import time
import uuid

import gevent
import gevent.os
import pytest
from gevent.event import Event
from support.pinned import raised_elsewhere

from pgmux.errors import InterfaceError, OperationalError, PoolTimeout

IDLE = {"size": 1, "active": 0, "free": 1, "waiting": 0}


@pytest.fixture
def make_client(pinned_client):
    return pinned_client


@pytest.fixture
def table(make_client):
    """A fresh real table (visible across connections), dropped afterwards."""
    name = f"pinned_{uuid.uuid4().hex[:10]}"
    admin = make_client(pinned_size=1)
    with admin.session() as s:
        s.execute(f"CREATE TABLE {name} (x int)")
    yield name
    with admin.session() as s:
        s.execute(f"DROP TABLE {name}")


def wait_until(check, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        gevent.sleep(0.02)


def backend_exists(db, pid):
    with db.session() as s:
        return s.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", [pid]) == 1


# -- reset ---------------------------------------------------------------------------------


def test_discard_all_clears_session_state_for_the_next_borrower(make_client):
    db = make_client(pinned_size=1)
    with db.session() as s:
        pid = s.pid
        default_name = s.fetchval("SHOW application_name")
        s.execute("SET application_name = 'dirty-borrower'")
        s.execute("CREATE TEMP TABLE scratch (x int)")
        s.listen("pinned_reset_channel")
        s.execute("NOTIFY pinned_reset_channel, 'left behind'")  # queued, never read
        s.execute("PREPARE borrowers_own AS SELECT 42")
        s.execute("CREATE TEMP SEQUENCE seq")
        assert s.fetchval("SELECT nextval('seq')") == 1
        assert s.fetchval("SELECT pg_advisory_lock(77)::text") == ""
        assert s.fetchval("SELECT $1::int", [1]) == 1  # pgmux prepares this one itself
        assert s.fetchval("SELECT count(*) FROM pg_prepared_statements") == 2
        assert s.fetchval("SELECT count(*) FROM pg_listening_channels()") == 1
    with db.session() as s:
        assert s.pid == pid  # the same connection, reset rather than replaced
        assert s.fetchval("SHOW application_name") == default_name
        assert s.fetchval("SELECT to_regclass('pg_temp.scratch')::text") is None
        assert s.fetchval("SELECT count(*) FROM pg_listening_channels()") == 0
        assert s.wait_notify(timeout=0) is None
        assert s.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == 0
        assert s.fetchval("SELECT count(*) FROM pg_prepared_statements") == 0
        assert s.fetchval("SELECT $1::int", [5]) == 5  # parsed again, in the same request
    assert db.stats()["pinned"] == IDLE
    assert db.stats()["reconnects"] == 0


def test_open_transaction_is_rolled_back_on_return(make_client, table):
    db = make_client(pinned_size=1)
    with db.session() as s:
        s.execute("BEGIN")
        s.execute(f"INSERT INTO {table} VALUES (1)")
        assert s.transaction_status == "T"
    with db.session() as s:
        assert s.transaction_status == "I"
        assert s.fetchval(f"SELECT count(*) FROM {table}") == 0


def test_failed_transaction_is_rolled_back_on_return(make_client):
    db = make_client(pinned_size=1)
    with db.session() as s:
        pid = s.pid
        s.execute("BEGIN")
        with pytest.raises(Exception, match="division by zero"):
            s.execute("SELECT 1/0")
        assert s.transaction_status == "E"
    with db.session() as s:
        assert s.pid == pid
        assert s.fetchval("SELECT 1") == 1


def test_a_failed_reset_closes_and_replaces_the_connection(make_client):
    db = make_client(pinned_size=1)
    observer = make_client(pinned_size=1)
    with db.session() as s:
        pid = s.pid
        s.execute("SET application_name = 'doomed'")
        with observer.session() as other:  # the server ends it while the session is idle
            assert other.fetchval("SELECT pg_terminate_backend($1)", [pid]) is True
        wait_until(lambda: not backend_exists(observer, pid))
    # the reset (DISCARD ALL) failed on the dead connection: dropped, not returned dirty
    assert db.stats()["pinned"] == IDLE
    with db.session() as s:
        assert s.pid != pid
        assert s.fetchval("SHOW application_name") != "doomed"
    assert db.stats()["reconnects"] == 1


# -- lending -------------------------------------------------------------------------------


def test_more_greenlets_than_connections_are_all_served(make_client):
    db = make_client(pinned_size=2)
    active_seen = []

    def work(i):
        with db.session() as s:
            active_seen.append(db.stats()["pinned"]["active"])
            return s.fetchval("SELECT $1::int FROM pg_sleep(0.01)", [i])

    jobs = [gevent.spawn(work, i) for i in range(24)]
    gevent.joinall(jobs, raise_error=True)
    assert [job.value for job in jobs] == list(range(24))
    assert max(active_seen) == 2
    assert db.stats()["pinned"] == {"size": 2, "active": 0, "free": 2, "waiting": 0}


def test_waiters_are_served_in_order(make_client):
    db = make_client(pinned_size=1)
    order = []

    def waiter(i):
        with db.session():
            order.append(i)

    with db.session():
        jobs = []
        for i in range(6):
            jobs.append(gevent.spawn(waiter, i))
            gevent.sleep(0)  # each one queues before the next starts
        assert db.stats()["pinned"] == {"size": 1, "active": 1, "free": 0, "waiting": 6}
    gevent.joinall(jobs, raise_error=True)
    assert order == list(range(6))
    assert db.stats()["pinned"] == IDLE


def test_pool_timeout_when_no_connection_frees_up(make_client):
    db = make_client(pinned_size=1, acquire_timeout=0.2)

    def try_session(**options):
        started = time.monotonic()
        with pytest.raises(PoolTimeout), db.session(**options):
            pass
        return time.monotonic() - started

    with db.session() as s:
        waited = gevent.spawn(try_session).get()
        assert 0.18 <= waited < 1.0
        waited = gevent.spawn(try_session, timeout=0.05).get()  # per-call timeout
        assert 0.04 <= waited < 0.5
        assert db.stats()["pinned"] == {"size": 1, "active": 1, "free": 0, "waiting": 0}
        assert s.fetchval("SELECT 1") == 1
    assert db.stats()["pinned"] == IDLE


def test_nested_session_in_the_same_greenlet_is_an_error_not_a_deadlock(make_client):
    db = make_client(pinned_size=2)
    with db.session() as s:
        with pytest.raises(InterfaceError), db.session():
            pass
        with pytest.raises(InterfaceError), db.transaction():
            pass
        assert s.fetchval("SELECT 1") == 1
    with db.transaction() as tx:
        with pytest.raises(InterfaceError), db.session():
            pass
        assert tx.fetchval("SELECT 2") == 2
    assert db.stats()["pinned"] == {"size": 2, "active": 0, "free": 2, "waiting": 0}


def test_handles_work_only_in_their_greenlet_and_block(make_client):
    db = make_client(pinned_size=1)
    with db.session() as s:
        assert "greenlet" in str(raised_elsewhere(s.fetchval, "SELECT 1"))
        with s.transaction() as tx:
            assert "greenlet" in str(raised_elsewhere(tx.execute, "SELECT 1"))
        with pytest.raises(InterfaceError):
            tx.execute("SELECT 1")
        assert s.fetchval("SELECT 1") == 1
    with pytest.raises(InterfaceError, match="closed"):
        s.fetchval("SELECT 1")
    with pytest.raises(InterfaceError, match="context manager"):
        db.session().fetchval("SELECT 1")


# -- kills and timeouts --------------------------------------------------------------------


def test_greenlet_killed_in_a_transaction_is_rolled_back(make_client, table):
    db = make_client(pinned_size=1)
    inserted = Event()
    pids = []

    def victim():
        with db.transaction() as tx:
            tx.execute(f"INSERT INTO {table} VALUES ($1)", [1])
            pids.append(tx.session.pid)
            inserted.set()
            gevent.sleep(30)

    job = gevent.spawn(victim)
    assert inserted.wait(5)
    assert db.stats()["pinned"]["active"] == 1
    job.kill()
    assert db.stats()["pinned"] == IDLE
    with db.session() as s:
        assert s.pid == pids[0]  # rolled back and reused
        assert s.transaction_status == "I"
        assert s.fetchval(f"SELECT count(*) FROM {table}") == 0
    assert db.stats()["reconnects"] == 0


def test_greenlet_killed_in_a_long_query_gets_its_connection_replaced(make_client, table):
    db = make_client(pinned_size=1)
    started = Event()
    pids = []

    def victim():
        with db.transaction() as tx:
            tx.execute(f"INSERT INTO {table} VALUES ($1)", [1])
            pids.append(tx.session.pid)
            started.set()
            tx.execute("SELECT pg_sleep(30)")

    job = gevent.spawn(victim)
    assert started.wait(5)
    gevent.sleep(0.05)  # let the query reach the server
    job.kill()
    assert db.stats()["pinned"] == IDLE
    with db.session() as s:
        assert s.pid != pids[0]
        assert s.transaction_status == "I"
        assert s.fetchval(f"SELECT count(*) FROM {table}") == 0
    assert db.stats()["reconnects"] == 1
    assert db.stats()["pinned"] == IDLE
    # the old backend was cancelled and closed in the background, not left sleeping
    wait_until(lambda: not backend_exists(db, pids[0]))


def test_external_gevent_timeout_mid_query_replaces_the_connection(make_client):
    db = make_client(pinned_size=1)
    with db.session() as s:
        pid = s.pid
        with pytest.raises(gevent.Timeout), gevent.Timeout(0.2):
            s.execute("SELECT pg_sleep(30)")
        with pytest.raises(OperationalError, match="unusable"):
            s.fetchval("SELECT 1")
    assert db.stats()["pinned"] == IDLE
    with db.session() as s:
        assert s.pid != pid
        assert s.fetchval("SELECT 1") == 1
    wait_until(lambda: not backend_exists(db, pid))


def test_counts_stay_exact_under_random_kills_and_timeouts(make_client):
    db = make_client(pinned_size=2, acquire_timeout=5)
    rng = random.Random(7)

    def worker(i):
        with db.session() as s:
            s.fetchval("SELECT $1::int FROM pg_sleep($2)", [i, rng.choice([0, 0.002, 0.01])])
            with s.transaction() as tx:
                tx.execute("SELECT pg_sleep(0.003)")

    def timed_worker(i):
        try:
            with gevent.Timeout(rng.uniform(0, 0.03)):
                worker(i)
        except gevent.Timeout:
            pass

    jobs = [gevent.spawn(rng.choice([worker, timed_worker]), i) for i in range(60)]
    for _ in range(25):
        gevent.sleep(rng.uniform(0, 0.01))
        rng.choice(jobs).kill(block=False)
    gevent.joinall(jobs)
    assert db.stats()["pinned"] == {"size": 2, "active": 0, "free": 2, "waiting": 0}
    for _ in range(2):  # every slot still yields a clean, working connection
        with db.session() as s:
            assert s.transaction_status == "I"
            assert s.fetchval("SELECT 42") == 42


# -- limits and failures -------------------------------------------------------------------


def test_max_lifetime_replaces_old_connections(make_client):
    db = make_client(pinned_size=1, max_lifetime=0.3)
    with db.session() as s:
        first = s.pid
    with db.session() as s:
        assert s.pid == first
        gevent.sleep(0.35)  # outlive max_lifetime while lent: closed on return
    with db.session() as s:
        assert s.pid != first
        assert s.fetchval("SELECT 1") == 1
    assert db.stats()["reconnects"] == 1


def test_idle_in_transaction_timeout_ends_a_stalled_transaction(make_client):
    db = make_client(pinned_size=1, idle_in_transaction_timeout=0.2)
    observer = make_client(pinned_size=1)
    with db.session() as s:
        assert s.fetchval("SHOW idle_in_transaction_session_timeout") == "200ms"
        pid = s.pid
    with pytest.raises(OperationalError) as failure, db.transaction() as tx:
        tx.execute("SELECT 1")
        wait_until(lambda: not backend_exists(observer, pid))  # the server ended it
        tx.execute("SELECT 2")
    assert getattr(failure.value, "sqlstate", None) == "25P03"
    assert db.stats()["pinned"] == IDLE
    with db.session() as s:  # a fresh connection, with the setting applied again
        assert s.pid != pid
        assert s.fetchval("SHOW idle_in_transaction_session_timeout") == "200ms"


def test_idle_connection_ended_by_the_server_is_replaced_at_acquire(make_client):
    db = make_client(pinned_size=1)
    other = make_client(pinned_size=1)
    with db.session() as s:
        pid = s.pid
    with other.session() as s:
        assert s.fetchval("SELECT pg_terminate_backend($1)", [pid]) is True
    wait_until(lambda: not backend_exists(other, pid))
    with db.session() as s:
        assert s.pid != pid
        assert s.fetchval("SELECT 1") == 1
    assert db.stats()["reconnects"] == 1


def test_a_free_connection_is_lent_without_yielding_to_other_greenlets(make_client):
    """The check of an idle connection at acquire must not switch greenlets: a borrower
    that yields there holds the connection while every runnable greenlet runs."""
    db = make_client(pinned_size=1)
    with db.session() as s:
        s.fetchval("SELECT 1")  # opened and idle now
    ran: list[str] = []
    for kind in ("session", "transaction"):
        bystander = gevent.spawn(ran.append, kind)  # runnable, waiting for a switch
        with getattr(db, kind)() as handle:
            assert ran == [], f"{kind}() let another greenlet run before lending"
            assert handle.fetchval("SELECT 1") == 1
        bystander.join()
        ran.clear()


def test_close_fails_waiters_and_refuses_new_sessions(make_client):
    db = make_client(pinned_size=1)

    def waiter():
        try:
            with db.session():
                pass
        except InterfaceError as exc:
            return exc

    with db.session() as s:
        job = gevent.spawn(waiter)
        gevent.sleep(0)
        db.close()
        assert "closed" in str(job.get())
        assert s.fetchval("SELECT 1") == 1  # a lent connection works until returned
    with pytest.raises(InterfaceError, match="closed"):
        db.session()
    assert db.stats()["pinned"] == IDLE


def test_forked_child_opens_its_own_and_leaves_the_parents_alone(make_client):
    db = make_client(pinned_size=1)
    with db.session() as s:
        parent_backend = s.pid
        s.execute("SET application_name = 'parent-session'")
        read_fd, write_fd = os.pipe()
        child = gevent.os.fork()  # forked while the parent holds the connection
        if child == 0:  # the child: never return into pytest
            code = 1
            try:
                with gevent.Timeout(10), db.session() as child_session:
                    report = {"pid": child_session.pid,
                              "stats": db.stats()["pinned"]}
                os.write(write_fd, json.dumps(report).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write_fd)
        with gevent.Timeout(10):
            _, status = gevent.os.waitpid(child, 0)
        with os.fdopen(read_fd, "rb") as pipe:
            report = json.loads(pipe.read() or b"{}")
        assert os.waitstatus_to_exitcode(status) == 0
        assert report["pid"] != parent_backend
        assert report["stats"] == {"size": 1, "active": 1, "free": 0, "waiting": 0}
        # the parent's connection was neither closed nor disturbed by the child
        assert s.fetchval("SHOW application_name") == "parent-session"
    with db.session() as s:
        assert s.pid == parent_backend
    assert db.stats()["reconnects"] == 0
