"""Late decoding: values of a result that could not be decoded as they arrived.

A column whose type the registry does not know yet (a type created since the statement
was described, met on this connection first), or that came in binary for a type pgmux
reads only as text (a learned shape gone stale), is kept as received: text as ``str``,
binary as ``bytes`` (``RowShape.unknown``). Once the answer is complete the engine says
AWAITS; the caller sends ``Engine.follow_up`` (a type lookup, or the values sent back for
the server to give their text) on the same connection, and the values are decoded here.
"""

from __future__ import annotations

from typing import Any

from pgmux.engine.exchanges import Reply
from pgmux.engine.result import DecodeError
from pgmux.types.registry import TypeRegistry

TEXT_BATCH = 10_000  # binary values sent back in one request for their text


def unknown_columns(reply: Reply, registry: TypeRegistry) -> list[Any]:
    """The columns of ``reply`` still waiting whose type is not known."""
    columns = reply.shape.columns  # type: ignore[union-attr]
    return [columns[i] for i in reply.undecoded if not registry.knows(columns[i].type_oid)]


def raw_values(reply: Reply, index: int) -> tuple[list[int], list[bytes]]:
    """(rows, values) of the binary values of column ``index`` still to decode (a batch)."""
    rows = [n for n, row in enumerate(reply.rows) if type(row[index]) is bytes][:TEXT_BATCH]
    return rows, [reply.rows[n][index] for n in rows]


def decode_known(reply: Reply, registry: TypeRegistry) -> bool:
    """Decode the waiting columns of ``reply`` whose types are known now; True once none is
    left. A value a codec rejects makes ``reply`` a DecodeError (none left either)."""
    columns = reply.shape.columns  # type: ignore[union-attr]
    now: list[tuple[int, Any]] = []
    for index in reply.undecoded:
        oid = columns[index].type_oid
        if not registry.knows(oid):
            continue
        if registry.vanished(oid) and any(row[index] is not None for row in reply.rows):
            reply.rows, reply.undecoded = [], ()
            reply.error = DecodeError(
                f"column {columns[index].name!r} is of a type (oid {oid}) that was dropped "
                "before pgmux could look it up, so its values cannot be read as that type; "
                "run the statement again")
            return True
        if not columns[index].format:
            now.append((index, registry.text_decoder(oid)))
        elif registry.binary_decoder(oid) is not None:
            now.append((index, registry.binary_decoder(oid)))
        elif not any(type(row[index]) is bytes for row in reply.rows):
            now.append((index, None))  # nothing to decode (no rows, or NULLs only)
    if now:
        try:
            reply.rows = [_decoded(row, now) for row in reply.rows]
        except Exception as exc:  # a codec rejected a value: the caller gets the reason
            reply.rows = []
            reply.error = DecodeError(f"could not decode a result value: {exc}")
            reply.undecoded = ()
            return True
        done = {index for index, _ in now}
        reply.undecoded = tuple(i for i in reply.undecoded if i not in done)
    return not reply.undecoded


def take_text(reply: Reply, index: int, rows: list[int], texts: Any,
              registry: TypeRegistry) -> None:
    """Put the server's ``texts`` of the values of column ``index`` at ``rows`` in place."""
    decode = registry.text_decoder(reply.shape.columns[index].type_oid)  # type: ignore[union-attr]
    values_of = reply.rows
    for n, text in zip(rows, texts, strict=True):
        values = list(values_of[n])
        values[index] = decode(text.encode())
        values_of[n] = tuple(values)
    if not any(type(row[index]) is bytes for row in values_of):
        reply.undecoded = tuple(i for i in reply.undecoded if i != index)


def _decoded(row: tuple[Any, ...], late: list[tuple[int, Any]]) -> tuple[Any, ...]:
    """``row`` with the values at the ``late`` indexes decoded (text was kept as ``str``)."""
    values = list(row)
    for index, decode in late:
        value = values[index]
        if value is not None and decode is not None:
            values[index] = decode(value.encode() if type(value) is str else value)
    return tuple(values)
