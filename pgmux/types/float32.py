"""float4 as PostgreSQL prints it: the shortest decimal that reads back as the same float32.

PostgreSQL 12+ prints a float4 (``extra_float_digits`` > 0, the default) with Ryu's
shortest round-trip algorithm: the decimal with the fewest digits strictly inside the
float32's rounding interval (PostgreSQL builds Ryu without STRICTLY_SHORTEST, so a
decimal on the interval's edge never counts, though strtof would round it back), the
one nearest the exact value among those. ``shortest_float``
returns the Python float of that decimal, so a binary float4 decodes to what its text
decodes to (0.1, not 0.10000000149011612), under any ``extra_float_digits``.

Theory of operation. The fast path formats the value with ``%.Ng`` (correctly rounded
to N significant digits, so the nearest N-digit decimal) and binary-searches the
smallest N whose decimal falls strictly inside the rounding interval; fitting is
monotonic in N because the interval is symmetric. The interval bounds are midpoints
between neighbouring float32s, exact as doubles, so "strictly inside" is decided
exactly on doubles; a decimal whose double lands on a bound, and the powers of two
(whose interval is narrower below than above), take the exact path in rationals.
"""

from __future__ import annotations

import math
from fractions import Fraction
from struct import Struct

_FLOAT4 = Struct("!f")
_UINT4 = Struct("!I")
_FORMATS = [f"%.{digits}g" for digits in range(10)]  # float32 needs at most 9 digits
# Half the gap to the next float32 above, by biased exponent (0: subnormals).
_HALF_GAP = [math.ldexp(1.0, max(exponent, 1) - 151) for exponent in range(256)]
_MANTISSA = 0x7FFFFF
_exact_cache: dict[int, float] = {}


def shortest_float(data: bytes) -> float:
    """The float of the shortest decimal text of the float4 in ``data`` (4 bytes)."""
    (bits,) = _UINT4.unpack(data)
    (value,) = _FLOAT4.unpack(data)
    exponent = (bits >> 23) & 0xFF
    if exponent == 255 or not bits & 0x7FFFFFFF:  # NaN, infinities, zeros
        return value
    if not bits & _MANTISSA and exponent > 1:  # a power of two: asymmetric interval
        return _cached_exact(bits)
    half = _HALF_GAP[exponent]
    low, high = value - half, value + half
    fewest, most = 1, 9
    found = None
    while fewest < most:
        digits = (fewest + most) >> 1
        candidate = float(_FORMATS[digits] % value)
        if low < candidate < high:
            most, found = digits, candidate
        elif candidate in (low, high):
            return shortest_exact(bits)
        else:
            fewest = digits + 1
    if found is None:  # only 9 digits fit
        found = float(_FORMATS[9] % value)
        if found in (low, high):
            return shortest_exact(bits)
    return found


def _cached_exact(bits: int) -> float:
    found = _exact_cache.get(bits)
    if found is None:
        found = _exact_cache[bits] = shortest_exact(bits)  # at most 2 x 253 entries
    return found


def shortest_exact(bits: int) -> float:
    """The same answer by exact rational arithmetic (slow; the reference for the fast path).

    The rounding interval is (value - gap below / 2, value + gap above / 2), its bounds
    excluded as in PostgreSQL's Ryu. The answer is the multiple of the largest power of
    ten inside it, nearest the value (ties: the even multiple).
    """
    (value,) = _FLOAT4.unpack(_UINT4.pack(bits))
    exact = Fraction(abs(value))
    exponent = (bits >> 23) & 0xFF
    above = Fraction(2) ** (max(exponent, 1) - 151)
    below = above / 2 if not bits & _MANTISSA and exponent > 1 else above
    low, high = exact - below, exact + above
    power = math.floor(math.log10(abs(value))) + 1
    while True:
        unit = Fraction(10) ** power
        under = math.floor(exact / unit)
        inside = [n for n in (under, under + 1) if low < n * unit < high]
        if inside:
            best = min(inside, key=lambda n: (abs(n * unit - exact), n % 2))
            return math.copysign(float(best * unit), value)
        power -= 1
