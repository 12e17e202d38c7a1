"""A stock PgBouncer (Debian's /usr/sbin/pgbouncer) in front of a test server, for tests.

One process serves three database names over TCP on 127.0.0.1, all for the server's test
database: ``TRANSACTION_DB`` (pool_mode transaction), ``SESSION_DB`` (pool_mode session)
and ``SINGLE_DB`` (transaction pooling over one server connection, so every client
provably shares it).
The ini file, userlist, unix socket, pidfile and log live in a temporary directory; as
root PgBouncer runs as the ``postgres`` OS user (it refuses to run as root), like the
embedded server. Every setting not written below is PgBouncer's default (so, for example,
only its tracked startup parameters are accepted).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from pgmux.tooling.embedded import _free_port, _server_account

PGBOUNCER = os.environ.get("PGMUX_PGBOUNCER", "/usr/sbin/pgbouncer")
TRANSACTION_DB = "pgmux_tx"
SESSION_DB = "pgmux_session"
SINGLE_DB = "pgmux_tx_single"
POOL_SIZE = 4  # server connections per (database, user)
START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0
NO_PGBOUNCER = f"needs PgBouncer ({PGBOUNCER}; Debian's pgbouncer package)"


def pgbouncer_binary() -> str:
    """The PgBouncer executable; skips the test when it is missing."""
    if not os.access(PGBOUNCER, os.X_OK):
        found = shutil.which("pgbouncer")
        if found is None:
            pytest.skip(NO_PGBOUNCER)
        return found
    return PGBOUNCER


def _quote(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


class PgBouncer:
    """A running PgBouncer; ``dsn(mode)`` and ``params(mode)`` reach it as the role it knows."""

    def __init__(self, binary: str, *, server_host: str, server_port: int, dbname: str,
                 user: str, password: str, pool_size: int = POOL_SIZE):
        self.binary = binary
        self.user = user
        self.password = password
        self.port = _free_port()
        self.base_dir = tempfile.mkdtemp(prefix="pgmux-pgbouncer-")
        self.process: subprocess.Popen | None = None
        target = f"host={server_host} port={server_port} dbname={dbname}"
        self._databases = {
            TRANSACTION_DB: f"{target} pool_mode=transaction",
            SESSION_DB: f"{target} pool_mode=session",
            SINGLE_DB: f"{target} pool_mode=transaction pool_size=1",
        }
        self._pool_size = pool_size

    # files ----------------------------------------------------------------------------
    def _path(self, name: str) -> str:
        return os.path.join(self.base_dir, name)

    def _write(self, name: str, text: str) -> None:
        with open(self._path(name), "w") as f:
            f.write(text)

    def _write_config(self) -> str:
        self._write("userlist.txt", f"{_quote(self.user)} {_quote(self.password)}\n")
        databases = "".join(f"{name} = {spec}\n" for name, spec in self._databases.items())
        self._write("pgbouncer.ini", (
            "[databases]\n" + databases + "\n[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\n"
            f"unix_socket_dir = {self.base_dir}\n"
            f"pidfile = {self._path('pgbouncer.pid')}\n"
            f"logfile = {self._path('pgbouncer.log')}\n"
            "auth_type = scram-sha-256\n"
            f"auth_file = {self._path('userlist.txt')}\n"
            f"default_pool_size = {self._pool_size}\n"
            "max_client_conn = 500\n"
        ))
        account = _server_account()
        if account is not None:
            for name in ("", "userlist.txt", "pgbouncer.ini"):
                os.chown(self._path(name) if name else self.base_dir, *account)
        return self._path("pgbouncer.ini")

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self._path("pgbouncer.log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"

    # lifecycle ------------------------------------------------------------------------
    def start(self) -> PgBouncer:
        ini = self._write_config()
        account = _server_account()
        options = {} if account is None else {
            "user": account[0], "group": account[1], "extra_groups": []}
        self.process = subprocess.Popen(
            [self.binary, ini], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, cwd=self.base_dir, **options)
        try:
            self._wait_listening()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with {self.process.returncode}:\n"
                                   f"{self.process.stderr.read().decode(errors='replace')}"
                                   f"{self.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer does not listen after {START_TIMEOUT}s:\n"
                                       f"{self.log_tail()}") from None
                time.sleep(0.02)

    def stop(self) -> None:
        """Stop the process (SIGINT: safe shutdown, then SIGKILL) and remove its directory."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_TIMEOUT)
        if process is not None and process.stderr is not None:
            process.stderr.close()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    # reaching it ----------------------------------------------------------------------
    def params(self, mode: str = "transaction", **extra) -> dict:
        """Client keywords for the database pooled in ``mode``: "transaction", "session" or
        "single" (transaction pooling over a single server connection)."""
        dbname = {"transaction": TRANSACTION_DB, "session": SESSION_DB, "single": SINGLE_DB}[mode]
        return {"host": "127.0.0.1", "port": self.port, "user": self.user,
                "password": self.password, "dbname": dbname, **extra}

    def dsn(self, mode: str = "transaction") -> str:
        p = self.params(mode)
        return f"postgresql://{p['user']}:{p['password']}@127.0.0.1:{p['port']}/{p['dbname']}"

    def __repr__(self) -> str:
        state = "running" if self.process is not None else "stopped"
        return f"<PgBouncer 127.0.0.1:{self.port} {state}>"
