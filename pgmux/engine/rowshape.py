"""A result's shape: column descriptions, names, one decoder per column, and the compiled
row decoder built from them once (``pgmux.types.rows``); and the decoding of a run of
DataRows the compiled framing hands out undecoded (``decode_rows``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pgmux._native import adopt
from pgmux.errors import ProtocolError
from pgmux.protocol.backend import Column, unpack_i32
from pgmux.types.rows import make_row_decoder

Decoder = Callable[[Any], Any]


class RowShape:
    """What a statement returns; ``decode(payload)`` turns one DataRow into a row tuple;
    ``decode_run`` is the compiled decoder's, or None (pure Python).

    ``unknown``: the indexes of columns pgmux could not read as their type when the shape
    was built (a type not looked up yet, or binary for a type read only as text); their
    values are kept as they came (text as ``str``, binary as ``bytes``) and decoded once
    the type is known (``Engine.outcome`` then says AWAITS).
    """

    __slots__ = ("columns", "names", "decoders", "decode", "decode_run", "unknown")

    def __init__(self, columns: tuple[Column, ...], decoders: list[Decoder],
                 unknown: tuple[int, ...] = ()):
        self.columns = columns
        self.names = tuple(c.name for c in columns)
        self.decoders = decoders
        self.decode = make_row_decoder(decoders)
        self.decode_run = getattr(self.decode, "decode_run", None)
        self.unknown = unknown


EMPTY_SHAPE = RowShape((), [])


def decode_rows(run: Any, shape: RowShape | None, rows: list[tuple],
                slow: Callable[[bytes], None]) -> None:
    """Append the rows of ``run`` (a ``framing.ROW_RUN`` item: DataRows back to back) to
    ``rows``, decoded with ``shape``.

    The same rows, in the same order, as decoding each DataRow alone: a row the compiled
    decoder hands back (malformed, or a decoder raised) goes to ``slow`` (the reply's
    ``add_row``), which decodes it again the Python way or says what is wrong, and the
    rows after it are decoded as usual.
    """
    decode_run = shape.decode_run if shape is not None else None
    if decode_run is None:  # no compiled decoder (or no shape: slow raises)
        for payload in run:
            try:
                rows.append(shape.decode(payload))  # type: ignore[union-attr]
            except Exception:
                slow(payload)
        return
    data, pos, end = run.data, run.start, run.end
    while pos < end:
        pos = decode_run(data, pos, end, rows)
        if pos < end:  # the message at pos was handed back
            (length,) = unpack_i32(data, pos + 1)
            if length < 4:  # the framing checked it: never, unless the run was forged
                raise ProtocolError(f"a DataRow in a run declares length {length} < 4")
            slow(data[pos + 5 : pos + 1 + length])
            pos += 1 + length

adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
