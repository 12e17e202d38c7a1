"""A primary and a streaming hot standby (pg_basebackup -R) for failover and replica tests.

Both are ``EmbeddedPostgres`` servers on their own ports (plain TCP, no TLS), as the
``postgres`` OS user when we are root. The standby streams from the primary's unix socket.
Every step is bounded in time (``embedded.TIMEOUT``); ``stop()`` removes both.
"""

from __future__ import annotations

import os
import time

import pytest

from pgmux.tooling.embedded import TIMEOUT, EmbeddedPostgres, EmbeddedPostgresError
from pgmux.tooling.embedded import find_postgres_bin as _find_bin

REPLICATION_HBA = [
    "local all all trust",
    "local replication all trust",
    "host all all 127.0.0.1/32 trust",
    "host all all ::1/128 trust",
]
PRIMARY_SETTINGS = {
    "wal_level": "replica",
    "max_wal_senders": "5",
    "synchronous_commit": "on",  # as in production: a commit is flushed (and sent) at once
}
STANDBY_SETTINGS = {
    "hot_standby": "on",
    "wal_receiver_status_interval": "1s",
    "wal_retrieve_retry_interval": "200ms",  # reconnect to a restarted primary quickly
}
NO_SERVER = "needs PostgreSQL server binaries (Debian's postgresql package)"


class ReplicaServer(EmbeddedPostgres):
    """An embedded server that can be shut down and started again on the same port and data."""

    def shut_down(self, mode: str = "fast") -> None:
        """Stop the server, keeping its data directory (``start_again`` brings it back)."""
        done = self._pg_ctl("-m", mode, "stop")
        if done.returncode != 0:
            raise EmbeddedPostgresError(f"stop failed:\n{done.stderr}{self.log_tail()}")
        self._running = False

    def start_again(self) -> None:
        """Start a server stopped by ``shut_down``; return once it accepts connections."""
        done = self._pg_ctl("-l", self.log_file, "start")
        if done.returncode != 0:
            raise EmbeddedPostgresError(f"start failed:\n{done.stderr}{self.log_tail()}")
        self._running = True
        self._wait_ready()

    @property
    def running(self) -> bool:
        return self._running


class StandbyServer(ReplicaServer):
    """A hot standby of ``primary``: its data directory comes from pg_basebackup -R."""

    def __init__(self, primary: EmbeddedPostgres, **options):
        super().__init__(bin_dir=primary._installed_bin_dir, hba=primary.hba,
                         settings={**primary.settings, **STANDBY_SETTINGS}, **options)
        self.primary = primary

    def _initdb(self) -> None:
        args = [self._tool("pg_basebackup"), "-D", self.data_dir, "-h", self.primary.host,
                "-p", str(self.primary.port), "-U", self.primary.superuser, "-R",
                "-X", "stream", "-c", "fast", "--no-sync"]
        done = self._run(args)
        if done.returncode != 0:
            raise EmbeddedPostgresError(f"pg_basebackup failed:\n{done.stderr}{done.stdout}")

    def promote(self) -> None:
        """Make the standby a primary; return once it accepts writes."""
        done = self._pg_ctl("promote")
        if done.returncode != 0:
            raise EmbeddedPostgresError(f"promote failed:\n{done.stderr}{self.log_tail()}")
        wait_for(lambda: self.psql("SELECT pg_is_in_recovery()") == "f", "the promotion")


def wait_for(predicate, what: str, timeout: float = TIMEOUT) -> None:
    """Poll ``predicate`` (a blocking check, e.g. psql) until true; raise after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise EmbeddedPostgresError(f"gave up after {timeout}s waiting for {what}")
        time.sleep(0.02)


class ReplicaPair:
    """A primary (``primary``) and its hot standby (``standby``), both started."""

    def __init__(self, bin_dir: str):
        self.primary = ReplicaServer(bin_dir=bin_dir, hba=REPLICATION_HBA,
                                     settings=PRIMARY_SETTINGS)
        self.standby: StandbyServer | None = None
        try:
            self.primary.start()
            self.standby = StandbyServer(self.primary)
            self.standby.start()
            self.wait_streaming()
        except BaseException:
            self.stop()
            raise

    @property
    def servers(self) -> list[ReplicaServer]:
        return [s for s in (self.primary, self.standby) if s is not None]

    def hosts(self, *servers: ReplicaServer) -> dict:
        """Client keywords for ``servers`` in this order (default: primary, standby)."""
        chosen = servers or tuple(self.servers)
        return {"host": ",".join("127.0.0.1" for _ in chosen),
                "port": ",".join(str(s.port) for s in chosen),
                "user": "postgres", "dbname": "postgres", "sslmode": "disable"}

    def wait_streaming(self) -> None:
        """Wait until the primary has a streaming standby."""
        wait_for(lambda: self.primary.psql(
            "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") == "1",
            "the standby to stream")

    def wait_replayed(self) -> None:
        """Wait until the standby has replayed everything the primary has written so far."""
        target = self.primary.psql("SELECT pg_current_wal_insert_lsn()")
        wait_for(lambda: self.standby.psql(
            f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn") == "t",
            f"the standby to replay up to {target}")

    def stop(self) -> None:
        for server in reversed(self.servers):
            server.stop("immediate")

    def __repr__(self) -> str:
        return f"<ReplicaPair primary={self.primary.port} standby={getattr(self.standby, 'port', None)}>"


def replica_bin() -> str:
    """The bin directory for a primary and standby (Debian's, else the wheel's); skips without."""
    try:
        bin_dir, _ = _find_bin()
    except FileNotFoundError:
        pytest.skip(NO_SERVER)
    if not os.path.exists(os.path.join(bin_dir, "pg_basebackup")):
        pytest.skip(f"needs pg_basebackup next to the server in {bin_dir}")
    return bin_dir
