"""SQLAlchemy ORM transactions on postgresql+pgmux, as applications make them: a Session per
request at the default isolation. Reads stay multiplexed, the first write pins, the books
balance under concurrent transfers, session state never reaches another handle."""

from __future__ import annotations

import random
import uuid

import gevent
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from support.mux import SLOW_READ, wait_for_slow_read, wait_until
from support.pinned import record_writes
from support.session_states import STATES, session_objects

import pgmux.dbapi

ACCOUNTS, BALANCE = 20, 1000


def models(suffix: str):
    """An Account and a History model on tables of this test's own."""
    metadata = sa.MetaData()

    class Local(DeclarativeBase):
        pass

    Local.metadata = metadata

    class Account(Local):
        __tablename__ = f"orm_accounts_{suffix}"
        id: Mapped[int] = mapped_column(primary_key=True)
        balance: Mapped[int]

    class History(Local):
        __tablename__ = f"orm_history_{suffix}"
        id: Mapped[int] = mapped_column(primary_key=True)
        source: Mapped[int]
        target: Mapped[int]
        amount: Mapped[int]

    return metadata, Account, History


@pytest.fixture
def engine(pg):
    made = []

    def make(**query):
        url = sa.make_url(pg.dsn.replace("postgresql://", "postgresql+pgmux://", 1))
        eng = sa.create_engine(url.update_query_dict(
            {"application_name": f"orm-{uuid.uuid4().hex[:10]}", "acquire_timeout": "30",
             **query}))
        made.append(eng)
        return eng

    yield make
    for eng in made:
        eng.dispose()
    pgmux.dbapi.close_shared_clients()


@pytest.fixture
def bank(engine):
    """(engine, Account, History): ACCOUNTS accounts of BALANCE each."""
    eng = engine(pipeline_size="2", pinned_size="2")
    metadata, account, history = models(uuid.uuid4().hex[:8])
    metadata.create_all(eng)
    with Session(eng) as s, s.begin():
        s.add_all([account(id=i, balance=BALANCE) for i in range(ACCOUNTS)])
    yield eng, account, history
    metadata.drop_all(eng)


def client_of(eng):
    with eng.connect() as conn:
        return conn.connection.dbapi_connection.client


def backends(pg, eng) -> int:
    name = eng.url.query["application_name"]
    return int(pg.admin(f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}'"))


def test_a_read_session_takes_no_pinned_connection(engine, bank, pg):
    _, account, _ = bank
    eng = engine(pipeline_size="2", pinned_size="2")  # a client of its own: nothing open yet
    for i in range(ACCOUNTS):
        with Session(eng) as s:
            assert s.get(account, i).balance == BALANCE
    assert client_of(eng).stats()["pinned"]["active"] == 0
    assert backends(pg, eng) == 2  # the pipelined connections only: no pinned one opened


def test_a_write_pins_at_its_first_write_and_commits(bank, pg):
    eng, account, _ = bank
    with Session(eng) as s:
        found = s.get(account, 1)
        assert client_of(eng).stats()["pinned"]["active"] == 0
        found.balance += 5
        s.flush()  # the UPDATE: pinned now, with BEGIN in front of it
        assert s.connection().connection.dbapi_connection.info.backend_pid is not None
        s.commit()
    assert pg.admin(f"SELECT balance FROM {account.__tablename__} WHERE id = 1") == "1005"


def test_a_plain_orm_transaction_ends_without_a_reset(bank, monkeypatch):
    """Reads, a locking read, an UPDATE, an INSERT whose id comes from nextval() in the
    column's default, now(): nothing of the session's is left, so nothing is reset."""
    eng, account, history = bank
    writes = record_writes(monkeypatch)
    for _ in range(2):
        with Session(eng) as s:
            s.get(account, 1)
            s.scalars(sa.select(account).where(account.id == 2).with_for_update()).one()
            s.get(account, 1).balance -= 1
            s.add(history(source=1, target=2, amount=1))
            s.execute(sa.select(sa.func.now(), sa.func.count()).select_from(account))
            s.flush()
            done = len(writes)
            s.commit()
        assert writes[done:] == [b"Q\x00\x00\x00\x0bCOMMIT\x00"]
    assert not any(b"DISCARD" in w or b"RESET" in w for w in writes)


def test_deferred_pinning_false_in_the_url_pins_at_the_first_statement(engine, bank):
    _, account, _ = bank
    eng = engine(deferred_pinning="false", pipeline_size="2", pinned_size="2")
    with Session(eng) as s:
        s.get(account, 1)
        assert s.connection().connection.dbapi_connection.info.backend_pid is not None


def test_concurrent_transfers_under_with_for_update_keep_the_books(bank, pg):
    eng, account, history = bank
    committed: list[int] = []
    reads: list[int] = []

    def transfer(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(10):
            source, target = rng.sample(range(ACCOUNTS), 2)
            amount = rng.randint(1, 50)
            with Session(eng) as s:
                rows = {row.id: row for row in s.scalars(
                    sa.select(account).where(account.id.in_([source, target]))
                    .order_by(account.id).with_for_update())}
                if rows[source].balance < amount:
                    s.rollback()
                    continue
                rows[source].balance -= amount
                rows[target].balance += amount
                s.add(history(source=source, target=target, amount=amount))
                s.commit()
                committed.append(amount)

    def read(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(40):
            with Session(eng) as s:
                reads.append(s.get(account, rng.randrange(ACCOUNTS)).balance)

    jobs = [gevent.spawn(transfer, i) for i in range(16)] + [
        gevent.spawn(read, 100 + i) for i in range(48)]
    gevent.joinall(jobs, raise_error=True)
    table, log = account.__tablename__, history.__tablename__
    assert pg.admin(f"SELECT sum(balance) FROM {table}") == str(ACCOUNTS * BALANCE)
    assert pg.admin(f"SELECT count(*) FROM {log}") == str(len(committed))
    assert pg.admin(f"SELECT coalesce(sum(amount), 0) FROM {log}") == str(sum(committed))
    assert len(committed) > 0 and len(reads) == 48 * 40
    assert client_of(eng).stats()["pinned"]["active"] == 0


def test_long_read_sessions_share_one_pinned_connection_without_queueing(engine, bank):
    _, account, _ = bank
    eng = engine(pipeline_size="2", pinned_size="1")
    open_now, most = [0], [0]

    def request() -> None:
        with Session(eng) as s:
            s.get(account, 1)
            open_now[0] += 1
            most[0] = max(most[0], open_now[0])
            wait_until(lambda: most[0] == 200 or open_now[0] == 0, what="all sessions open")
            open_now[0] -= 1

    with Session(eng) as s:  # SQLAlchemy's first connect holds a threading lock (unpatched)
        s.get(account, 1)
    jobs = [gevent.spawn(request) for _ in range(200)]
    gevent.joinall(jobs, raise_error=True)
    assert most[0] == 200  # all 200 were open at once: none waited for the pinned connection
    assert client_of(eng).stats()["pinned"]["active"] == 0


@pytest.fixture(scope="module")
def role(pg):
    yield from session_objects(pg)


@pytest.mark.parametrize("kind", list(STATES))
def test_session_state_stays_with_its_handle_and_is_cleared_when_it_closes(engine, role, kind):
    leave, check, clean = STATES[kind]
    name = f"orm-state-{uuid.uuid4().hex[:8]}"
    eng = engine(pipeline_size="1", pinned_size="1", application_name=name)
    strict = engine(pipeline_size="1", pinned_size="1", application_name=name,
                    deferred_pinning="false")
    with eng.connect() as conn:
        conn.exec_driver_sql(leave)  # pins this handle's server connection
        pid = conn.connection.dbapi_connection.info.backend_pid
        conn.commit()
    eng.dispose()  # the handle closes: its server connection is reset and goes back
    with strict.connect() as conn:  # the same client (only the handles' option differs)
        assert conn.exec_driver_sql("SELECT pg_backend_pid()").scalar() == pid
        assert conn.exec_driver_sql(check).scalar() == clean
        conn.rollback()


@pytest.mark.parametrize("level", ["REPEATABLE READ", "SERIALIZABLE"])
def test_stricter_isolation_pins_at_the_first_statement(bank, level):
    eng, account, _ = bank
    with Session(eng.execution_options(isolation_level=level)) as s:
        s.get(account, 1)
        info = s.connection().connection.dbapi_connection.info
        assert info.backend_pid is not None
        assert s.execute(sa.text("SELECT current_setting('transaction_isolation')")
                         ).scalar() == level.lower()


def test_a_greenlet_killed_while_unpinned_leaks_nothing(engine, bank, pg):
    _, account, _ = bank
    eng = engine(pipeline_size="1", pinned_size="1")
    slow = sa.text(SLOW_READ)  # unpinned

    def request() -> None:
        with Session(eng) as s:
            s.get(account, 1)
            s.execute(slow)

    job = gevent.spawn(request)
    wait_for_slow_read(pg)
    job.kill()
    assert eng.pool.checkedout() == 0  # the Session gave its connection back
    assert client_of(eng).stats()["pinned"]["active"] == 0
    with Session(eng) as s:  # the engine goes on: a write pins and commits
        s.get(account, 1).balance += 1
        s.commit()
    assert pg.admin(f"SELECT balance FROM {account.__tablename__} WHERE id = 1") == str(
        BALANCE + 1)
    assert backends(pg, eng) == 2  # the pipelined connection and the write's pinned one
    name = eng.url.query["application_name"]
    assert pg.admin(f"SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                    f"'{name}' AND state LIKE 'idle in transaction%'") == "0"


def test_a_pinned_connection_lost_mid_transaction_applies_nothing(bank, pg):
    eng, account, history = bank
    with pytest.raises(sa.exc.DBAPIError), Session(eng) as s:
        s.get(account, 2).balance -= 7  # read unpinned
        s.add(history(source=2, target=3, amount=7))
        s.flush()  # pinned now
        pid = s.connection().connection.dbapi_connection.info.backend_pid
        pg.admin(f"SELECT pg_terminate_backend({pid})")
        s.get(account, 3).balance += 7
        s.commit()
    table = account.__tablename__
    assert pg.admin(f"SELECT balance FROM {table} WHERE id = 2") == str(BALANCE)
    assert pg.admin(f"SELECT count(*) FROM {history.__tablename__}") == "0"
    with Session(eng) as s:  # the engine goes on with a new connection
        s.get(account, 2).balance -= 1
        s.commit()
    assert pg.admin(f"SELECT balance FROM {table} WHERE id = 2") == str(BALANCE - 1)
