"""put_bounded: a cache dict never holds more than its limit, and a replaced key keeps it."""

from __future__ import annotations

from pgmux.cache import put_bounded


def test_a_full_cache_is_emptied_before_a_new_key():
    cache: dict[str, int] = {}
    for number in range(3):
        put_bounded(cache, f"k{number}", number, 3)
    assert cache == {"k0": 0, "k1": 1, "k2": 2}
    put_bounded(cache, "k3", 3, 3)
    assert cache == {"k3": 3}


def test_replacing_a_held_key_does_not_empty_a_full_cache():
    cache = {"a": 1, "b": 2}
    put_bounded(cache, "b", 20, 2)
    assert cache == {"a": 1, "b": 20}


def test_the_bound_holds_over_many_puts():
    cache: dict[int, int] = {}
    sizes = set()
    for number in range(1000):
        put_bounded(cache, number, number, 64)
        sizes.add(len(cache))
    assert max(sizes) == 64 and cache[999] == 999
