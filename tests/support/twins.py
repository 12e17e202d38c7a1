"""The two implementations side by side: skip markers, and comparing outcomes exactly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pgmux import _native

compiled_only = pytest.mark.skipif(
    _native.implementation != "compiled",
    reason=f"the compiled implementation is not in use: {_native.reason}")


def exact(value: Any) -> Any:
    """A value's type and repr, recursively: equal only for the same types and values
    (1 and True and 1.0 differ, Decimal('1.0') and Decimal('1.00') differ, NaN equals NaN)."""
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [exact(v) for v in value]
    if isinstance(value, dict):
        return "dict", [(exact(k), exact(v)) for k, v in value.items()]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return type(value).__name__, bytes(value)
    return type(value).__name__, repr(value)


def outcome(call: Callable[[], Any]) -> tuple:
    """("ok", exact(value)) or ("error", exception type, message) of one call."""
    try:
        return "ok", exact(call())
    except Exception as exc:
        return "error", type(exc), str(exc)
