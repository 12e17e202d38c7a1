"""Row shapes (column names and one decoder per column) for one connection's settings.

A shape depends on the registry's codecs (which change when a user registers one)
and on the connection's text styles (DateStyle, IntervalStyle); ``stamp`` names that
combination, and every cached shape or statement built under another stamp is
rebuilt on its next use. Shapes of RowDescription payloads seen before come from a
small cache keyed by the payload, so an ad-hoc query that repeats costs a dict lookup.
"""

from __future__ import annotations

from pgmux._native import adopt
from pgmux.cache import put_bounded
from pgmux.engine.rowshape import RowShape
from pgmux.engine.settings import ServerSettings
from pgmux.engine.statements import Statement
from pgmux.protocol import frontend
from pgmux.protocol.backend import Column, parse_row_description
from pgmux.types.registry import TypeRegistry
from pgmux.types.text import Decoder

_MAX_CACHED = 2048


def _as_received(data: object) -> object:
    """A binary value pgmux cannot read yet (a type not looked up, or read only as text):
    kept as bytes, decoded once the type is known or the server gave its text."""
    return bytes(data)  # type: ignore[call-overload]


class ShapeFactory:
    """Builds ``RowShape`` objects for one registry and one connection's settings."""

    def __init__(self, registry: TypeRegistry, settings: ServerSettings):
        self.registry = registry
        self.settings = settings
        self._by_payload: dict[bytes, RowShape] = {}
        self._stamp: tuple[int, int] | None = None
        self._styled: dict[int, Decoder] = {}  # oid -> text decoder for non-ISO styles

    def current(self) -> tuple[int, int]:
        """The stamp every shape is built for now: (registry version, settings epoch).

        The same object while neither changes, so callers compare with ``is``.
        """
        stamp = self._stamp
        if (stamp is None or stamp[0] != self.registry.version
                or stamp[1] != self.settings.epoch):
            stamp = self._restamp()
        return stamp

    def _restamp(self) -> tuple[int, int]:
        settings = self.settings
        self._stamp = stamp = (self.registry.version, settings.epoch)
        self._by_payload.clear()
        self._styled = ({} if settings.iso_styles else self.registry.text_decoders_for_styles(
            settings.datestyle, settings.intervalstyle))
        return stamp

    def from_payload(self, payload: bytes) -> RowShape:
        """The shape a RowDescription announces (decoders for its columns' formats)."""
        self.current()
        shape = self._by_payload.get(payload)
        if shape is None:
            columns = parse_row_description(payload)
            shape = self.make(columns, tuple(c.format for c in columns))
            put_bounded(self._by_payload, bytes(payload), shape, _MAX_CACHED)
        return shape

    def make(self, columns: tuple[Column, ...], formats: tuple[int, ...]) -> RowShape:
        """A shape whose decoders read each column in the given format (() = all text)."""
        self.current()
        registry = self.registry
        knows = registry.knows
        styled = self._styled
        decoders = []
        unknown = []
        for index, column in enumerate(columns):
            oid = column.type_oid
            if formats and formats[index]:
                decoder = registry.binary_decoder(oid) if knows(oid) else None
                if decoder is None:
                    decoder = _as_received
                    unknown.append(index)
            else:
                decoder = styled.get(oid) or registry.text_decoder(oid)
                if not knows(oid):
                    unknown.append(index)
            decoders.append(decoder)
        return RowShape(columns, decoders, tuple(unknown))

    def formats_for(self, columns: tuple[Column, ...]) -> tuple[int, ...]:
        """The result formats to ask for: binary where the registry decodes binary."""
        result_format = self.registry.result_format
        formats = tuple(result_format(c.type_oid) for c in columns)
        return formats if any(formats) else ()

    def uniform_formats(self, columns: tuple[Column, ...],
                        formats: tuple[int, ...]) -> tuple[int, ...]:
        """One format for every column, for a Bind sent with its statement's Parse (the
        server may then return other columns than were learned: a list of one code, or
        none, fits any number of them): ``formats`` if they agree, else binary if every
        column decodes binary, else text."""
        if not formats or all(formats):
            return formats[:1]
        binary_decoder = self.registry.binary_decoder
        return (1,) if all(binary_decoder(c.type_oid) for c in columns) else ()

    def fit(self, statement: Statement) -> None:
        """Give a described ``statement`` its result formats and shape for the current stamp."""
        stamp = self.current()
        if statement.stamp == stamp:
            return
        columns = statement.columns or ()
        formats = self.formats_for(columns)
        statement.result_formats = formats
        statement.result_codes = frontend.format_codes(formats)
        statement.parse_codes = frontend.format_codes(self.uniform_formats(columns, formats))
        statement.shape = shape = self.make(columns, formats)
        # Not stamped while a type is unknown: every use fits it again until it is learned.
        statement.stamp = None if shape.unknown else stamp


adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
