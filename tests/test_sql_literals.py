"""``scanner.literals_replaced``: what telemetry records of a statement without parameters
(its literals replaced by ``?``, as the conventions ask of non-parameterized text)."""

from __future__ import annotations

import pytest

from pgmux.sql.scanner import literals_replaced


@pytest.mark.parametrize("sql, expected", [
    ("UPDATE t SET v = 'secret' WHERE id = 42", "UPDATE t SET v = ? WHERE id = ?"),
    ("SELECT E'it\\'s', e'x', U&'d\\0061t', B'101', X'1F', N'n'", "SELECT ?, ?, ?, ?, ?, ?"),
    ("SELECT $$a 'b' 1$$, $tag$ $$ 2 $tag$ AS x", "SELECT ?, ? AS x"),
    ("SELECT 3.14, .5, 1e5, 2E-3, 0x1F, 1_000 FROM t1", "SELECT ?, ?, ?, ?, ?, ? FROM t1"),
    ("SELECT $1::int, col2 FROM \"t 3\" -- a 'comment' 7\n", "SELECT $1::int, col2 FROM "
     "\"t 3\" -- a 'comment' 7\n"),
    ("SELECT 'it''s' || x2 LIMIT 10", "SELECT ? || x2 LIMIT ?"),
    ("COMMIT", "COMMIT"),
    ("SELECT 'never ends", "SELECT ?"),
    ("SELECT 1, 'a' || E'never\\'", "SELECT ?, ? || ?"),
    ("SELECT x /* never", "SELECT x ?"),
])
def test_literals_are_replaced(sql, expected):
    assert literals_replaced(sql) == expected
