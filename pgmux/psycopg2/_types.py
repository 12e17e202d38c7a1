"""The drop-in's type registry: pgmux's codecs, set to give what psycopg2's built-in
typecasters give (see ``pgmux.psycopg2._casters`` for the OIDs an application claims)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from pgmux.psycopg2 import _casters
from pgmux.psycopg2 import _textparse as parse
from pgmux.psycopg2._adapt import VersionedDict
from pgmux.types import TypeRegistry, oids, ranges
from pgmux.types.text import decode_str

_NUMERIC = oids.NUMERIC


class DecodeFailure:
    """A value psycopg2's typecaster would have failed to read: the cursor raises
    ``error`` when the row holding it is fetched, as psycopg2 raises at fetch time."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


# How many values failed to decode so far (a cursor rescans its rows when this moved).
decode_failures = [0]


def _text(func: Any) -> Any:
    """A text decoder reading ``func(text)``; what it cannot read becomes a DecodeFailure
    (the statement itself succeeded: its other rows stay readable)."""
    def decode(data: Any) -> Any:
        try:
            return func(str(data, "utf-8"))
        except Exception as error:
            decode_failures[0] += 1
            return DecodeFailure(error)
    return decode


def _param_float(value: float) -> tuple[int, int, bytes]:
    """A float as psycopg2 renders it: a bare numeric literal (so ``SELECT %s`` gives a
    Decimal), NaN and infinities as float8."""
    text = float.__repr__(value)
    if text[-1] in "0123456789":
        return _NUMERIC, 0, text.encode()
    return oids.FLOAT8, 0, {"nan": b"NaN", "inf": b"Infinity", "-inf": b"-Infinity"}[text]


def _str_types() -> list[int]:
    """Types psycopg2 has no caster for (their text is the value), arrays included."""
    found = [oids.INET, oids.CIDR, oids.UUID, oids.MACADDR, oids.MONEY, oids.XID, oids.CID,
             oids.TID, oids.XID8]
    for _, array_oid, _ in oids.TYPES.values():
        if array_oid and array_oid not in _casters.DEFAULTS:
            found.append(array_oid)
    found += list(ranges.BUILTIN_MULTIRANGES)
    return found


def _param_decimal(value: Decimal) -> tuple[int, int, bytes]:
    """A Decimal as psycopg2 renders it: its numeric text, NaN for every non-finite one."""
    if value.is_finite():
        return _NUMERIC, 0, str(value).encode()
    return _NUMERIC, 0, b"NaN"


class Psycopg2Types(TypeRegistry):
    """pgmux's registry as psycopg2 reads values: user-defined types (enums, composites,
    domains' arrays, hstore) come as their text unless a typecaster is registered, so no
    type is ever looked up; the claimed OIDs come as text for their casters."""

    def __init__(self) -> None:
        super().__init__()
        self._setup()
        self.claimed: frozenset[int] = frozenset()  # values the cursor casts
        self.raw: frozenset[int] = frozenset()  # of those, OIDs sent as text (see _casters)
        self.synced = -1

    def _setup(self) -> None:
        register = super().register
        register(oids.BYTEA, text_decoder=_text(parse.parse_bytea),
                 binary_decoder=lambda data: memoryview(bytes(data)).cast("c"))
        for oid in _str_types():
            register(oid, text_decoder=decode_str)
        register(oids.FLOAT4, text_decoder=_text(float))
        register(oids.DATE, text_decoder=_text(parse.parse_date))
        register(oids.TIME, text_decoder=_text(parse.parse_time))
        register(oids.TIMETZ, text_decoder=_text(parse.parse_time))
        register(oids.TIMESTAMP, text_decoder=_text(parse.parse_timestamp))
        register(oids.TIMESTAMPTZ, text_decoder=_text(
            lambda text: parse.parse_timestamp(text, dt.timezone, aware=True)))
        register(oids.INTERVAL, text_decoder=_text(parse.parse_interval))
        from pgmux.psycopg2._range import BUILTIN_CASTERS

        for oid, caster in BUILTIN_CASTERS.items():
            register(oid, text_decoder=_text(caster.parse))
        self.register_param(float, _param_float)
        self.register_param(Decimal, _param_decimal)

    def knows(self, oid: int) -> bool:
        return True  # psycopg2 reads a type it has no caster for as text: nothing to learn

    def sync_claims(self) -> frozenset[int]:
        """Follow the typecasters registered since the last call: the OIDs claimed (their
        values come as text, for the cursor to cast)."""
        if self.synced == VersionedDict.version:
            return self.claimed
        self.synced = VersionedDict.version
        claimed = _casters.claimed_oids()
        raw = frozenset(_casters.raw_oids(claimed))
        if raw != self.raw:
            self._rebuild(raw)
        self.claimed = frozenset(claimed | raw)
        return self.claimed

    def _rebuild(self, raw: frozenset[int]) -> None:
        fresh = TypeRegistry.__new__(Psycopg2Types)
        TypeRegistry.__init__(fresh)
        Psycopg2Types._setup(fresh)
        version = self.version
        self.__dict__.update({name: value for name, value in fresh.__dict__.items()})
        self.version = max(version, fresh.version) + 1
        for oid in raw:
            TypeRegistry.register(self, oid, text_decoder=decode_str)
        self.raw = raw


registry = Psycopg2Types()
