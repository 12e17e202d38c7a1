"""What a pinned connection's next borrower gets, against a real server: nothing of the last
borrower's session state, on every path; after a clean transaction nothing is sent at all and
the prepared statements stay; after session state a reset that keeps pgmux's statements;
after a session() or SQL PREPARE, DISCARD ALL."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from support.factory import close_clients_of, closed_after
from support.pinned import record_writes
from support.session_states import LEAK, LEFT_BY_LEAK, OURS, PROBE, STATES, session_objects

import pgmux.dbapi
from pgmux.client import Client


@pytest.fixture(scope="module")
def role(pg):
    yield from session_objects(pg)


@pytest.fixture
def make_client(pg):
    yield from closed_after(lambda **options: Client(
        pg.dsn, **{"pipeline_size": 1, "pinned_size": 1, "acquire_timeout": 10, **options}))


@pytest.fixture
def connect(pg):
    name = f"reset-{uuid.uuid4().hex[:10]}"
    yield from closed_after(lambda **options: pgmux.dbapi.connect(
        pg.dsn, **{"application_name": name, "pipeline_size": 1, "pinned_size": 1,
                   "acquire_timeout": 10, **options}), close_clients_of)


# -- a clean transaction: nothing to reset --------------------------------------------------

def test_a_clean_transaction_sends_no_reset_and_keeps_its_prepared_statements(
        make_client, monkeypatch):
    db = make_client()
    with db.transaction() as tx:
        assert tx.fetchval(PROBE, [1]) == 2
        pid = tx.fetchval("SELECT pg_backend_pid()")
    writes = record_writes(monkeypatch)
    for i in range(3):
        with db.transaction() as tx:
            assert tx.fetchval(PROBE, [i]) == i + 1
            assert tx.fetchval("SELECT pg_backend_pid()") == pid  # the same connection
            assert tx.fetchval(OURS) >= 1  # still prepared on the server
    commits = [w for w in writes if b"COMMIT" in w]
    assert len(commits) == 3 and all(w == b"Q\x00\x00\x00\x0bCOMMIT\x00" for w in commits)
    assert not any(PROBE.encode() in w for w in writes)  # never parsed again
    assert not any(b"DISCARD" in w or b"RESET" in w for w in writes)


def test_a_rolled_back_clean_transaction_keeps_its_statements_too(make_client):
    db = make_client()
    with db.transaction() as tx:
        tx.fetchval(PROBE, [1])
    with pytest.raises(ZeroDivisionError), db.transaction() as tx:
        tx.fetchval(PROBE, [2])
        raise ZeroDivisionError
    with db.transaction() as tx:
        assert tx.fetchval(OURS) >= 1


# -- session state never reaches the next borrower ------------------------------------------

def _through_transactions(make_client: Callable[..., Any], leave: str, check: str) -> Any:
    db = make_client()
    with db.transaction() as tx:
        tx.fetchval(PROBE, [1])
        pid = tx.fetchval("SELECT pg_backend_pid()")
        tx.execute(leave)
    with db.transaction() as tx:
        assert tx.fetchval("SELECT pg_backend_pid()") == pid, "reset, not replaced"
        return tx.fetchval(check), tx.fetchval(OURS)


def _through_sessions(make_client: Callable[..., Any], leave: str, check: str) -> Any:
    db = make_client()
    with db.session() as s:
        s.fetchval(PROBE, [1])
        pid = s.pid
        s.execute(leave)
    with db.session() as s:
        assert s.pid == pid, "reset, not replaced"
        return s.fetchval(check), s.fetchval(OURS)


def _through_dbapi(connect: Callable[..., Any], leave: str, check: str) -> Any:
    first = connect()
    cur = first.cursor()
    cur.execute(leave)  # pins (session state: the handle keeps it until close)
    cur.execute(PROBE.replace("$1", "%s"), (1,))  # so this runs there
    pid = first.info.backend_pid
    first.commit()
    first.close()
    second = connect(deferred_pinning=False)  # its statements run pinned, on that connection
    cur = second.cursor()
    cur.execute("SELECT pg_backend_pid()")
    assert cur.fetchone()[0] == pid, "reset, not replaced"
    cur.execute(check)
    found = cur.fetchone()[0]
    cur.execute(OURS)
    ours = cur.fetchone()[0]
    second.rollback()
    return found, ours


@pytest.mark.parametrize("kind", list(STATES))
def test_state_left_in_a_transaction_is_cleared_and_pgmux_statements_stay(
        make_client, role, kind):
    leave, check, clean = STATES[kind]
    found, ours = _through_transactions(make_client, leave, check)
    assert found == clean
    if kind == "SQL PREPARE":
        assert ours == 0  # DISCARD ALL: the user's statements cannot be told from ours
    else:
        assert ours >= 1


@pytest.mark.parametrize("kind", list(STATES))
def test_state_left_in_a_session_is_discarded(make_client, role, kind):
    leave, check, clean = STATES[kind]
    found, ours = _through_sessions(make_client, leave, check)
    assert found == clean
    assert ours == 0  # DISCARD ALL after a session (the engine parses them again)


@pytest.mark.parametrize("kind", list(STATES))
def test_state_left_through_the_dbapi_is_cleared_when_the_handle_closes(connect, role, kind):
    leave, check, clean = STATES[kind]
    found, ours = _through_dbapi(connect, leave, check)
    assert found == clean
    assert ours == (0 if kind == "SQL PREPARE" else 1)


def test_a_user_function_s_state_is_cleared_in_the_write_that_ends_its_transaction(
        make_client, connect, role, monkeypatch):
    """A function's effects cannot be seen: its call is reset, in the COMMIT's write."""
    db = make_client()
    with db.transaction() as tx:
        tx.fetchval(PROBE, [1])
    writes = record_writes(monkeypatch)
    with db.transaction() as tx:
        tx.fetchval(f"SELECT {LEAK}()")
        writes.clear()
    assert len(writes) == 1 and b"COMMIT" in writes[0] and b"RESET ALL" in writes[0]
    with db.transaction() as tx:
        assert tx.fetchval(LEFT_BY_LEAK) is False and tx.fetchval(OURS) >= 1
    conn = connect()
    cur = conn.cursor()
    cur.execute(f"SELECT {LEAK}()")  # volatile: pins
    writes.clear()
    conn.commit()
    assert len(writes) == 1 and b"COMMIT" in writes[0] and b"RESET ALL" in writes[0]
    cur.execute("SELECT now()")  # pins again, on the connection it gave back
    writes.clear()
    cur.execute(LEFT_BY_LEAK)
    assert cur.fetchone()[0] is False
    conn.commit()
    assert writes[-1] == b"Q\x00\x00\x00\x0bCOMMIT\x00"  # clean: nothing to reset


def test_a_session_after_cleared_state_runs_its_statements_as_before(make_client, role):
    db = make_client()
    with db.transaction() as tx:
        tx.execute("SET work_mem = '7MB'")
        assert tx.fetchval(PROBE, [1]) == 2
    with db.transaction() as tx:  # the statement kept across the reset is still good
        assert tx.fetchval(PROBE, [2]) == 3
    with db.session() as s:
        assert s.fetchval(PROBE, [3]) == 4
    with db.session() as s:  # after DISCARD ALL: parsed again, transparently
        assert s.fetchval(PROBE, [4]) == 5


def test_the_setup_statements_follow_every_reset(make_client):
    db = make_client(idle_in_transaction_timeout=7.0)
    setting = "SELECT current_setting('idle_in_transaction_session_timeout')"
    with db.transaction() as tx:
        assert tx.fetchval(setting) == "7s"
        tx.execute("SET idle_in_transaction_session_timeout = 0")  # session state
    with db.transaction() as tx:
        assert tx.fetchval(setting) == "7s"
    with db.session() as s:
        s.execute("RESET ALL")
    with db.session() as s:
        assert s.fetchval(setting) == "7s"
