"""Counting a client's round trips: a pass-through proxy that counts its turns.

A *turn* is the client writing after it has read something: on a connection used
request by request (a transaction on a pinned connection, a psycopg2 cursor), one
turn is one round trip the client waited for. Several writes with no reply in
between count once (a batch written in pieces is still one round trip); on a
pipelined connection, which writes while replies arrive, turns count write
bursts rather than waits. The proxy also counts the bytes each way.

It runs inside the measured worker (the counted case is an extra one, not used
for throughput or CPU) and forwards with no added delay: ``DelayProxy`` at RTT 0,
its sockets wrapped to see every chunk in the order the proxy received it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pgmux.tooling.proxy import DelayProxy


@dataclass
class TurnCounts:
    """Totals over every connection through the proxy."""

    turns: int = 0
    bytes_out: int = 0  # client -> server
    bytes_in: int = 0  # server -> client

    def snapshot(self) -> TurnCounts:
        return TurnCounts(self.turns, self.bytes_out, self.bytes_in)

    def since(self, before: TurnCounts) -> TurnCounts:
        return TurnCounts(self.turns - before.turns, self.bytes_out - before.bytes_out,
                          self.bytes_in - before.bytes_in)


class _Conversation:
    """One proxied connection: who spoke last."""

    def __init__(self, counts: TurnCounts):
        self.counts = counts
        self.client_spoke_last = False

    def client_sent(self, size: int) -> None:
        if size and not self.client_spoke_last:
            self.counts.turns += 1
            self.client_spoke_last = True
        self.counts.bytes_out += size

    def server_sent(self, size: int) -> None:
        if size:
            self.client_spoke_last = False
        self.counts.bytes_in += size


class _Tap:
    """A socket whose ``recv`` reports each chunk; everything else passes through."""

    def __init__(self, sock: Any, report: Any):
        self._sock = sock
        self._report = report

    def recv(self, size: int) -> bytes:
        data = self._sock.recv(size)
        self._report(len(data))
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class TurnCountingProxy(DelayProxy):
    """Forward to ``upstream`` unchanged, counting turns and bytes in ``counts``."""

    def __init__(self, upstream: tuple[str, int]):
        super().__init__(upstream, 0.0)
        self.counts = TurnCounts()

    def lines(self, client: Any, upstream: Any) -> list[Any]:
        talk = _Conversation(self.counts)
        return super().lines(_Tap(client, talk.client_sent), _Tap(upstream, talk.server_sent))
