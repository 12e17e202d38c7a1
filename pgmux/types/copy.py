"""COPY ... FROM STDIN text format: one row of Python values -> one line of bytes.

Columns are separated by tab, the row ends with a newline, None is ``\\N``, and in a
value backslash, tab, newline and carriage return are backslash-escaped. Values are
written as their input text (registry.encode_text): lists as array literals, bytes
as ``\\x...`` hex, Json as JSON text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pgmux.errors import InterfaceError
from pgmux.types.registry import TypeRegistry, default_registry

_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def encode_copy_row(values: Sequence[Any], registry: TypeRegistry | None = None) -> bytes:
    """One COPY text-format line, newline included, encoded as UTF-8."""
    encode_text = (registry or default_registry).encode_text
    fields = []
    for value in values:
        field = encode_text(value)
        fields.append("\\N" if field is None else field.translate(_ESCAPES))
    line = "\t".join(fields)
    if "\x00" in line:
        raise InterfaceError("a COPY value contains a NUL character (\\x00)")
    return (line + "\n").encode()
