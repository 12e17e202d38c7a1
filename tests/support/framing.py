"""Feeding a framing buffer the way a connection's reader does."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any


def reads(buffer: Any, stream: bytes, sizes: list[int]) -> Iterator[int]:
    """Give ``stream`` to ``buffer`` in reads of ``sizes`` (cycled), into its receive target
    when it offers one; after each read, yield how many bytes went into the target (0 for
    a read fed as bytes)."""
    pos = 0
    for size in itertools.cycle(sizes):
        if pos >= len(stream):
            return
        target = buffer.recv_target()
        if target is None:
            buffer.feed(stream[pos:pos + size])
            pos += size
            yield 0
        else:
            count = min(size, len(target), len(stream) - pos)
            target[:count] = stream[pos:pos + count]
            target.release()
            buffer.advance(count)
            pos += count
            yield count
