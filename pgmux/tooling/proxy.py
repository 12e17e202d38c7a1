"""A userspace TCP delay line: simulates network round-trip time on loopback.

Each direction delays every chunk by half the round trip. Chunks carry their
due time, so the line keeps many chunks in flight at once and never limits
throughput (a stop-and-wait delay would turn the round trip into a rate cap
and distort a pipelining benchmark).

    python -m pgmux.tooling.proxy --upstream 127.0.0.1:5432 --listen 127.0.0.1:6432 --rtt-ms 10
"""

from __future__ import annotations

import argparse
import time
from collections import deque
from typing import Any

import gevent
from gevent import socket
from gevent.event import Event
from gevent.server import StreamServer

CHUNK = 256 * 1024


class _Line:
    """One direction: a reader stamps chunks with their due time, a writer sends them then."""

    def __init__(self, source: socket.socket, sink: socket.socket, delay: float):
        self.source, self.sink, self.delay = source, sink, delay
        self.queue: deque[tuple[float, bytes]] = deque()
        self.ready = Event()

    def run(self) -> None:
        writer = gevent.spawn(self._write)
        try:
            while True:
                data = self.source.recv(CHUNK)
                self.queue.append((time.monotonic() + self.delay, data))
                self.ready.set()
                if not data:
                    break
        except OSError:
            self.queue.append((0.0, b""))
            self.ready.set()
        writer.join()

    def _write(self) -> None:
        try:
            while True:
                while not self.queue:
                    self.ready.clear()
                    self.ready.wait()
                due, data = self.queue.popleft()
                wait = due - time.monotonic()
                if wait > 0:
                    gevent.sleep(wait)
                if not data:
                    self.sink.shutdown(socket.SHUT_WR)
                    return
                self.sink.sendall(data)
        except OSError:
            pass


class DelayProxy:
    """Forward ``listen`` to ``upstream`` with ``rtt`` seconds of added round trip."""

    def __init__(self, upstream: tuple[str, int], rtt: float,
                 listen: tuple[str, int] = ("127.0.0.1", 0)):
        self.upstream = upstream
        self.rtt = rtt
        self._server = StreamServer(listen, self._handle)

    @property
    def address(self) -> tuple[str, int]:
        return self._server.address[:2]

    @property
    def port(self) -> int:
        return self._server.address[1]

    def start(self) -> DelayProxy:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(timeout=1)

    def __enter__(self) -> DelayProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handle(self, client: socket.socket, _address: object) -> None:
        upstream = connect_upstream(client, self.upstream)
        if upstream is None:
            return
        lines = self.lines(client, upstream)
        gevent.joinall([gevent.spawn(line.run) for line in lines])
        client.close()
        upstream.close()

    def lines(self, client: Any, upstream: Any) -> list[_Line]:
        """The two directions of one connection (a subclass may wrap the sockets)."""
        half = self.rtt / 2
        return [_Line(client, upstream, half), _Line(upstream, client, half)]


def connect_upstream(client: socket.socket, address: tuple[str, int]) -> socket.socket | None:
    """Open the upstream side for an accepted ``client`` (both with TCP_NODELAY); on
    failure close the client and return None."""
    try:
        upstream = socket.create_connection(address)
    except OSError:
        client.close()
        return None
    for sock in (client, upstream):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return upstream


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pgmux.tooling.proxy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", required=True, type=_address, help="host:port to forward to")
    parser.add_argument("--listen", default="127.0.0.1:0", type=_address, help="host:port")
    parser.add_argument("--rtt-ms", type=float, default=10.0, help="added round trip (ms)")
    args = parser.parse_args(argv)
    proxy = DelayProxy(args.upstream, args.rtt_ms / 1000.0, args.listen).start()
    print(f"listening on {proxy.address[0]}:{proxy.port}", flush=True)
    try:
        gevent.wait()
    except KeyboardInterrupt:
        proxy.stop()


if __name__ == "__main__":
    main()
