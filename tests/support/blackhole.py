"""A "black hole" host for tests: accepts TCP connections, counts them, never answers."""

from __future__ import annotations

import gevent
from gevent import socket


class BlackHole:
    """Listens on 127.0.0.1; every connection is accepted, held open and never written to.

    ``attempts`` counts the connections accepted so far (one per connection attempt a
    client made). ``close()`` closes the listener and every held connection.
    """

    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port: int = self._listener.getsockname()[1]
        self.attempts = 0
        self._held: list[socket.socket] = []
        self._acceptor = gevent.spawn(self._accept_loop)

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.attempts += 1
            self._held.append(conn)

    def close(self) -> None:
        self._acceptor.kill(block=True, timeout=1)
        self._listener.close()
        for conn in self._held:
            conn.close()
        self._held = []

    def __enter__(self) -> BlackHole:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<BlackHole 127.0.0.1:{self.port} attempts={self.attempts}>"


def refused_port() -> int:
    """A loopback port nothing listens on (connecting to it is refused at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
