"""The items of range and record text (range_out, record_out): unquoted, unescaped.

Both outputs double-quote an item that needs it, doubling ``"`` and ``\\`` inside; their
input functions also read a backslash escape anywhere. An item ends at the first byte,
outside quotes, of the ones its syntax names (a comma, a closing bracket).
"""

from __future__ import annotations

_QUOTE, _BACKSLASH = ord('"'), ord("\\")


def read_item(data: bytes, pos: int, stops: frozenset[int],
              end: int) -> tuple[bytes, bool, int]:
    """(the item's text, whether any of it was quoted, where it stopped) for the item at
    ``pos``, which ends before ``end`` or at the first unquoted byte in ``stops``."""
    out = bytearray()
    quoted = False
    while pos < end and data[pos] not in stops:
        char = data[pos]
        if char == _BACKSLASH:
            out.append(data[pos + 1])
            pos += 2
        elif char == _QUOTE:
            quoted = True
            pos = _read_quoted(data, pos + 1, out)
        else:
            out.append(char)
            pos += 1
    return bytes(out), quoted, pos


def _read_quoted(data: bytes, pos: int, out: bytearray) -> int:
    """Append the quoted text from ``pos`` (after the opening quote) to ``out``; the
    position after the closing quote."""
    while True:
        char = data[pos]
        if char == _BACKSLASH:
            out.append(data[pos + 1])
            pos += 2
        elif char != _QUOTE:
            out.append(char)
            pos += 1
        elif data[pos + 1 : pos + 2] == b'"':  # "" inside quotes: one quote
            out.append(_QUOTE)
            pos += 2
        else:
            return pos + 1
