"""The compiled TypeRegistry.encode_params against the Python reference: any parameter list
(every built-in Python type, subclasses, registered encoders, values that cannot be sent)
gives the same oids, formats and bytes, or the same error."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st
from support.twins import compiled_only, outcome

from pgmux.types import Json, TypeRegistry, default_registry
from pgmux.types.registry import python_encode_params

pytestmark = compiled_only


class Colour(enum.IntEnum):
    RED = 1


class Point:
    def __init__(self, x: int):
        self.x = x


class Tricky:
    """Registered with an encoder whose text is not valid Unicode."""


def registered() -> TypeRegistry:
    registry = default_registry.copy()
    registry.register(600, python_type=Point, encoder=lambda p: f"({p.x})")
    registry.register(601, python_type=Tricky, encoder=lambda t: "\udc80")
    registry.register(602, python_type=bool, encoder=lambda b: "yes" if b else "no")
    return registry


REGISTRIES = {"default": default_registry, "registered": registered()}
values = st.one_of(
    st.integers(), st.integers(-(2**31) - 2, 2**31 + 1), st.booleans(), st.none(),
    st.text(), st.sampled_from(["a\x00b", "\udc80", "é", ""]), st.floats(),
    st.binary(max_size=8), st.binary(max_size=4).map(bytearray),
    st.binary(max_size=4).map(memoryview), st.decimals(), st.uuids(),
    st.datetimes(), st.dates(), st.timedeltas(), st.just(Colour.RED),
    st.builds(Point, st.integers()), st.just(Tricky()), st.just(Json({"a": 1})),
    st.lists(st.integers(-5, 5), max_size=3), st.just({"a": 1}), st.just((1, 2)),
    st.just(object()))
containers = st.sampled_from([list, tuple])


@settings(max_examples=400, deadline=None)
@given(st.lists(values, max_size=6), containers, st.sampled_from(sorted(REGISTRIES)))
def test_same_encoding_or_same_error(params, container, name):
    registry = REGISTRIES[name]
    given_params = container(params)
    assert outcome(lambda: registry.encode_params(given_params)) == \
        outcome(lambda: python_encode_params(registry, given_params))


@settings(max_examples=300, deadline=None)
@given(values, containers, st.sampled_from(sorted(REGISTRIES)))
def test_a_single_value_same_encoding_or_same_error(value, container, name):
    """One value, the common shape, is built its own way (no (oid, format, data) tuple)."""
    registry = REGISTRIES[name]
    given_params = container([value])
    assert outcome(lambda: registry.encode_params(given_params)) == \
        outcome(lambda: python_encode_params(registry, given_params))


def test_a_single_value_gets_a_list_of_its_own_and_a_replaced_encoder():
    first, second = (default_registry.encode_params([7]), default_registry.encode_params([7]))
    assert first == second == ((23,), (0,), [b"7"])
    assert first[2] is not second[2]  # the caller may keep or change its list
    assert default_registry.encode_params(["x"]) == ((0,), (0,), [b"x"])
    assert default_registry.encode_params((None,)) == ((0,), (0,), [None])
    registry = default_registry.copy()
    registry.register(701, python_type=int, encoder=lambda n: f"n{n}")
    registry.register(702, python_type=str, encoder=lambda s: s.upper())
    assert registry.encode_params([7]) == ((701,), (0,), [b"n7"])
    assert registry.encode_params(["x"]) == ((702,), (0,), [b"X"])


def test_the_compiled_one_is_in_place():
    assert type(default_registry).encode_params is not python_encode_params
    assert default_registry.encode_params([7, "x", None]) == ((23, 0, 0), (0, 0, 0),
                                                              [b"7", b"x", None])


def test_a_registration_after_binding_is_seen():
    registry = default_registry.copy()
    encode = registry.encode_params  # bound once, as Client does
    registry.register(700, python_type=dt.date, encoder=lambda d: "a date")
    assert encode([dt.date(2024, 1, 1)]) == ((700,), (0,), [b"a date"])


def test_other_sequences_go_to_the_reference():
    def values():
        yield 1

    registry = default_registry
    for params in (range(3), [Decimal(1), uuid.UUID(int=1)]):
        assert registry.encode_params(params) == python_encode_params(registry, params)
    assert outcome(lambda: registry.encode_params(values())) == \
        outcome(lambda: python_encode_params(registry, values()))
