"""Comparing decoded values strictly: type, NaN, float sign, Decimal exponent, UTC offset."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any


def same(a: Any, b: Any) -> bool:
    """Equal in value, type, NaN-ness, float sign, Decimal exponent and UTC offset."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, Decimal):
        return repr(a) == repr(b)
    if isinstance(a, (dt.datetime, dt.time)):
        return a == b and (a.tzinfo is None) == (b.tzinfo is None) and a.utcoffset() == b.utcoffset()
    return a == b


def assert_same(actual: Any, expected: Any) -> None:
    assert same(actual, expected), f"{actual!r} != {expected!r}"
