"""pgmux behind a stock PgBouncer 1.18 (Debian's), transaction and session pool modes."""

from __future__ import annotations

import pytest
from support.mux import drivers

from pgmux.client import Client
from pgmux.errors import OperationalError
from pgmux.io.connect import BASE_STARTUP_PARAMS

MODES = ["transaction", "session"]


@pytest.fixture
def bounced(pgbouncer):
    """bounced(mode, **options) -> a started Client through PgBouncer, closed after the test."""
    made: list[Client] = []

    def make(mode: str = "transaction", **options) -> Client:
        db = Client(**pgbouncer.params(mode), **options)
        made.append(db)
        return db.start()

    yield make
    for db in made:
        db.close()


# connecting -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_connects_with_default_options(bounced, mode):
    db = bounced(mode, pipeline_size=2)
    assert db.fetchval("SELECT $1::int + 1", [41]) == 42
    assert [d.conn.protocol for d in drivers(db)] == ["3.0", "3.0"]


def test_startup_parameters_are_ones_pgbouncer_tracks():
    """PgBouncer refuses any other startup parameter unless ignore_startup_parameters says."""
    tracked = {"client_encoding", "datestyle", "timezone", "standard_conforming_strings",
               "application_name"}
    assert {name.lower() for name in BASE_STARTUP_PARAMS} <= tracked


def test_protocol_3_2_opt_in_is_refused_by_pgbouncer_1_18_with_a_hint(pgbouncer):
    db = Client(**pgbouncer.params("session"), pipeline_size=1, max_protocol_version="3.2")
    with pytest.raises(OperationalError, match="max_protocol_version=3.0") as caught:
        db.start()
    assert caught.value.sqlstate == "08P01"
    assert pgbouncer.password not in str(caught.value)
