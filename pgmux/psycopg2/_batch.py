"""``execute_batch`` and ``execute_values``: many parameter sets in few round trips."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from pgmux.psycopg2._exceptions import ProgrammingError


def paginate(seq: Iterable[Any], page_size: int) -> Iterator[list[Any]]:
    """``seq`` in lists of ``page_size`` items (the last one shorter)."""
    page: list[Any] = []
    for item in seq:
        page.append(item)
        if len(page) == page_size:
            yield page
            page = []
    if page:
        yield page


def execute_batch(cur: Any, sql: Any, argslist: Iterable[Any], page_size: int = 100) -> None:
    """Run ``sql`` once per item of ``argslist``, ``page_size`` statements per round trip
    (each page one text of statements joined by ';'). ``rowcount`` is the last
    statement's, as psycopg2's."""
    for page in paginate(argslist, page_size=page_size):
        sqls = [cur.mogrify(sql, args) for args in page]
        cur.execute(b";".join(sqls))


def split_sql(sql: bytes) -> tuple[list[bytes], list[bytes]]:
    """``sql`` around its single ``%s``: (the text before, the text after), with ``%%``
    kept for the formatting that follows."""
    pre: list[bytes] = []
    post: list[bytes] = []
    current = pre
    i, size = 0, len(sql)
    start = 0
    while i < size:
        if sql[i:i + 1] != b"%":
            i += 1
            continue
        current.append(sql[start:i])
        nxt = sql[i + 1:i + 2]
        if nxt == b"%":
            current.append(b"%")
            i += 2
        elif nxt == b"s":
            if current is post:
                raise ValueError("the query contains more than one '%s' placeholder")
            current = post
            i += 2
        else:
            raise ValueError("the query doesn't contain any '%s' placeholder" if not nxt
                             else f"unsupported format character: '{nxt.decode()}'")
        start = i
    current.append(sql[start:])
    if current is pre:
        raise ValueError("the query doesn't contain any '%s' placeholder")
    return pre, post


def execute_values(cur: Any, sql: Any, argslist: Iterable[Any], template: Any = None,
                   page_size: int = 100, fetch: bool = False) -> list[Any] | None:
    """``sql`` with its single ``%s`` replaced by a VALUES list of ``argslist``'s items
    (each rendered with ``template``, default ``(%s, %s, ...)``), ``page_size`` items per
    statement; with ``fetch``, the rows every statement returned."""
    from pgmux.psycopg2.sql import Composable

    conn = cur.connection
    encoding = conn.pgmux_encoding
    if isinstance(sql, Composable):
        sql = sql.as_string(conn)
    if not isinstance(sql, bytes):
        sql = sql.encode(encoding)
    pre, post = split_sql(sql)
    if isinstance(template, str):
        template = template.encode(encoding)
    result: list[Any] | None = [] if fetch else None
    for page in paginate(argslist, page_size=page_size):
        if template is None:
            template = b"(" + b",".join([b"%s"] * len(page[0])) + b")"
        parts = pre[:]
        for args in page:
            parts.append(cur.mogrify(template, args))
            parts.append(b",")
        parts[-1:] = post
        cur.execute(b"".join(parts))
        if fetch:
            if cur.description is None:
                raise ProgrammingError("no results to fetch")
            result.extend(cur.fetchall())  # type: ignore[union-attr]
    return result
