"""The framing buffer: turns any split of the backend byte stream into whole messages.

Theory of operation. Small messages are parsed straight out of the last chunk
handed to ``feed`` (a ``bytes`` object, so a payload is one slice). Only an
incomplete tail is carried over to the next feed. A message larger than
``LARGE_MESSAGE`` that is not yet complete gets a buffer of its exact size, and
the reader may receive straight into it (``recv_target``/``advance``), so a
1 MiB field costs one copy out of the kernel and no re-joins. The declared
length is checked against ``max_message_size`` before anything is allocated.
Nothing is retained once a message is handed out.

This class is the reference. ``FrameBuffer`` is the compiled twin
(``pgmux.protocol._cframing``) when the compiled implementation runs (``pgmux._native``),
else this class: the same messages and the same errors (``check_header`` raises them for
both). Created with ``row_runs=True`` (a connection's reader, which hands everything to the
engine), the compiled buffer's ``read_messages`` hands out two or more DataRows back to back
as one ``(ROW_RUN, run)`` item: ``run.data[run.start:run.end]`` holds their messages, not yet
split, ``len(run)`` counts them, iterating it gives their payloads; the engine decodes them
in one call (``pgmux.engine.rowshape.decode_rows``). This class hands out each DataRow.
"""

from __future__ import annotations

from struct import Struct

from pgmux._native import extension as native_extension
from pgmux.errors import ProtocolError
from pgmux.protocol.backend import KNOWN_TYPES

DEFAULT_MAX_MESSAGE_SIZE = 0x3FFFFFFF  # PostgreSQL's own MaxAllocSize
LARGE_MESSAGE = 64 * 1024
ROW_RUN = 0x100 + ord("D")  # not a message type: DataRows back to back (see above)

_header = Struct("!Bi")
_unpack_header = _header.unpack_from

Message = tuple[int, bytes]


def check_header(kind: int, length: int, max_message_size: int) -> None:
    """Raise ProtocolError for a message header no server may send."""
    if length < 4:
        raise ProtocolError(f"backend message {chr(kind)!r} declares length {length} < 4")
    if length > max_message_size:
        raise ProtocolError(
            f"backend message {chr(kind)!r} declares {length} bytes, over the cap of "
            f"{max_message_size}"
        )
    if kind not in KNOWN_TYPES:
        raise ProtocolError(f"unknown backend message type {bytes([kind])!r}")


class FrameBuffer:
    """Accumulates backend bytes and yields ``(type, payload)`` messages."""

    __slots__ = ("max_message_size", "failed", "row_runs", "_data", "_pos", "_large",
                 "_large_type", "_large_fill")

    def __init__(self, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE, *,
                 row_runs: bool = False):
        self.max_message_size = max_message_size
        self.failed = False  # a bad header waits behind messages already handed out
        self.row_runs = row_runs  # allowed to group DataRows (this class never does)
        self._data = b""
        self._pos = 0
        self._large: bytearray | None = None
        self._large_type = 0
        self._large_fill = 0

    @property
    def buffered(self) -> int:
        """Bytes held that have not yet been handed out as messages."""
        pending = len(self._data) - self._pos
        return pending + (self._large_fill if self._large is not None else 0)

    @property
    def capacity(self) -> int:
        """Bytes of memory the buffer holds on to (for the retained-memory figures)."""
        return len(self._data) + (len(self._large) if self._large is not None else 0)

    def feed(self, data: bytes) -> None:
        """Add bytes received from the server."""
        if self._large is not None:
            data = self._fill_large(data)
            if not data:
                return
        if self._pos >= len(self._data):
            self._data = bytes(data)
        else:
            self._data = self._data[self._pos :] + data
        self._pos = 0

    def recv_target(self) -> memoryview | None:
        """Where the next bytes of a large message should be received, if one is pending."""
        if self._large is None:
            return None
        return memoryview(self._large)[self._large_fill :]

    def advance(self, count: int) -> None:
        """Record ``count`` bytes received into ``recv_target()``."""
        large = self._large
        if large is None:
            raise AssertionError("advance() without a receive target")
        if not 0 <= count <= len(large) - self._large_fill:
            raise ValueError(f"advance({count}) past the end of the receive target")
        self._large_fill += count

    def _fill_large(self, data: bytes) -> bytes:
        large = self._large
        assert large is not None
        take = min(len(large) - self._large_fill, len(data))
        large[self._large_fill : self._large_fill + take] = data[:take]
        self._large_fill += take
        return data[take:]

    def _check_header(self, kind: int, length: int) -> None:
        check_header(kind, length, self.max_message_size)

    def _take_large(self) -> Message | None:
        large = self._large
        if large is None or self._large_fill < len(large):
            return None
        self._large = None
        return self._large_type, large  # type: ignore[return-value]

    def next_message(self) -> Message | None:
        """The next complete message, or None if more bytes are needed."""
        done = self._take_large()
        if done is not None or self._large is not None:
            return done
        data = self._data
        pos = self._pos
        available = len(data) - pos
        if available < 5:
            return None
        kind, length = _unpack_header(data, pos)
        self._check_header(kind, length)
        end = pos + 1 + length
        if end <= len(data):
            self._consumed(end)
            return kind, data[pos + 5 : end]
        if length - 4 > LARGE_MESSAGE:
            self._start_large(kind, length, data, pos)
        return None

    def _start_large(self, kind: int, length: int, data: bytes, pos: int) -> None:
        large = bytearray(length - 4)
        have = len(data) - pos - 5
        large[:have] = data[pos + 5 :]
        self._large, self._large_type, self._large_fill = large, kind, have
        self._data, self._pos = b"", 0

    def read_messages(self) -> list[Message]:
        """Every complete message buffered now, in order (the reader's hot loop)."""
        out: list[Message] = []
        append = out.append
        if self._large is not None:
            done = self._take_large()
            if done is None:
                return out
            append(done)
        data = self._data
        pos = self._pos
        size = len(data)
        known = KNOWN_TYPES
        while size - pos >= 5:
            kind, length = _unpack_header(data, pos)
            if length < 4 or length > self.max_message_size or kind not in known:
                self._pos = pos
                if out:  # hand out the good messages first; the next call raises
                    self.failed = True
                    return out
                self._check_header(kind, length)
            end = pos + 1 + length
            if end > size:
                if length - 4 > LARGE_MESSAGE:
                    self._start_large(kind, length, data, pos)
                    return out
                break
            append((kind, data[pos + 5 : end]))
            pos = end
        self._consumed(pos)
        return out

    def _consumed(self, pos: int) -> None:
        """Everything before ``pos`` was handed out; let go of the chunk once all of it was."""
        if pos >= len(self._data):
            self._data, self._pos = b"", 0
        else:
            self._pos = pos


PythonFrameBuffer = FrameBuffer
_compiled = native_extension("pgmux.protocol._cframing")
CompiledFrameBuffer = None if _compiled is None else _compiled.FrameBuffer
if _compiled is not None:
    _compiled.configure(check_header=check_header, known_types=KNOWN_TYPES,
                        large_message=LARGE_MESSAGE, row_run=ROW_RUN)
    FrameBuffer = _compiled.FrameBuffer  # type: ignore[misc]
