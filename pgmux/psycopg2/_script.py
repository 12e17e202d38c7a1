"""Several DML statements in one text, in autocommit mode, as one atomic unit.

psycopg2 sends such a text as one simple query, which PostgreSQL runs as one implicit
transaction, all or nothing (``execute_batch`` and hand-joined ``UPDATE ...; UPDATE ...``
rely on it). A handle holding no pinned connection sends its statements as one atomic
unit on the multiplexed path instead: one Sync, one implicit transaction, the same all or
nothing, no pinned connection taken. Each statement is formatted as a statement of its
own (``pgmux.psycopg2._query``): its values travel as parameters where they may, so that
the texts repeat and are prepared once. What a unit may not hold (or the guard refuses)
is refused before anything is sent, and the text then runs whole, as any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pgmux.cache import put_bounded
from pgmux.errors import DatabaseError, InterfaceError
from pgmux.psycopg2 import _query
from pgmux.sql.scanner import leading_word, mask_sql, several_statements

# The statements a unit may carry here: plain DML (others run whole, pinned).
_DML = frozenset({"select", "insert", "update", "delete", "with", "values", "table",
                  "merge"})
_CACHE_SIZE = 1024
_MAX_CACHED = 16384
_splits: dict[tuple[str, bool], tuple[str, ...] | None] = {}

Step = tuple[str, Any]  # (SQL for the server, its parameter values)


def split(query: str, standard_strings: bool) -> tuple[str, ...] | None:
    """The statements of ``query`` when it holds several and each is plain DML; else None
    (remembered: a script's text repeats, its values change)."""
    key = (query, standard_strings)
    try:
        return _splits[key]
    except KeyError:
        pass
    found = _split(query, standard_strings)
    if len(query) <= _MAX_CACHED:
        put_bounded(_splits, key, found, _CACHE_SIZE)
    return found


def _split(query: str, standard_strings: bool) -> tuple[str, ...] | None:
    try:
        masked = mask_sql(query, standard_strings)
    except ValueError:  # an unterminated literal or comment: the server says so
        return None
    if not several_statements(masked):
        return None
    out: list[str] = []
    start = 0
    while start < len(query):
        end = masked.find(";", start)
        end = len(query) if end < 0 else end
        if masked[start:end].strip():
            word = leading_word(masked[start:end])
            if word is None or word.lower() not in _DML:
                return None
            out.append(query[start:end])
        start = end + 1
    return tuple(out) if len(out) > 1 else None


def steps(query: str, vars: Any, conn: Any) -> list[Step] | None:  # noqa: A002
    """Each statement of the script ``query`` formatted with its share of ``vars`` (the
    positional values in order, the same mapping for each); None when ``query`` is not such
    a script or its values do not match (the whole text then says what psycopg2 says)."""
    if ";" not in query:  # one statement: no script (and no setting to look up)
        return None
    pieces = split(query, conn.pgmux_standard_strings)
    if pieces is None:
        return None
    if vars is None:
        return [(piece, None) for piece in pieces]
    named = isinstance(vars, Mapping)
    try:
        values = vars if named else list(vars)
        out, offset = [], 0
        for piece in pieces:
            if named:
                out.append(_query.bind(piece, values, conn))
                continue
            count = _query.template(piece, False).count
            out.append(_query.bind(piece, values[offset:offset + count], conn))
            offset += count
    except Exception:  # a mismatch or a bad format: the whole text raises psycopg2's error
        return None
    return out if named or offset == len(values) else None


def run(handle: Any, script: list[Step], query: str, vars: Any, conn: Any,  # noqa: A002
        *unused: Any) -> Any:
    """``script`` as one atomic unit: the last statement's result, as psycopg2 gives it;
    the text whole where the unit is refused before anything ran (what a unit may not
    hold, an untyped parameter the server cannot read, a value pgmux cannot send)."""
    try:
        with handle.client.atomic() as unit:
            pending = [unit.query(sql, values or ()) for sql, values in script]
    except InterfaceError:  # refused before it was sent
        return whole(handle, query, vars, conn)
    except DatabaseError as error:
        if error.sqlstate != "42P18":  # (nothing ran: the server could not read a type)
            raise
        return handle.run_statement(_query.render(query, vars, conn).decode(
            conn.pgmux_encoding), None)
    return pending[-1].result()


def whole(handle: Any, query: str, vars: Any, conn: Any) -> Any:  # noqa: A002
    """The script as one text, where any other statement runs."""
    sql, values = _query.bind(query, vars, conn)
    return handle.run_statement(sql, values)
