"""The one receive loop: read from a connection's transport into its framing buffer and
hand out whole messages; and what a driver needs of a connection.

Every reader (the pipelined driver's reader greenlet, a pinned connection's borrower,
connection startup, the transport micro-benchmarks) receives through ``Wire.receive``: one
read, straight into the buffer of a large message when one is pending, then every message
the read completed.
"""

from __future__ import annotations

from typing import Any, Protocol

from pgmux._native import adopt
from pgmux.errors import OperationalError
from pgmux.protocol.framing import FrameBuffer, Message

# One socket read. Below the allocator's mmap threshold (128 KiB) on purpose: a recv()
# buffer past it is mapped and unmapped on every call, which costs more than the read
# (about 14 us against 1.5). A message larger than this is received into its own buffer.
RECV_SIZE = 64 * 1024
SERVER_CLOSED = "the server closed the connection"


class ServerClosed(OperationalError):
    """The server closed the connection (end of stream)."""


class Receiver(Protocol):
    """A byte source: a ``Transport``, or a plain socket in the micro-benchmarks."""

    def recv(self, size: int) -> bytes: ...

    def recv_into(self, buffer: Any) -> int: ...


class Link(Protocol):
    """What a driver needs of an open server connection: ``io.connect.ServerConnection``,
    or a stand-in (the micro-benchmarks', a test's)."""

    transport: Any
    frames: FrameBuffer
    parameters: dict[str, str]
    pid: int
    endpoint: Any  # where it is connected (``io.conninfo.Endpoint``)

    def close(self, terminate: bool = True) -> None: ...


class Wire:
    """Receives a connection's messages: ``receive()`` reads once and returns what it
    completed (possibly nothing: part of a message)."""

    __slots__ = ("source", "frames")

    def __init__(self, source: Receiver, frames: FrameBuffer):
        self.source = source
        self.frames = frames

    def receive(self) -> list[Message]:
        """One read (a gevent wait); the messages it completed, in order.

        Raises ``ServerClosed`` at the end of the stream, and the framing buffer's
        ProtocolError for a malformed header, once the good messages before it were handed
        out (on the next call).
        """
        frames = self.frames
        if frames.failed:
            frames.read_messages()  # raises the error waiting behind what was handed out
        target = frames.recv_target()
        if target is None:
            data = self.source.recv(RECV_SIZE)
            if not data:
                raise ServerClosed(SERVER_CLOSED)
            frames.feed(data)
        else:
            try:
                received = self.source.recv_into(target)
            finally:
                target.release()
            if not received:
                raise ServerClosed(SERVER_CLOSED)
            frames.advance(received)
        return frames.read_messages()

adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
