"""A throwaway Redis (Debian's redis-server) on a free port: a broker for the Celery
example, in the tests and in ``pgmux bench``.

The server keeps nothing on disk (no RDB snapshots, no append-only file); its working
directory and log live in a temporary directory that ``stop()`` removes. A port taken
between choosing it and binding it is retried with another, as the embedded PostgreSQL does.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time

REDIS_ENV = "PGMUX_REDIS_SERVER"  # the redis-server to use, if not the default
DEFAULT_BINARY = "/usr/bin/redis-server"
INSTALL = "apt-get install redis-server, or set $PGMUX_REDIS_SERVER"
START_ATTEMPTS = 3
START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (another process may take it before it is bound)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def find_redis() -> str | None:
    """$PGMUX_REDIS_SERVER (default /usr/bin/redis-server) if it runs, else the one on PATH."""
    given = os.environ.get(REDIS_ENV, DEFAULT_BINARY)
    if os.access(given, os.X_OK):
        return given
    return shutil.which("redis-server")


def ping(port: int, timeout: float = 1.0) -> bool:
    """Whether a Redis on 127.0.0.1:port answers PING (with the inline command, no client)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """A running redis-server; ``url(db)`` reaches it (``redis://127.0.0.1:port/db``)."""

    def __init__(self, binary: str):
        self.binary = binary
        self.port = 0
        self.base_dir = tempfile.mkdtemp(prefix="pgmux-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    @property
    def log_file(self) -> str:
        return os.path.join(self.base_dir, "redis.log")

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.log_file, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> RedisServer:
        try:
            for _ in range(START_ATTEMPTS):
                self.port = free_port()
                self.process = subprocess.Popen(
                    [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                     "--dir", self.base_dir, "--logfile", self.log_file, "--save", "",
                     "--appendonly", "no", "--daemonize", "no"],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, cwd=self.base_dir)
                if self._wait_ready():
                    return self
            raise RuntimeError(f"redis-server did not start:\n{self.log_tail()}")
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> bool:
        """True once it answers PING; False if it exited (a port clash: try another)."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process is None or self.process.poll() is not None:
                return False
            if ping(self.port):
                return True
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server does not answer after {START_TIMEOUT}s:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL) and remove its directory."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.base_dir, ignore_errors=True)
