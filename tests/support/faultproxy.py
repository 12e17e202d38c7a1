"""A fault-injecting TCP proxy for tests (gevent, loopback only).

Each direction ("up": client to server, "down": server to client) can delay,
stall (hold bytes without closing), pass only N more bytes then stall, fragment
into 1-byte or random chunks, cap throughput, inject bytes, half-close or reset.
Settings change at run time and apply to every link, present and future.

    with FaultProxy(("127.0.0.1", pg_port)) as proxy:
        proxy.down.chunk = 1          # every byte to the client its own send
        proxy.up.stall()              # the server hears nothing more ...
        proxy.up.resume()             # ... until now
        proxy.down.reset()            # RST to the client
"""

from __future__ import annotations

import random
import socket as _stdsocket
import struct
import time
from collections import deque

import gevent
from gevent import socket
from gevent.event import Event
from gevent.server import StreamServer

from pgmux.tooling.proxy import connect_upstream

READ_SIZE = 64 * 1024
QUEUE_LIMIT = 1024 * 1024  # bytes held per direction before the proxy stops reading
LOOPBACK = "127.0.0.1"
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


class Direction:
    """The faults applied to bytes flowing one way through every link of a proxy."""

    def __init__(self, name: str):
        self.name = name
        self.delay = 0.0  # seconds added to every chunk
        self.chunk: int | str | None = None  # 1 (or any n): n-byte sends; "random": 1..64
        self.rate: float | None = None  # bytes per second, None for no cap
        self.forwarded = 0  # bytes sent on, over all links
        self.sends = 0  # send calls made, over all links
        self._open = Event()
        self._open.set()
        self._budget: int | None = None  # bytes still allowed before stalling
        self._pumps: list[_Pump] = []

    # -- run-time controls -------------------------------------------------------------
    @property
    def stalled(self) -> bool:
        return not self._open.is_set()

    def stall(self) -> None:
        """Stop forwarding now; bytes are held (up to QUEUE_LIMIT), nothing is closed."""
        self._budget = None
        self._open.clear()

    def stall_after(self, count: int) -> None:
        """Forward ``count`` more bytes, then stall."""
        self._budget = count
        self._open.set()

    def resume(self) -> None:
        """Forward again, held bytes first."""
        self._budget = None
        self._open.set()

    def inject(self, data: bytes) -> None:
        """Queue ``data`` on every live link, after the bytes already received."""
        for pump in list(self._pumps):
            pump.push(data)

    def close(self) -> None:
        """Half-close every link this way: the receiving side sees end of stream."""
        for pump in list(self._pumps):
            pump.finish()

    def reset(self) -> None:
        """Send RST to the receiving side of every link (and drop the link)."""
        for pump in list(self._pumps):
            pump.link.abort(pump.sink)

    # -- used by the pumps ---------------------------------------------------------------
    def _take_budget(self, size: int) -> int:
        """How many of ``size`` bytes may go now (0: wait for resume)."""
        if not self._open.is_set():
            return 0
        if self._budget is None:
            return size
        allowed = min(size, self._budget)
        self._budget -= allowed
        if self._budget <= 0:
            self._budget = None
            self._open.clear()
        return allowed

    def _piece(self, size: int) -> int:
        chunk = self.chunk
        if chunk is None:
            return size
        if chunk == "random":
            return min(size, random.randint(1, 64))
        return min(size, int(chunk))


class _Pump:
    """Moves one direction of one link: a reader queues chunks, a writer applies the faults."""

    def __init__(self, link: _Link, source: socket.socket, sink: socket.socket,
                 direction: Direction):
        self.link, self.source, self.sink, self.direction = link, source, sink, direction
        self.queue: deque[tuple[float, bytes]] = deque()
        self.queued = 0
        self.ready = Event()
        self.room = Event()
        self.room.set()

    def push(self, data: bytes, due: float = 0.0) -> None:
        self.queue.append((due, data))
        self.queued += len(data)
        if self.queued >= QUEUE_LIMIT:
            self.room.clear()
        self.ready.set()

    def finish(self) -> None:
        self.queue.append((0.0, b""))
        self.ready.set()

    def read(self) -> None:
        try:
            while True:
                self.room.wait()
                data = self.source.recv(READ_SIZE)
                if not data:
                    break
                self.push(data, time.monotonic() + self.direction.delay)
        except OSError:
            pass
        self.finish()

    def write(self) -> None:
        direction = self.direction
        try:
            while True:
                while not self.queue:
                    if self.link.closed:
                        return
                    self.ready.clear()
                    self.ready.wait(0.05)
                due, data = self.queue.popleft()
                self.queued -= len(data)
                if self.queued < QUEUE_LIMIT:
                    self.room.set()
                if not data:
                    self.sink.shutdown(socket.SHUT_WR)
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    gevent.sleep(wait)
                self._send(data, direction)
        except OSError:
            self.link.abort(self.source)

    def _send(self, data: bytes, direction: Direction) -> None:
        view = memoryview(data)
        while view:
            if self.link.closed:
                return
            allowed = direction._take_budget(direction._piece(len(view)))
            if not allowed:
                direction._open.wait(0.05)
                continue
            self.sink.sendall(view[:allowed])
            view = view[allowed:]
            direction.forwarded += allowed
            direction.sends += 1
            if direction.rate:
                gevent.sleep(allowed / direction.rate)
            elif direction.chunk is not None:
                gevent.idle()  # let the receiver read this piece on its own


class _Link:
    """One proxied connection: the client socket, the upstream socket, two pumps."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, upstream: socket.socket):
        self.proxy = proxy
        self.client, self.upstream = client, upstream
        self.up = _Pump(self, client, upstream, proxy.up)
        self.down = _Pump(self, upstream, client, proxy.down)
        self.closed = False

    def run(self) -> None:
        pumps = (self.up, self.down)
        for pump in pumps:
            pump.direction._pumps.append(pump)
        jobs = [gevent.spawn(job) for pump in pumps for job in (pump.read, pump.write)]
        try:
            gevent.joinall(jobs)
        finally:
            gevent.killall(jobs, block=False)
            for pump in pumps:
                if pump in pump.direction._pumps:
                    pump.direction._pumps.remove(pump)
            self.close()

    def abort(self, towards: socket.socket) -> None:
        """RST on ``towards`` and a plain close of the other side."""
        if self.closed:
            return
        try:
            towards.setsockopt(_stdsocket.SOL_SOCKET, _stdsocket.SO_LINGER, _LINGER_RESET)
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for sock in (self.client, self.upstream):
            try:
                sock.close()
            except OSError:
                pass
        if self in self.proxy.links:
            self.proxy.links.remove(self)


class FaultProxy:
    """Forward a loopback port to ``upstream`` through two controllable directions."""

    def __init__(self, upstream: tuple[str, int]):
        host = upstream[0]
        if host not in (LOOPBACK, "localhost", "::1"):
            raise ValueError("the fault proxy is for loopback only")
        self.upstream = upstream
        self.up = Direction("up")
        self.down = Direction("down")
        self.links: list[_Link] = []
        self.accepted = 0
        self.refuse = False  # when True, new connections are closed at once
        self._server = StreamServer((LOOPBACK, 0), self._handle)

    @property
    def port(self) -> int:
        return self._server.address[1]

    @property
    def host(self) -> str:
        return LOOPBACK

    def start(self) -> FaultProxy:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(timeout=1)
        for link in list(self.links):
            link.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def heal(self) -> None:
        """Back to a transparent proxy (every fault off, held bytes released)."""
        for direction in (self.up, self.down):
            direction.delay, direction.chunk, direction.rate = 0.0, None, None
            direction.resume()

    def close_all(self) -> None:
        """Close every link at once (FIN both ways)."""
        for link in list(self.links):
            link.close()

    def reset_all(self) -> None:
        """RST both ways on every link."""
        for link in list(self.links):
            for sock in (link.client, link.upstream):
                try:
                    sock.setsockopt(_stdsocket.SOL_SOCKET, _stdsocket.SO_LINGER, _LINGER_RESET)
                except OSError:
                    pass
            link.close()

    def _handle(self, client: socket.socket, _address: object) -> None:
        self.accepted += 1
        if self.refuse:
            client.close()
            return
        upstream = connect_upstream(client, self.upstream)
        if upstream is None:
            return
        link = _Link(self, client, upstream)
        self.links.append(link)
        link.run()


def silent_listener() -> tuple[socket.socket, int]:
    """A loopback socket that accepts TCP connections (in the kernel) and never answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((LOOPBACK, 0))
    sock.listen(64)
    return sock, sock.getsockname()[1]
