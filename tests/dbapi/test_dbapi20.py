"""Stuart Bishop's DB-API 2.0 compliance suite (dbapi20.py, package dbapi-compliance)."""

from __future__ import annotations

import dbapi20
import pytest

import pgmux.dbapi


@pytest.fixture(autouse=True)
def _server(request, pg):
    request.cls.connect_args = (pg.dsn,)
    request.cls.connect_kw_args = {"application_name": "dbapi20"}
    yield
    pgmux.dbapi.close_shared_clients()


class TestDBAPI20(dbapi20.DatabaseAPI20Test):
    driver = pgmux.dbapi
    connect_args = ()
    connect_kw_args: dict = {}

    def test_nextset(self):
        pytest.skip("nextset: each PostgreSQL statement returns one result set")

    def test_setoutputsize(self):
        pytest.skip("setoutputsize: values arrive whole; the suite leaves this to drivers")
