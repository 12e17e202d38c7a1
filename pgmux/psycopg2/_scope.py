"""Where a typecaster is registered (a connection, a cursor, or everywhere) and the
catalog look-ups the ``register_*`` functions make."""

from __future__ import annotations

from typing import Any


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
    cur = conn.cursor()
    try:
        cur.execute(sql, params)
        return cur.fetchall()
    finally:
        cur.close()
        if idle and not conn.autocommit and conn.pgmux_handle.in_transaction:
            conn.rollback()
