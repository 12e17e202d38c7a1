"""Parameters for a statement whose parameter types the server already holds.

A statement registered with ``Client.prepare`` is parsed once, with the types its
author gave or the server inferred, and then executed with whatever Python values
the caller passes. A value whose natural encoding names another type must not be
sent as is (a float's eight binary bytes read as a bigint are a different number):
it goes as text, which the server reads with the input function of the type it
holds, after a check here for what would silently change the value.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from pgmux.errors import InterfaceError
from pgmux.types import oids as types
from pgmux.types.registry import TypeRegistry

_INTEGER_TYPES = frozenset({types.INT2, types.INT4, types.INT8, types.OID})
_NUMBER_TYPES = frozenset({types.FLOAT4, types.FLOAT8, types.NUMERIC})
_TYPE_NAMES = {oid: name for name, (oid, _, _) in types.TYPES.items()}


def adapt_params(registry: TypeRegistry, params: Sequence[Any], param_types: tuple[int, ...],
                 oids: tuple[int, ...], formats: tuple[int, ...],
                 values: list[bytes | None]) -> tuple[tuple[int, ...], list[bytes | None]]:
    """(formats, values) for ``params`` as the types ``param_types``; ``oids``, ``formats``
    and ``values`` are their natural encoding. Raises InterfaceError, before anything is
    sent, for a value that the target type would hold as a different value."""
    new_formats = list(formats)
    new_values = list(values)
    for index, (value, target, oid) in enumerate(zip(params, param_types, oids, strict=True)):
        if oid == target or value is None or oid == 0:
            continue  # the same type, NULL, or untyped text the server reads as the target
        new_formats[index] = 0
        new_values[index] = _as_text(registry, value, target, index).encode()
    return tuple(new_formats), new_values


def _as_text(registry: TypeRegistry, value: Any, target: int, index: int) -> str:
    if target in _INTEGER_TYPES:
        return str(_integral(value, target, index))
    if target in _NUMBER_TYPES:
        if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
            raise _refused(value, target, index)
        number = registry.encode_text(value)
        assert number is not None  # (None only for None, refused above)
        return number
    text = registry.encode_text(value)
    assert text is not None
    return text


def _integral(value: Any, target: int, index: int) -> int:
    """``value`` as an int, if that is exactly the same number."""
    if isinstance(value, bool):
        raise _refused(value, target, index)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        return int(value)
    raise _refused(value, target, index)


def _refused(value: Any, target: int, index: int) -> InterfaceError:
    name = _TYPE_NAMES.get(target, f"type oid {target}")
    return InterfaceError(f"parameter ${index + 1}: the statement takes {name}, which cannot "
                          f"hold the {type(value).__name__} {value!r} exactly")
