"""pyformat -> $n conversion (no server): psycopg2's rules, literals left alone, cached."""

from __future__ import annotations

import pytest

from pgmux.dbapi.paramstyle import bind, convert
from pgmux.errors import ProgrammingError


@pytest.mark.parametrize(
    ("sql", "params", "expected"),
    [
        ("SELECT %s, %s", (1, 2), ("SELECT $1, $2", [1, 2])),
        ("SELECT %(a)s, %(b)s, %(a)s", {"a": 1, "b": 2, "unused": 3},
         ("SELECT $1, $2, $1", [1, 2])),
        ("SELECT 5 %% 2, %s", [7], ("SELECT 5 % 2, $1", [7])),
        ("SELECT 'thi%%s ca%%(u)se', %s", (1,), ("SELECT 'thi%s ca%(u)se', $1", [1])),
        ("SELECT '%s', \"a%sb\", $$%s$$, $q$%(x)s$q$ -- %s\n, %s", ("v",),
         ("SELECT '%s', \"a%sb\", $$%s$$, $q$%(x)s$q$ -- %s\n, $1", ["v"])),
        ("SELECT /* %s /* %s */ */ %s", (1,), ("SELECT /* %s /* %s */ */ $1", [1])),
        ("SELECT E'\\'%s', %s", (1,), ("SELECT E'\\'%s', $1", [1])),
        ("SELECT %(na me)s", {"na me": 1}, ("SELECT $1", [1])),
        ("SELECT 1", (), ("SELECT 1", [])),
        ("SELECT 1", {}, ("SELECT 1", [])),
    ],
)
def test_placeholders_become_numbered_parameters(sql, params, expected):
    assert bind(sql, params) == expected


def test_without_parameters_the_text_is_sent_as_it_is():
    assert bind("SELECT 5 % 2, '%s'", None) == ("SELECT 5 % 2, '%s'", None)


def test_conversion_is_cached_per_text_and_style():
    sql = "SELECT %s, 'cached %%'"
    assert convert(sql, False) is convert(sql, False)
    assert convert(sql, False).placeholders == 1
    assert convert("SELECT 1", True).names == ()


@pytest.mark.parametrize(
    ("sql", "params", "message"),
    [
        ("SELECT %s", (1, 2), "1 %s placeholders but 2 parameters"),
        ("SELECT %s, %s", (1,), "2 %s placeholders but 1 parameters"),
        ("SELECT %d", (1,), "unsupported placeholder '%d'"),
        ("SELECT 5 % 2", (), "unsupported placeholder '% '"),
        ("SELECT %(a)s", (1,), "mixed placeholder styles"),
        ("SELECT %s", {"a": 1}, "mixed placeholder styles"),
        ("SELECT %(a)s", {"b": 1}, r"no value for the parameter %\(a\)s"),
        ("SELECT %s", 5, "not int"),
        ("SELECT %s", "ab", "not str"),
    ],
)
def test_mistakes_are_programming_errors(sql, params, message):
    with pytest.raises(ProgrammingError, match=message):
        bind(sql, params)


def test_an_unterminated_literal_is_left_to_the_server():
    assert bind("SELECT 'oops %s", (1,)) == ("SELECT 'oops $1", [1])
