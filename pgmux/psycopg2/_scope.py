"""Where a typecaster is registered (a connection, a cursor, or everywhere) and the
catalog look-ups the ``register_*`` functions make."""

from __future__ import annotations

from typing import Any

from pgmux.psycopg2._defaults import DEFAULT_CURSOR


def connection_of(conn_or_curs: Any) -> Any:
    """The connection of a connection or cursor."""
    if hasattr(conn_or_curs, "pgmux_handle"):
        return conn_or_curs
    conn = getattr(conn_or_curs, "connection", None)
    if hasattr(conn, "pgmux_handle"):
        return conn
    raise TypeError(f"a connection or cursor was expected, not {type(conn_or_curs).__name__}")


def catalog_rows(conn_or_curs: Any, sql: str, params: Any) -> list[Any]:
    """The rows of a catalog query run on ``conn_or_curs``'s connection; a transaction
    the query opened (the connection was idle, not in autocommit) is rolled back after it,
    as psycopg2's look-ups do."""
    conn = connection_of(conn_or_curs)
    idle = not conn.pgmux_handle.in_transaction
    cur = conn.cursor(cursor_factory=DEFAULT_CURSOR[0])
    try:
        cur.execute(sql, params)
        return cur.fetchall()
    finally:
        cur.close()
        if idle and not conn.autocommit and conn.pgmux_handle.in_transaction:
            conn.rollback()


def split_name(name: str) -> tuple[str | None, str]:
    """(schema or None, name) of a type name as SQL writes it: ``schema.name``, either
    part double-quoted (``"my.schema"."my.type"``) or folded to lower case."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    i = 0
    while i < len(name):
        char = name[i]
        if char == '"':
            if quoted and name[i + 1:i + 2] == '"':
                current.append('"')
                i += 1
            else:
                quoted = not quoted
        elif char == "." and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char if quoted else char.lower())
        i += 1
    parts.append("".join(current))
    if len(parts) == 1:
        return None, parts[0]
    return ".".join(parts[:-1]), parts[-1]
