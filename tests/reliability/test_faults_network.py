"""Network faults between pgmux and a real server (the fault proxy): stalls, connect
timeouts, 1-byte fragmentation, resets and closes mid-stream, injected bytes, and both
socket buffers full at once."""

from __future__ import annotations

import time

import gevent
import pytest
from support.fakeserver import FakeServer
from support.faultproxy import FaultProxy, silent_listener
from support.mux import drivers, join_all, outcome, total, unique_name, wait_until, warm

from pgmux.client import Client
from pgmux.errors import (
    DivisionByZero,
    IndeterminateResultError,
    NotDispatchedError,
    OperationalError,
    ProtocolError,
    QueryTimeout,
)

SLACK = 0.5  # seconds a timeout may overrun on a loaded 2-core machine
SLEEP = "SELECT 1 FROM pg_sleep($1)"


@pytest.fixture
def proxy(pg):
    server = pg.embedded_server
    with FaultProxy(("127.0.0.1", server.port)) as line:
        yield line


def live(db: Client) -> int:
    return db.stats()["pipeline"]["live"]


def timed(call):
    started = time.monotonic()
    kind, value = outcome(call)
    return kind, value, time.monotonic() - started


# -- stalls ------------------------------------------------------------------------------


def test_stall_callers_time_out_within_their_bounds_and_the_line_recovers(clients, proxy):
    db = clients(pipeline_size=2, port=proxy.port, probe_interval=0)
    warm(db, "SELECT $1::int", [0])  # described: each caller below sends one unit
    proxy.down.stall()
    jobs = [gevent.spawn(timed, lambda i=i: db.fetchval("SELECT $1::int", [i], timeout=0.3))
            for i in range(40)]
    join_all(jobs)
    for job in jobs:
        kind, value, elapsed = job.value
        assert isinstance(value, QueryTimeout), value
        assert 0.3 <= elapsed < 0.3 + SLACK, elapsed
    assert total(db, "load") == 40, "abandoned units stay in their FIFO until answered"

    proxy.down.resume()
    wait_until(lambda: total(db, "load") == 0, what="the abandoned answers to drain")
    jobs = [gevent.spawn(db.fetchval, "SELECT $1::int + 1000", [i]) for i in range(40)]
    join_all(jobs)
    assert [job.value for job in jobs] == [i + 1000 for i in range(40)], "misrouted results"
    assert db.stats()["reconnects"] == 0 and live(db) == 2


def test_probe_finds_a_stalled_idle_connection_and_the_pool_recovers(clients, proxy):
    interval = 0.3
    db = clients(pipeline_size=2, port=proxy.port, probe_interval=interval, probe_timeout=0.5,
                 connect_timeout=1)
    assert db.fetchval("SELECT 1") == 1
    stalled = drivers(db)
    proxy.up.stall()
    proxy.down.stall()
    started = time.monotonic()
    wait_until(lambda: all(not d.alive for d in stalled), timeout=10,
               what="the probe to fail both stalled connections")
    detected = time.monotonic() - started
    assert detected < 2 * interval + 0.5 + SLACK + 0.5, f"took {detected:.2f}s"
    assert all("probe" in str(d.failure) for d in stalled), [d.failure for d in stalled]
    # While the line is down the caller fails fast or times out; it never hangs.
    kind, value, elapsed = timed(lambda: db.fetchval("SELECT 2", timeout=1.0))
    assert isinstance(value, (NotDispatchedError, QueryTimeout)) and elapsed < 1.0 + SLACK

    proxy.heal()
    wait_until(lambda: live(db) == 2, timeout=15, what="both connections back")
    assert db.fetchval("SELECT 3") == 3
    assert db.stats()["reconnects"] >= 2


def test_probe_leaves_a_connection_busy_with_a_long_query_alone(clients):
    db = clients(pipeline_size=1, probe_interval=0.2, probe_timeout=0.3)
    assert db.fetchval("SELECT $1::int FROM pg_sleep(1.5)", [7]) == 7
    assert db.stats()["reconnects"] == 0


# -- connect timeouts --------------------------------------------------------------------


def test_connect_timeout_against_a_port_that_accepts_and_never_answers():
    sock, port = silent_listener()
    try:
        db = Client(host="127.0.0.1", port=port, user="x", dbname="x", connect_timeout=0.5,
                    sslmode="disable", pipeline_size=2)
        kind, value, elapsed = timed(db.start)
        assert isinstance(value, OperationalError) and "timed out" in str(value), value
        assert 0.5 <= elapsed < 0.5 + SLACK, elapsed
        db.close()
    finally:
        sock.close()


def test_connect_timeout_when_the_tls_handshake_stalls(pg, proxy):
    pg.need_tls()
    proxy.down.stall_after(1)  # the server's "S" gets through, the handshake does not
    db = Client(pg.dsn, port=proxy.port, sslmode="require", connect_timeout=0.5,
                pipeline_size=1)
    kind, value, elapsed = timed(db.start)
    assert isinstance(value, OperationalError) and "timed out" in str(value), value
    assert 0.5 <= elapsed < 0.5 + SLACK, elapsed
    assert proxy.down.forwarded == 1
    db.close()


@pytest.mark.parametrize("mode", ["tls-stall", "silent"])
def test_connect_timeout_against_a_server_that_stops_talking(mode):
    with FakeServer(mode=mode) as fake:
        sslmode = "require" if mode == "tls-stall" else "disable"
        db = Client(fake.dsn(sslmode=sslmode), connect_timeout=0.5, pipeline_size=1)
        kind, value, elapsed = timed(db.start)
        assert isinstance(value, OperationalError) and "timed out" in str(value), value
        assert 0.5 <= elapsed < 0.5 + SLACK, elapsed
        db.close()


# -- fragmentation -------------------------------------------------------------------------

MIXED = [
    ("SELECT $1::int AS n", lambda i: [i]),
    ("SELECT $1::text AS t, length($1::text) AS l", lambda i: [f"ünï-{i}-" + "€" * (i % 7)]),
    ("SELECT NULL::int AS a, $1::bigint * 3 AS b, $2::text AS c", lambda i: [i, None]),
    ("SELECT g, md5(g::text) FROM generate_series(1, $1::int) g", lambda i: [i % 40]),
    ("SELECT $1::int / ($1::int % 5)", lambda i: [i]),  # every fifth divides by zero
    ("SELECT $1::numeric * 1.5, now() IS NOT NULL, '\\x00ff'::bytea", lambda i: [i]),
]


def _run_mixed(db: Client, count: int):
    def one(i):
        sql, params = MIXED[i % len(MIXED)]
        kind, value = outcome(lambda: db.query(sql, params(i)))
        if kind == "ok":
            return "ok", value.columns, value.command, [tuple(row) for row in value]
        return "error", type(value).__name__, getattr(value, "sqlstate", None)

    jobs = [gevent.spawn(one, i) for i in range(count)]
    join_all(jobs, timeout=60)
    return [job.value for job in jobs]


@pytest.mark.parametrize(("chunk", "sslmode"), [(1, "disable"), ("random", "disable"),
                                                (1, "require")])
def test_fragmented_both_ways_under_load_gives_identical_results(clients, proxy, chunk, sslmode):
    count = 150
    direct = clients(pipeline_size=2, sslmode=sslmode)
    expected = _run_mixed(direct, count)
    assert ("error", DivisionByZero.__name__, "22012") in expected
    assert sum(item[0] == "ok" for item in expected) > count * 3 // 4

    db = clients(pipeline_size=2, port=proxy.port, sslmode=sslmode)
    db.fetchval("SELECT 1")
    reads_before = total(db, "readables")
    proxy.up.chunk = proxy.down.chunk = chunk
    sent_before = proxy.down.forwarded
    got = _run_mixed(db, count)
    assert got == expected
    received = proxy.down.forwarded - sent_before
    reads = total(db, "readables") - reads_before
    if sslmode == "disable":  # (under TLS a read returns whole records, however split)
        # The client really saw the stream in pieces: about one socket read per proxy send.
        assert reads >= received / (2 if chunk == 1 else 64), (reads, received)
    assert total(db, "load") == 0 and db.stats()["reconnects"] == 0


# -- the line breaks -------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["reset", "close"])
def test_line_cut_mid_stream_fails_in_flight_callers_promptly(clients, proxy, how):
    db = clients(pipeline_size=2, port=proxy.port)
    assert db.fetchval("SELECT 1") == 1
    old = drivers(db)
    warm(db, SLEEP, [0.0])  # described: what is in flight below is the sleep itself
    sleepers = [gevent.spawn(timed, lambda: db.fetchval(SLEEP, [30.0])) for _ in range(2)]
    wait_until(lambda: total(db, "in_flight") == 2, what="a sleeper on each connection")
    cut = time.monotonic()
    proxy.reset_all() if how == "reset" else proxy.close_all()
    join_all(sleepers, timeout=5)
    for job in sleepers:
        kind, value, elapsed = job.value
        assert isinstance(value, IndeterminateResultError), value
    assert time.monotonic() - cut < 1.0
    wait_until(lambda: live(db) == 2 and not set(drivers(db)) & set(old),
               what="both connections replaced")
    jobs = [gevent.spawn(db.fetchval, "SELECT $1::int", [i]) for i in range(50)]
    join_all(jobs)
    assert [job.value for job in jobs] == list(range(50))


def test_half_close_towards_the_client_is_a_lost_connection(clients, proxy):
    db = clients(pipeline_size=1, port=proxy.port)
    assert db.fetchval("SELECT 1") == 1
    warm(db, SLEEP, [0.0])  # described: what is in flight below is the sleep itself
    job = gevent.spawn(timed, lambda: db.fetchval(SLEEP, [30.0]))
    wait_until(lambda: total(db, "in_flight") == 1)
    proxy.down.close()
    join_all([job], timeout=5)
    assert isinstance(job.value[1], IndeterminateResultError), job.value
    wait_until(lambda: live(db) == 1 and db.fetchval("SELECT 5") == 5)


def test_bytes_injected_into_the_server_stream_replace_the_connection(clients, proxy):
    db = clients(pipeline_size=2, port=proxy.port)
    assert db.fetchval("SELECT 1") == 1
    proxy.down.inject(b"\x00garbage that is no message")
    wait_until(lambda: db.stats()["reconnects"] == 2 and live(db) == 2,
               what="both connections replaced")
    assert all(isinstance(d.failure, ProtocolError) for d in drivers(db) if not d.alive)
    assert db.fetchval("SELECT 9") == 9


def test_added_latency_costs_one_round_trip_for_a_burst(clients, proxy):
    db = clients(pipeline_size=2, port=proxy.port)
    assert db.fetchval("SELECT 1") == 1
    proxy.up.delay = proxy.down.delay = 0.05  # 100 ms round trip
    started = time.monotonic()
    jobs = [gevent.spawn(db.fetchval, "SELECT $1::int", [i]) for i in range(100)]
    join_all(jobs)
    elapsed = time.monotonic() - started
    assert [job.value for job in jobs] == list(range(100))
    assert 0.1 <= elapsed < 0.6, f"{elapsed:.2f}s for 100 pipelined queries at 100 ms RTT"


def test_throughput_cap_slows_but_never_corrupts(clients, proxy):
    db = clients(pipeline_size=2, port=proxy.port)
    assert db.fetchval("SELECT 1") == 1
    proxy.down.rate = 200_000  # bytes per second
    started = time.monotonic()
    rows = db.query("SELECT g, repeat('x', 1000) FROM generate_series(1, 200) g")
    assert time.monotonic() - started >= 0.5  # ~200 KB at 200 KB/s
    assert [row[0] for row in rows] == list(range(1, 201))
    assert all(row[1] == "x" * 1000 for row in rows)


# -- both socket buffers full ---------------------------------------------------------------


@pytest.mark.parametrize("sslmode", ["disable", "require"])
def test_65535_parameter_query_while_the_server_streams_notices(pg, clients, sslmode):
    noisy = unique_name("mux_noisy")
    pg.admin(
        f"CREATE FUNCTION {noisy}(n int) RETURNS int LANGUAGE plpgsql AS $$"
        " BEGIN FOR i IN 1..n LOOP RAISE NOTICE '%', repeat('n', 8000); END LOOP;"
        " RETURN n; END $$")
    notices = []
    db = clients(pipeline_size=1, notice_handler=notices.append, sslmode=sslmode)
    params = [f"{i:06d}" + "p" * 194 for i in range(65535)]  # 200 bytes each: 13 MB
    wide = "SELECT array_length(ARRAY[" + ",".join(
        f"${i}::text" for i in range(1, 65536)) + "], 1), $65535::text"

    # Unit 1 makes the server write 16 MB of notices while unit 2 (14 MB of Parse and Bind)
    # is being written: more than both socket buffers hold either way, so the writer is
    # blocked in sendall while the reader must keep reading for either to finish.
    loud = gevent.spawn(db.fetchval, f"SELECT {noisy}(2000)")
    big = gevent.spawn(db.fetchone, wide, params)
    join_all([loud, big], timeout=60)
    assert loud.value == 2000
    assert big.value == (65535, params[-1])
    assert len(notices) == 2000 and all(len(n["M"]) == 8000 for n in notices)
    stats = db.stats()["pipeline"]["drivers"][0]
    print(f"\nwide query: flush_incomplete={stats['flush_incomplete']}, "
          f"readables={stats['readables']}")
    if sslmode == "disable":  # (a TLS send writes whole or blocks, so never counts here)
        assert stats["flush_incomplete"] >= 1, "the send buffer never filled: proved nothing"
    assert stats["load"] == 0


# -- the pinned path through the same faults -------------------------------------------------


def test_pinned_query_through_a_stalled_line_times_out_within_its_bound(clients, proxy):
    db = clients(pipeline_size=1, pinned_size=1, port=proxy.port)
    with db.session() as session:
        assert session.fetchval("SELECT 1") == 1
    proxy.down.stall()

    def stalled_session():
        with db.session() as session:
            return session.fetchval("SELECT 1 FROM pg_sleep(10)", timeout=0.3)

    kind, value, elapsed = timed(stalled_session)
    assert isinstance(value, QueryTimeout), value
    assert elapsed < 0.3 + SLACK, f"the caller waited {elapsed:.2f}s"
    proxy.heal()
    wait_until(lambda: db.stats()["pinned"]["active"] == 0, what="the slot back in the pool")
    with db.session() as session:
        assert session.fetchval("SELECT $1::int", [4]) == 4


def test_pinned_path_fragmented_both_ways_gives_identical_results(clients, proxy):
    def run(db: Client):
        out = []
        with db.session() as session:
            for i in range(30):
                sql, make_params = MIXED[i % len(MIXED)]
                args = make_params(i)
                kind, value = outcome(lambda sql=sql, args=args: session.query(sql, args))
                out.append((kind, [tuple(r) for r in value]) if kind == "ok"
                           else (kind, type(value).__name__))
            with session.transaction() as tx:
                out.append(tx.fetchval("SELECT string_agg(g::text, ',') "
                                       "FROM generate_series(1, 300) g"))
        return out

    expected = run(clients(pipeline_size=1, pinned_size=1, sslmode="disable"))
    db = clients(pipeline_size=1, pinned_size=1, port=proxy.port, sslmode="disable")
    proxy.up.chunk = proxy.down.chunk = 1
    assert run(db) == expected
