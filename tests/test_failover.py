"""Hosts as in production: target_session_attrs and load balancing as libpq does them, host
health shared by a client's connections (a dead or black-hole host costs its timeout once
per backoff period), failover and fail-back, rotation by max_lifetime. Real servers: a
primary with a streaming hot standby (support.replicas)."""

from __future__ import annotations

import time

import gevent
import pytest
from support.blackhole import refused_port
from support.mux import PATIENCE, join_all, wait_until

from pgmux.client import Client
from pgmux.errors import OperationalError
from pgmux.io.connect import connect
from pgmux.io.conninfo import Endpoint, make_conninfo
from pgmux.io.hosts import HostHealth

FAIL_BACK_BOUND = 30.0  # seconds: the bound for all connections back on the preferred host


@pytest.fixture
def made():
    """made(**options) -> a started Client; all closed after the test."""
    clients: list[Client] = []

    def make(**options) -> Client:
        options.setdefault("connect_timeout", PATIENCE)
        db = Client(**options)
        clients.append(db)
        return db.start()

    yield make
    for db in clients:
        db.close(timeout=1)


def address(server) -> str:
    return f"127.0.0.1:{server.port}"


def hosts_of(db: Client) -> list[str]:
    """Where each live pipelined connection is (``host:port``), from stats()."""
    return [driver["host"] for driver in db.stats()["pipeline"]["drivers"]]


def all_on(db: Client, server, count: int):
    return lambda: hosts_of(db) == [address(server)] * count


def conninfo(**options):
    """A ConnInfo with a bounded connect_timeout unless one is given."""
    return make_conninfo(**{"connect_timeout": PATIENCE, **options})


def connected_port(info, health=None) -> int:
    """Connect with ``info`` (its own connect_timeout) and say to which port."""
    conn = connect(info, hosts=health)
    try:
        return conn.endpoint.port
    finally:
        conn.close()


# target_session_attrs and load_balance_hosts, as libpq ----------------------------------


@pytest.mark.parametrize("standby_first", [False, True], ids=["primary-first", "standby-first"])
@pytest.mark.parametrize("target, wanted", [
    ("any", "first"), ("read-write", "primary"), ("primary", "primary"),
    ("read-only", "standby"), ("standby", "standby"), ("prefer-standby", "standby"),
])
def test_target_session_attrs_picks_the_host_libpq_would(replicas, standby_first, target, wanted):
    servers = (replicas.standby, replicas.primary) if standby_first else (
        replicas.primary, replicas.standby)
    info = conninfo(**replicas.hosts(*servers), target_session_attrs=target)
    expected = servers[0] if wanted == "first" else getattr(replicas, wanted)
    assert connected_port(info) == expected.port


def test_prefer_standby_takes_the_primary_when_no_standby_answers(replicas):
    info = conninfo(host="127.0.0.1,127.0.0.1", port=f"{refused_port()},"
                         f"{replicas.primary.port}", user="postgres", dbname="postgres",
                         sslmode="disable", target_session_attrs="prefer-standby")
    assert connected_port(info) == replicas.primary.port


def test_standby_target_without_a_standby_says_why_for_each_host(replicas):
    info = conninfo(**replicas.hosts(replicas.primary), target_session_attrs="standby")
    with pytest.raises(OperationalError, match="not in hot standby mode"):
        connect(info, timeout=PATIENCE)


def test_random_load_balancing_uses_every_host(replicas):
    info = conninfo(**replicas.hosts(), load_balance_hosts="random")
    assert {connected_port(info) for _ in range(40)} == {replicas.primary.port,
                                                          replicas.standby.port}
    standby_only = conninfo(**replicas.hosts(), load_balance_hosts="random",
                                 target_session_attrs="prefer-standby")
    assert {connected_port(standby_only) for _ in range(10)} == {replicas.standby.port}


def test_a_host_found_unsuitable_is_tried_after_the_others_next_time(replicas):
    health = HostHealth()
    info = conninfo(**replicas.hosts(replicas.standby, replicas.primary),
                         target_session_attrs="read-write")
    assert [e.port for e in health.order(info.endpoints(), "read-write")] == [
        replicas.standby.port, replicas.primary.port]
    assert connected_port(info, health) == replicas.primary.port  # after the standby said no
    assert [e.port for e in health.order(info.endpoints(), "read-write")] == [
        replicas.primary.port, replicas.standby.port]


# a dead or black-hole host costs its timeout once per backoff period ----------------------


def behind_a_black_hole(black_hole, server, **options) -> dict:
    return {"host": "127.0.0.1,127.0.0.1", "port": f"{black_hole.port},{server.port}",
            "user": "postgres", "dbname": "postgres", "sslmode": "disable", **options}


def test_black_hole_first_host_costs_one_attempt_for_a_whole_pool(black_hole, replicas, made):
    db = made(**behind_a_black_hole(black_hole, replicas.primary), connect_timeout=0.5,
              host_backoff=60, pipeline_size=4, pinned_size=2)

    def session() -> int:
        with db.session() as s:
            gevent.sleep(0.01)  # both pinned connections open at once
            return s.fetchval("SELECT 1")

    jobs = [gevent.spawn(session) for _ in range(2)]
    join_all(jobs)
    assert [job.value for job in jobs] == [1, 1]
    assert black_hole.attempts == 1  # four pipelined + two pinned connections, one probe
    assert hosts_of(db) == [address(replicas.primary)] * 4
    assert db.stats()["hosts"][f"127.0.0.1:{black_hole.port}"]["down_for"] > 0


def test_black_hole_is_tried_again_once_per_backoff_period(black_hole, replicas):
    info = conninfo(**behind_a_black_hole(black_hole, replicas.primary),
                         connect_timeout=0.3)
    health = HostHealth(backoff=1.5)
    hole = Endpoint("127.0.0.1", black_hole.port)
    for _ in range(3):
        assert connected_port(info, health) == replicas.primary.port
    assert black_hole.attempts == 1
    wait_until(lambda: not health.is_down(hole), what="the backoff period to end")
    for _ in range(3):
        assert connected_port(info, health) == replicas.primary.port
    assert black_hole.attempts == 2


def test_a_refused_host_is_skipped_without_a_new_attempt_while_down(replicas):
    port = refused_port()
    info = conninfo(host="127.0.0.1,127.0.0.1", port=f"{port},{replicas.primary.port}",
                         user="postgres", dbname="postgres", sslmode="disable")
    health = HostHealth(backoff=60)
    assert connected_port(info, health) == replicas.primary.port
    assert health.marked_down == 1
    for _ in range(5):
        assert connected_port(info, health) == replicas.primary.port
    assert health.marked_down == 1  # not attempted again: it would have failed again


# failover and fail-back --------------------------------------------------------------------


def test_failover_then_fail_back_to_the_preferred_host(fresh_replicas, made, capsys):
    pair = fresh_replicas
    db = made(**pair.hosts(), pipeline_size=4, pinned_size=1, host_backoff=1.0,
              rebalance_interval=1.0, connect_timeout=2, application_name="failback")
    assert hosts_of(db) == [address(pair.primary)] * 4
    started = time.monotonic()
    pair.primary.shut_down()
    wait_until(all_on(db, pair.standby, 4), what="every connection on the standby")
    failover = time.monotonic() - started
    assert db.fetchval("SELECT pg_is_in_recovery()") is True
    pair.primary.start_again()
    returned = time.monotonic()
    wait_until(all_on(db, pair.primary, 4), timeout=FAIL_BACK_BOUND,
               what="every connection back on the primary")
    fail_back = time.monotonic() - returned
    assert db.fetchval("SELECT pg_is_in_recovery()") is False
    assert db.fetchval("SELECT txid_current() > 0") is True  # a write works again
    assert pair.primary.psql("SELECT count(*) FROM pg_stat_activity "
                             "WHERE application_name = 'failback'") == "4"
    assert db.stats()["pipeline"]["rotations"] >= 4
    with db.transaction() as tx:  # the pinned connection too
        assert tx.fetchval("SELECT pg_is_in_recovery()") is False
    with capsys.disabled():
        print(f"\n[failover] all 4 connections on the standby {failover:.2f}s after the "
              f"primary stopped; back on the primary {fail_back:.2f}s after it returned "
              f"(host_backoff=1, rebalance_interval=1)")


def test_prefer_standby_moves_back_to_the_standby_when_it_returns(fresh_replicas, made):
    pair = fresh_replicas
    db = made(**pair.hosts(), target_session_attrs="prefer-standby", pipeline_size=2,
              pinned_size=0, host_backoff=1.0, rebalance_interval=1.0, connect_timeout=2)
    assert hosts_of(db) == [address(pair.standby)] * 2
    pair.standby.shut_down()
    wait_until(all_on(db, pair.primary, 2), what="the reads on the primary meanwhile")
    pair.standby.start_again()
    wait_until(all_on(db, pair.standby, 2), timeout=FAIL_BACK_BOUND,
               what="the reads back on the standby")
    assert all(driver["standby"] for driver in db.stats()["pipeline"]["drivers"])


def test_read_write_target_follows_a_promoted_standby(fresh_replicas, made, capsys):
    pair = fresh_replicas
    db = made(**pair.hosts(), target_session_attrs="read-write", pipeline_size=2,
              pinned_size=1, host_backoff=1.0, connect_timeout=2)
    assert hosts_of(db) == [address(pair.primary)] * 2
    started = time.monotonic()
    pair.primary.shut_down()
    pair.standby.promote()
    wait_until(all_on(db, pair.standby, 2), what="every connection on the promoted standby")
    failover = time.monotonic() - started
    assert db.fetchval("SELECT txid_current() > 0") is True
    with db.transaction() as tx:
        tx.execute("CREATE TABLE after_promotion (n int)")
    with capsys.disabled():
        print(f"\n[failover] promotion: writes on the promoted standby {failover:.2f}s after "
              "the primary stopped (stop + pg_ctl promote included)")


# max_lifetime -------------------------------------------------------------------------------


def test_max_lifetime_drains_a_connection_without_failing_its_query(replicas, made):
    db = made(**replicas.hosts(replicas.primary), pipeline_size=1, pinned_size=0,
              max_lifetime=0.3)
    first_pid = db.fetchval("SELECT pg_backend_pid()")
    slow = gevent.spawn(db.fetchval, "SELECT 7 FROM pg_sleep(1.0)")
    wait_until(lambda: db.stats()["pipeline"]["rotations"] >= 1, what="a rotation")
    assert db.fetchval("SELECT pg_backend_pid()") != first_pid  # new work, new connection
    join_all([slow])
    assert slow.value == 7  # the query in flight on the old connection finished there
    wait_until(lambda: replicas.primary.psql(
        f"SELECT count(*) FROM pg_stat_activity WHERE pid = {first_pid}") == "0",
        what="the drained connection to close")


def test_max_lifetime_rotation_under_load_loses_nothing(clients):
    db = clients(pipeline_size=2, max_lifetime=0.4)
    until = time.monotonic() + 2.5
    pids: set[int] = set()

    def worker(i: int) -> int:
        done = 0
        while time.monotonic() < until:
            n = i * 100_000 + done
            sql = "SELECT $1::int FROM pg_sleep(0.02)" if done % 10 == 0 else "SELECT $1::int"
            assert db.fetchval(sql, [n]) == n
            done += 1
        return done

    def watch() -> None:
        while time.monotonic() < until:
            pids.update(d.conn.pid for d in db._pipeline._live)
            gevent.sleep(0.05)

    jobs = [gevent.spawn(worker, i) for i in range(64)]
    watcher = gevent.spawn(watch)
    join_all(jobs + [watcher])
    assert all(job.exception is None for job in jobs), [j.exception for j in jobs if j.exception]
    assert sum(job.value for job in jobs) > 64
    assert db.stats()["pipeline"]["rotations"] >= 4
    assert len(pids) >= 4  # the two slots went through several connections each


@pytest.mark.slow
def test_fail_back_within_30_seconds_with_the_default_settings(fresh_replicas, made, capsys):
    """host_backoff and rebalance_interval at their defaults (10 s each)."""
    pair = fresh_replicas
    db = made(**pair.hosts(), pipeline_size=4, pinned_size=0, connect_timeout=2)
    pair.primary.shut_down()
    wait_until(all_on(db, pair.standby, 4), what="every connection on the standby")
    pair.primary.start_again()
    returned = time.monotonic()
    wait_until(all_on(db, pair.primary, 4), timeout=FAIL_BACK_BOUND, interval=0.05,
               what="every connection back on the primary")
    with capsys.disabled():
        print(f"\n[failover] defaults: back on the primary {time.monotonic() - returned:.2f}s "
              "after it returned")
