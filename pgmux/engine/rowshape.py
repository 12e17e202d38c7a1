"""A result's shape: column descriptions, names, one decoder per column, and the compiled
row decoder built from them once (``pgmux.types.rows``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pgmux.protocol.backend import Column
from pgmux.types.rows import make_row_decoder

Decoder = Callable[[Any], Any]


class RowShape:
    """What a statement returns; ``decode(payload)`` turns one DataRow into a row tuple."""

    __slots__ = ("columns", "names", "decoders", "decode")

    def __init__(self, columns: tuple[Column, ...], decoders: list[Decoder]):
        self.columns = columns
        self.names = tuple(c.name for c in columns)
        self.decoders = decoders
        self.decode = make_row_decoder(decoders)


EMPTY_SHAPE = RowShape((), [])
