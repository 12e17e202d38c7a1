"""db.with_target(): reads on standbys over the view's own connections, host health shared
with the client, and read_your_writes (a read started after a write returned sees it).
Real servers: a primary with a streaming hot standby (support.replicas)."""

from __future__ import annotations

import gevent
import pytest
from support.mux import PATIENCE, join_all, unique_name, wait_until

from pgmux.client import Client, TargetView
from pgmux.errors import InterfaceError
from pgmux.pool.freshness import WriteClassifier, parse_lsn

ROUNDS = 300


@pytest.fixture
def primary_client(replicas):
    """db(**options) -> a started client for writes (read-write) on the replica pair."""
    made: list[Client] = []

    def make(**options) -> Client:
        options = {"target_session_attrs": "read-write", "connect_timeout": PATIENCE,
                   "pipeline_size": 2, "pinned_size": 1, **options}
        db = Client(**replicas.hosts(), **options)
        made.append(db)
        return db.start()

    yield make
    for db in made:
        db.close(timeout=1)


@pytest.fixture
def table(replicas):
    """A fresh table ``(n int, v int)`` on the primary, replayed on the standby."""
    name = unique_name("ryw")
    replicas.primary.psql(f"CREATE TABLE {name} (n int PRIMARY KEY, v int NOT NULL)")
    replicas.wait_replayed()
    yield name
    replicas.primary.psql(f"DROP TABLE {name}")


def reads_answered(view: TargetView) -> dict[str, int]:
    return view.stats()["read_your_writes"]


# the view ---------------------------------------------------------------------------------


def test_view_reads_on_the_standby_while_the_client_writes_on_the_primary(replicas,
                                                                          primary_client):
    db = primary_client()
    reads = db.with_target("prefer-standby")
    assert reads.fetchval("SELECT pg_is_in_recovery()") is True
    assert db.fetchval("SELECT pg_is_in_recovery()") is False
    view_stats = reads.stats()
    assert view_stats["target"] == "prefer-standby"
    assert {(d["host"], d["standby"]) for d in view_stats["pipeline"]["drivers"]} == {
        (f"127.0.0.1:{replicas.standby.port}", True)}
    assert view_stats["pinned"]["size"] == 0


def test_with_target_returns_one_view_per_target(primary_client):
    db = primary_client()
    reads = db.with_target("prefer-standby")
    assert db.with_target("prefer-standby") is reads
    assert reads.with_target("prefer-standby") is reads
    assert db.with_target("prefer-standby", read_your_writes=True) is not reads
    assert db.with_target("any", pipeline_size=1).stats()["pipeline"]["size"] == 1
    with pytest.raises(InterfaceError, match="invalid target_session_attrs"):
        db.with_target("writable")
    with pytest.raises(InterfaceError, match="pipeline_size must be at least 1"):
        db.with_target("any", pipeline_size=0)


def test_view_has_the_multiplexed_api_only(primary_client):
    reads = primary_client().with_target("standby")
    assert reads.query("SELECT 1 AS one").columns == ("one",)
    assert reads.fetchone("SELECT 1, 2") == (1, 2)
    assert reads.execute("SELECT generate_series(1, 3)") == 3
    with pytest.raises(InterfaceError, match="multiplexed API only"):
        reads.session()
    with pytest.raises(InterfaceError, match="multiplexed API only"):
        reads.transaction()


def test_view_and_client_share_prepared_statement_names(primary_client):
    db = primary_client()
    reads = db.with_target("standby")
    stmt = reads.prepare("shared_name", "SELECT $1::int * 2")
    assert stmt.fetchval([21]) == 42
    assert db.prepare("shared_name", "SELECT $1::int * 2").fetchval([4]) == 8
    with pytest.raises(InterfaceError, match="already prepared with different SQL"):
        db.prepare("shared_name", "SELECT $1::int * 3")


def test_view_shares_host_health_with_the_client(replicas, black_hole):
    db = Client(host="127.0.0.1,127.0.0.1,127.0.0.1",
                port=f"{black_hole.port},{replicas.primary.port},{replicas.standby.port}",
                user="postgres", dbname="postgres", sslmode="disable", connect_timeout=0.5,
                host_backoff=60, target_session_attrs="read-write", pipeline_size=2)
    try:
        db.start()
        reads = db.with_target("prefer-standby").start()
        assert reads.hosts is db.hosts
        assert reads.fetchval("SELECT pg_is_in_recovery()") is True
        assert black_hole.attempts == 1  # the view's connections did not try it again
    finally:
        db.close()
    assert reads.closed  # closed with its client


# read_your_writes ---------------------------------------------------------------------------


def test_read_your_writes_300_rounds_no_miss_and_the_standby_serves_reads(
        replicas, primary_client, table, capsys):
    db = primary_client()
    reads = db.with_target("prefer-standby", read_your_writes=True)
    misses = 0
    for n in range(ROUNDS):
        db.execute(f"INSERT INTO {table} VALUES ($1, $2)", [n, n * 7])
        if reads.fetchval(f"SELECT v FROM {table} WHERE n = $1", [n]) != n * 7:
            misses += 1
    answered = reads_answered(reads)
    assert misses == 0
    assert answered["standby"] + answered["standby_checked"] > 0  # the standby did serve
    assert sum(answered[k] for k in ("standby", "standby_checked", "primary")) == ROUNDS
    with capsys.disabled():
        print(f"\n[read_your_writes] {ROUNDS} write-then-read rounds, 0 misses: {answered}")


def test_read_your_writes_from_many_greenlets(primary_client, table):
    db = primary_client(pipeline_size=4)
    reads = db.with_target("prefer-standby", read_your_writes=True)

    def rounds(worker: int) -> int:
        misses = 0
        for i in range(20):
            n = worker * 1000 + i
            db.execute(f"INSERT INTO {table} VALUES ($1, $2)", [n, i])
            misses += reads.fetchval(f"SELECT v FROM {table} WHERE n = $1", [n]) != i
        return misses

    jobs = [gevent.spawn(rounds, worker) for worker in range(16)]
    join_all(jobs)
    assert [job.value for job in jobs] == [0] * 16
    assert reads_answered(reads)["fences"] < 16 * 20  # writers finishing together share


def test_a_lagging_standby_is_skipped_and_the_primary_answers(replicas, primary_client, table):
    db = primary_client()
    reads = db.with_target("prefer-standby", read_your_writes=True)
    replicas.standby.psql("SELECT pg_wal_replay_pause()")
    try:
        db.execute(f"INSERT INTO {table} VALUES (1, 10)")
        assert reads.fetchval(f"SELECT v FROM {table} WHERE n = 1") == 10
        answered = reads_answered(reads)
        assert answered["behind"] >= 1 and answered["primary"] >= 1
    finally:
        replicas.standby.psql("SELECT pg_wal_replay_resume()")
    replicas.wait_replayed()
    before = reads_answered(reads)["standby"] + reads_answered(reads)["standby_checked"]
    assert reads.fetchval(f"SELECT v FROM {table} WHERE n = 1") == 10
    after = reads_answered(reads)["standby"] + reads_answered(reads)["standby_checked"]
    assert after == before + 1  # caught up: the standby answers again


def test_a_committed_transaction_and_a_prepared_write_are_seen(replicas, primary_client,
                                                               table):
    db = primary_client()
    reads = db.with_target("prefer-standby", read_your_writes=True)
    replicas.standby.psql("SELECT pg_wal_replay_pause()")
    try:
        with db.transaction() as tx:
            tx.execute(f"INSERT INTO {table} VALUES (1, 1)")
        assert reads.fetchval(f"SELECT count(*) FROM {table}") == 1
        insert = db.prepare(unique_name("ins"), f"INSERT INTO {table} VALUES ($1, $2)")
        insert.execute([2, 2])
        assert reads.fetchval(f"SELECT count(*) FROM {table}") == 2
        with db.session() as s:
            s.execute(f"INSERT INTO {table} VALUES (3, 3)")
        assert reads.fetchval(f"SELECT count(*) FROM {table}") == 3
    finally:
        replicas.standby.psql("SELECT pg_wal_replay_resume()")


def test_reads_without_read_your_writes_are_not_fenced(replicas, primary_client, table):
    db = primary_client()
    reads = db.with_target("prefer-standby")
    replicas.standby.psql("SELECT pg_wal_replay_pause()")
    try:
        db.execute(f"INSERT INTO {table} VALUES (1, 1)")
        assert reads.fetchval(f"SELECT count(*) FROM {table}") == 0  # the standby, behind
    finally:
        replicas.standby.psql("SELECT pg_wal_replay_resume()")
    wait_until(lambda: reads.fetchval(f"SELECT count(*) FROM {table}") == 1,
               what="the standby to replay the insert")


def test_read_your_writes_needs_the_clients_pipeline(replicas):
    db = Client(**replicas.hosts(), pipeline_size=0)
    with pytest.raises(InterfaceError, match="pipeline_size must be > 0"):
        db.with_target("prefer-standby", read_your_writes=True, pipeline_size=2)


# the pieces ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sql, write", [
    ("SELECT 1", False), ("  select * from t where s = 'INSERT'", False),
    ("VALUES (1)", False), ("TABLE t", False), ("SHOW work_mem", False),
    ("(SELECT 1) UNION (SELECT 2)", False), ("SELECT 1 -- DELETE", False),
    ("INSERT INTO t VALUES (1)", True), ("UPDATE t SET v = 1", True),
    ("DELETE FROM t", True), ("WITH x AS (SELECT 1) SELECT * FROM x", True),
    ("SELECT nextval('s')", True), ("SELECT * FROM t FOR UPDATE", True),
    ("SELECT 1 INTO t2", True), ("CALL p()", True), ("SELECT 'unterminated", True),
])
def test_which_statements_are_fenced(sql, write):
    assert WriteClassifier().is_write(sql) is write


def test_lsn_text_is_parsed_to_its_position():
    assert parse_lsn("0/0") == 0
    assert parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert parse_lsn(None) is None


def test_deferred_db_api_reads_go_to_the_primary_not_a_view(replicas, primary_client):
    """An unpinned DB-API transaction's reads run on the client's own (primary) pipelined
    connections, even when the client has a standby view."""
    import pgmux.dbapi

    db = primary_client()
    db.with_target("prefer-standby").fetchval("SELECT 1")  # a view on the standby exists
    conn = pgmux.dbapi.Connection(db)
    cur = conn.cursor()
    for _ in range(8):
        cur.execute("SELECT current_setting('in_hot_standby')")  # (stable: not pinned)
        assert cur.fetchone() == ("off",) and conn.info.backend_pid is None
    conn.rollback()


def test_a_fan_out_on_a_read_your_writes_view_sees_the_write_before_it(replicas,
                                                                       primary_client, table):
    """A fan-out is not checked statement by statement: it reads on the view's standby once
    that is known to have replayed the latest fenced write, and on the primary otherwise
    (here: replay paused after a write)."""
    db = primary_client()
    reads = db.with_target("prefer-standby", read_your_writes=True)
    sql = f"SELECT pg_is_in_recovery(), (SELECT v FROM {table} WHERE n = $1)"
    assert reads.fetchone(sql, [1]) == (True, None)  # checked: its replay position is known
    assert [r[0] for r in reads.gather([(sql, [1])] * 4)] == [(True, None)] * 4
    replicas.standby.psql("SELECT pg_wal_replay_pause()")
    try:
        db.execute(f"INSERT INTO {table} VALUES (1, 10)")
        with reads.batch() as batch:
            seen = [batch.fetchone(sql, [1]) for _ in range(4)]
        assert [p.result() for p in seen] == [(False, 10)] * 4  # the primary answered
    finally:
        replicas.standby.psql("SELECT pg_wal_replay_resume()")
