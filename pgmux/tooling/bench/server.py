"""The server the benchmark runs against: a given DSN or a throwaway PostgreSQL, its tables."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pgmux.tooling.bench.workloads import setup_tables

EMBEDDED_SETTINGS = {"max_connections": "300"}


@dataclass
class Target:
    """The server the clients talk to."""

    dsn: str
    upstream: tuple[str, int] | None  # TCP address for the delay proxy
    version: str
    description: str


@contextlib.contextmanager
def open_target(settings: Any) -> Iterator[Target]:
    """The given DSN, or a throwaway embedded server removed on exit."""
    if settings.dsn is not None:
        yield _describe_target(settings.dsn, _upstream_of(settings.dsn), "the given DSN")
        return
    from pgmux.tooling.embedded import EmbeddedPostgres, find_postgres_bin

    bin_dir, _ = find_postgres_bin(settings.embedded)
    server = EmbeddedPostgres(bin_dir=bin_dir, settings=EMBEDDED_SETTINGS)
    server.start()
    try:
        yield _describe_target(server.dsn(), ("127.0.0.1", server.port),
                               f"embedded PostgreSQL {server.version} ({bin_dir})")
    finally:
        server.stop()


def _upstream_of(dsn: str) -> tuple[str, int] | None:
    from pgmux.io.conninfo import is_unix_host, make_conninfo

    info = make_conninfo(dsn)
    host = info.hostaddrs[0] if info.hostaddrs and info.hostaddrs[0] else info.hosts[0]
    return None if is_unix_host(host) else (host, info.ports[0])


def _describe_target(dsn: str, upstream: tuple[str, int] | None, description: str) -> Target:
    import pgmux.client

    with pgmux.client.Client(dsn, pipeline_size=1, pinned_size=0,
                             application_name="pgmux-bench-setup") as db:
        version = db.fetchval("SELECT current_setting('server_version')")
    return Target(dsn, upstream, version, description)


def prepare_tables(target: Target, sets: list[str]) -> list[str]:
    import pgmux.client

    # DDL and TRUNCATE change no session state; the guard would still refuse them.
    with pgmux.client.Client(target.dsn, pipeline_size=1, pinned_size=0, guard="off",
                             application_name="pgmux-bench-setup") as db:
        return setup_tables(db.execute, db.fetchval, sets)


