"""timestamptz results in the zone a cursor asks for (psycopg2's tzinfo_factory, psycopg 3's
per-cursor loaders): pgmux decodes them aware in UTC; a cursor with a ``timezone`` gives
them in that zone, or as that zone's naive local time (what Django expects with
``USE_TZ = False``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from pgmux.dbapi.quoting import is_range
from pgmux.types import oids

_ZONED = frozenset({oids.TIMESTAMPTZ, oids.TIMESTAMPTZ_ARRAY, oids.TSTZRANGE,
                    oids.TSTZRANGE_ARRAY})  # ranges: when decoded to range objects


def zoned_columns(fields: Sequence[Any]) -> tuple[int, ...]:
    """The positions of the timestamptz (and timestamptz[]) columns of a result."""
    return tuple(i for i, field in enumerate(fields) if field.type_oid in _ZONED)


def _shift(value: Any, zone: dt.tzinfo, naive: bool) -> Any:
    if type(value) is dt.datetime:
        if value.tzinfo is None:  # infinity (datetime.max/min): no zone to move to
            return value
        moved = value.astimezone(zone)
        return moved.replace(tzinfo=None) if naive else moved
    if type(value) is list:
        return [_shift(item, zone, naive) for item in value]
    if is_range(value) and not value.isempty:
        bounds = ("[" if value.lower_inc else "(") + ("]" if value.upper_inc else ")")
        return type(value)(_shift(value.lower, zone, naive), _shift(value.upper, zone, naive),
                           bounds)
    return value  # None, or text beyond datetime's years


def shift_rows(fields: Sequence[Any], rows: Sequence[Any], zone: dt.tzinfo,
               naive: bool) -> Sequence[Any]:
    """``rows`` with their timestamptz values moved to ``zone`` (naive: its local time)."""
    columns = zoned_columns(fields)
    if not columns or not rows:
        return rows
    out = []
    for row in rows:
        values = list(row)
        for i in columns:
            values[i] = _shift(values[i], zone, naive)
        out.append(tuple(values))
    return out
