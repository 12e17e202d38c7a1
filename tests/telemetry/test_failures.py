"""Failures carry their SQLSTATE on every path (the real SDK, the real server): an atomic
unit, a fan-out's statement, a DB-API executemany (a unit, or a lease's pipeline), COPY in
and out. (An explicit pipeline's: test_pinned_spans.)"""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the test extra's opentelemetry-sdk")
from opentelemetry.trace import StatusCode  # noqa: E402

import pgmux.dbapi  # noqa: E402
from pgmux.dbapi.connection import close_shared_clients  # noqa: E402
from pgmux.errors import DatabaseError, DivisionByZero  # noqa: E402


def _failed_with(span, sqlstate):
    assert span.status.status_code is StatusCode.ERROR, span.name
    assert span.attributes["db.response.status_code"] == sqlstate
    assert span.attributes["error.type"] == sqlstate


def test_an_atomic_unit_and_a_fan_out(clients, sdk):
    db = clients(pipeline_size=2, **sdk.options)
    with pytest.raises(DivisionByZero), db.atomic() as unit:
        unit.execute("SELECT $1::int", [1])
        unit.execute("SELECT 1 / $1::int", [0])
    (atomic,) = sdk.spans()
    _failed_with(atomic, "22012")
    sdk.clear()
    answers = db.gather([("SELECT $1::int", [1]), ("SELECT 1 / $1::int", [0])],
                        return_exceptions=True)
    assert isinstance(answers[1], DivisionByZero)
    ok, divided = sdk.spans()
    assert ok.status.status_code is StatusCode.UNSET
    _failed_with(divided, "22012")


@pytest.mark.parametrize("autocommit", [True, False], ids=["unit", "lease pipeline"])
def test_executemany(pg, sdk, autocommit):
    conn = pgmux.dbapi.connect(pg.dsn, autocommit=autocommit, **sdk.options)
    try:
        cur = conn.cursor()
        if not autocommit:
            cur.execute("SELECT txid_current()")  # pinned: executemany runs on the lease
        sdk.clear()
        with pytest.raises(DatabaseError):
            cur.executemany("SELECT 1 / %s", [(1,), (0,)])
        conn.rollback()
    finally:
        conn.close()
        close_shared_clients()
    many = sdk.spans()[0]
    assert many.attributes["db.operation.batch.size"] == 2
    _failed_with(many, "22012")


def test_copy_in_and_out(pinned_client, sdk):
    db = pinned_client(**sdk.options)
    with db.session() as s:
        s.execute("CREATE TEMP TABLE otel_copy_fail (id int)")
        sdk.clear()
        with pytest.raises(DatabaseError):
            s.copy_in("COPY otel_copy_fail FROM STDIN", [b"not a number\n"])
        with pytest.raises(DatabaseError):
            b"".join(s.copy_out("COPY (SELECT 1 / 0) TO STDOUT"))
    copy_in, copy_out = sdk.spans()
    _failed_with(copy_in, "22P02")
    _failed_with(copy_out, "22012")
