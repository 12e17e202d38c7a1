"""Which relations a query names: what may be a view, whose definition the text does not show."""

# Over-approximated rather than missed: every name (schema-qualified or not) after FROM,
# JOIN or TABLE (past ONLY and LATERAL), and after each "," of a FROM list (to the clause
# that ends it: WHERE, GROUP, ORDER, ..., or the closing parenthesis), unless "(" follows
# it (a function). Opening parentheses do not end the wait for a name, so the first name
# of a parenthesised join counts (FROM (a JOIN b ...), FROM ((a))); a subquery's SELECT or
# VALUES ends it. A name there that is no relation (a CTE, a column after EXTRACT(... FROM
# or IS DISTINCT FROM) costs a look-up that finds nothing. Unquoted names are folded to
# lower case as the server folds them; quoted ones are taken as written.

from __future__ import annotations

import re

from pgmux.sql.scanner import ID_CHAR, ID_START

Relation = tuple[str, str]  # (schema, or "" when unqualified; name)

_TOKEN = re.compile(f'[{ID_CHAR}]+|"[^"]*"|\\S', re.ASCII)
_NAME_START = re.compile(f"[{ID_START}]", re.ASCII)
_INTRODUCERS = frozenset({"from", "join", "table"})
_SKIPPED = frozenset({"only", "lateral"})
_LIST_ENDS = frozenset({"where", "group", "having", "window", "order", "limit", "offset",
                        "fetch", "for", "union", "intersect", "except", "returning", "select",
                        "values"})
_FOLD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class UnreadableNameError(ValueError):
    """A relation is named in a way the scanner does not spell out (U&"...")."""


def relations(names: str, sql: str) -> frozenset[Relation]:
    """The relations a single statement may name (see the module's comment): ``names`` is
    its names view (``lex``), ``sql`` its text, for the quoted names the view leaves blank."""
    tokens = [(match.group(), match.start()) for match in _TOKEN.finditer(names)]
    found: set[Relation] = set()
    from_lists = [False]  # per parenthesis depth: inside a FROM list
    expect = False  # the next name is a relation's
    at = 0
    while at < len(tokens):
        token, start = tokens[at]
        word = token.translate(_FOLD) if _NAME_START.match(token) else None
        if token in ("(", "["):
            from_lists.append(False)  # keeps expect: FROM (a JOIN b ...), FROM ((a))
        elif token in (")", "]"):
            if len(from_lists) > 1:
                from_lists.pop()
            expect = False
        elif token == ",":
            expect = from_lists[-1]
        elif word in _INTRODUCERS:
            expect = True
            from_lists[-1] = from_lists[-1] or word == "from"
        elif expect and word in _SKIPPED:
            pass
        elif word in _LIST_ENDS:
            from_lists[-1] = expect = False
        elif expect and _is_name(token):
            at = _take(tokens, at, sql, found)
            expect = False
        else:
            expect = False
        at += 1
    return frozenset(found)


def _is_name(token: str) -> bool:
    return token[0] == '"' or _NAME_START.match(token) is not None


def _take(tokens: list[tuple[str, int]], at: int, sql: str, found: set[Relation]) -> int:
    """Read the (qualified) name starting at ``tokens[at]`` into ``found``, unless it is a
    function's; the index of its last token."""
    at, part = _part(tokens, at, sql)
    parts = [part]
    while at + 2 < len(tokens) and tokens[at + 1][0] == "." and _is_name(tokens[at + 2][0]):
        at, part = _part(tokens, at + 2, sql)
        parts.append(part)
    if at + 1 < len(tokens) and tokens[at + 1][0] == "(":
        return at  # a function in FROM
    found.add((parts[-2] if len(parts) > 1 else "", parts[-1]))
    return at


def _part(tokens: list[tuple[str, int]], at: int, sql: str) -> tuple[int, str]:
    """(index of its last token, the name) of one part of a name starting at ``at``."""
    token, start = tokens[at]
    if (token in ("U", "u") and at + 2 < len(tokens) and tokens[at + 1] == ("&", start + 1)
            and tokens[at + 2][1] > start + 1):  # U&"...": spelled by the scanner, or blank
        at += 2
        token, start = tokens[at]
        if token[0] == '"':
            raise UnreadableNameError('a relation named with U&"..." that pgmux cannot read')
    if token[0] != '"':
        return at, token.translate(_FOLD)
    return at, sql[start + 1 : start + len(token) - 1].replace('""', '"')
