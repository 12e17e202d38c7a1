"""Turning RowDescriptions into row shapes (column names and decoders), with a small cache."""

from __future__ import annotations

from pgmux.protocol.backend import Column, parse_row_description
from pgmux.protocol.result import Reply, RowShape
from pgmux.protocol.statements import Statement, learn_shape
from pgmux.types.registry import TypeRegistry

_MAX_CACHED = 2048


class ShapeFactory:
    """Builds ``RowShape`` objects for one type registry.

    Shapes for RowDescription payloads seen before come from a cache keyed by the raw
    payload, so an ad-hoc query that repeats costs a dict lookup, not a parse.
    """

    def __init__(self, registry: TypeRegistry):
        self.registry = registry
        self._by_payload: dict[bytes, RowShape] = {}

    def from_payload(self, payload: bytes) -> RowShape:
        shape = self._by_payload.get(payload)
        if shape is None:
            columns = parse_row_description(payload)
            shape = self.make(columns, tuple(c.format for c in columns))
            if len(self._by_payload) >= _MAX_CACHED:
                self._by_payload.clear()
            self._by_payload[bytes(payload)] = shape
        return shape

    def make(self, columns: tuple[Column, ...], formats: tuple[int, ...]) -> RowShape:
        """A shape whose decoders read each column in the given format (() = all text)."""
        registry = self.registry
        decoders = []
        for index, column in enumerate(columns):
            binary = formats[index] if formats else 0
            decoder = registry.binary_decoder(column.type_oid) if binary else None
            decoders.append(decoder or registry.text_decoder(column.type_oid))
        return RowShape(columns, decoders)

    def preferred_format(self, oid: int) -> int:
        return self.registry.result_format(oid)

    def describe(self, reply: Reply, statement: Statement | None, shape: RowShape) -> None:
        """A RowDescription arrived: ``reply`` decodes with ``shape``, and ``statement``
        (if not yet described) learns the result formats to ask for from now on."""
        reply.shape = shape
        if statement is not None and statement.shape is None:
            learn_shape(statement, shape.columns, self.make, self.preferred_format)
