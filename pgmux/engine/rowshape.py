"""A result's shape: column descriptions, names, one decoder per column, and the compiled
row decoder built from them once (``pgmux.types.rows``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pgmux.protocol.backend import Column
from pgmux.types.rows import make_row_decoder

Decoder = Callable[[Any], Any]


class RowShape:
    """What a statement returns; ``decode(payload)`` turns one DataRow into a row tuple.

    ``unknown``: the indexes of columns pgmux could not read as their type when the shape
    was built (a type not looked up yet, or binary for a type read only as text); their
    values are kept as they came (text as ``str``, binary as ``bytes``) and decoded once
    the type is known (``Engine.outcome`` then says AWAITS).
    """

    __slots__ = ("columns", "names", "decoders", "decode", "unknown")

    def __init__(self, columns: tuple[Column, ...], decoders: list[Decoder],
                 unknown: tuple[int, ...] = ()):
        self.columns = columns
        self.names = tuple(c.name for c in columns)
        self.decoders = decoders
        self.decode = make_row_decoder(decoders)
        self.unknown = unknown


EMPTY_SHAPE = RowShape((), [])
