"""Two-phase commit through the postgresql+pgmux dialect (begin_twophase, twophase=True
sessions, recovery) against a real server: nothing is left in pg_prepared_xacts."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

import pgmux.dbapi


@pytest.fixture
def engine(pg):
    if pg.admin("SELECT current_setting('max_prepared_transactions')") == "0":
        pytest.skip("the server has max_prepared_transactions = 0")
    url = sa.make_url(pg.dsn.replace("postgresql://", "postgresql+pgmux://", 1))
    eng = sa.create_engine(url.update_query_dict({
        "application_name": f"sa-tpc-{uuid.uuid4().hex[:8]}", "acquire_timeout": "10",
        "pinned_size": "2"}))
    yield eng
    eng.dispose()
    pgmux.dbapi.close_shared_clients()


@pytest.fixture
def table(pg, engine):
    name = f"satpc_{uuid.uuid4().hex[:8]}"
    pg.admin(f"CREATE TABLE {name} (id int PRIMARY KEY)")
    yield sa.table(name, sa.column("id"))
    leftover = prepared(pg)
    for gid in leftover:
        pg.admin(f"ROLLBACK PREPARED '{gid}'")
    pg.admin(f"DROP TABLE {name}")
    assert not leftover, f"left prepared: {leftover}"


def prepared(pg) -> list[str]:
    found = pg.admin("SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
    return found.splitlines() if found else []


def ids(conn, table) -> list[int]:
    return list(conn.execute(sa.select(table.c.id).order_by(table.c.id)).scalars())


def test_prepare_commit_rollback_on_one_connection(pg, engine, table):
    with engine.connect() as conn:
        tx = conn.begin_twophase()
        conn.execute(table.insert(), {"id": 1})
        tx.prepare()
        assert prepared(pg) == [tx.xid]
        tx.commit()  # COMMIT PREPARED: outside a transaction block, or the server refuses
        tx = conn.begin_twophase()
        conn.execute(table.insert(), {"id": 2})
        tx.commit()  # never prepared: one phase
        tx = conn.begin_twophase()
        conn.execute(table.insert(), {"id": 3})
        tx.prepare()
        tx.rollback()  # ROLLBACK PREPARED
        tx = conn.begin_twophase()
        conn.execute(table.insert(), {"id": 4})
        tx.rollback()
        assert ids(conn, table) == [1, 2]
    assert prepared(pg) == []


def test_recover_after_the_preparing_connection_is_gone(pg, engine, table):
    conn = engine.connect()
    tx = conn.begin_twophase()
    conn.execute(table.insert(), {"id": 1})
    tx.prepare()
    conn.invalidate()
    with engine.connect() as other:
        assert ids(other, table) == []
        assert tx.xid in other.recover_twophase()  # this opened a transaction: rolled back
        other.commit_prepared(tx.xid, recover=True)
        assert ids(other, table) == [1]
    assert prepared(pg) == []


def test_a_failed_statement_leaves_nothing_prepared(pg, engine, table):
    with engine.connect() as conn:
        tx = conn.begin_twophase()
        conn.execute(table.insert(), {"id": 1})
        with pytest.raises(sa_exc.IntegrityError):
            conn.execute(table.insert(), {"id": 1})
        tx.rollback()
        assert prepared(pg) == []
        assert ids(conn, table) == []


def test_twophase_session(pg, engine, table):
    with Session(engine, twophase=True) as session, session.begin():
        session.execute(table.insert(), {"id": 5})
    assert prepared(pg) == []
    with engine.connect() as conn:
        assert ids(conn, table) == [5]
