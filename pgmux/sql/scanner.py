"""The SQL scanner: blank literals, quoted names, dollar quotes and comments out of SQL text."""

# mask_sql() runs one left-to-right scan that blanks the insides of string literals,
# quoted identifiers, dollar quotes and comments (same length, line breaks kept), so that
# a handful of regular expressions over the result see only real SQL: every remaining
# word, ';' and '(' is a token. standard_conforming_strings is followed: when it is off, a
# backslash escapes the next character in a plain '...' literal too (so '\'' is one
# literal, not two).

from __future__ import annotations

import re

__all__ = [
    "CALL",
    "ID_CHAR",
    "ID_START",
    "SETTINGS_WRITE",
    "WHITESPACE",
    "UnterminatedSQLError",
    "leading_word",
    "lex",
    "literals_replaced",
    "mask_sql",
    "several_statements",
]

WHITESPACE = " \t\n\r\f\v"  # the server's whitespace

# Identifier characters as the server's lexer sees them (used with re.ASCII).
ID_START = "A-Za-z_\x80-\U0010ffff"
ID_CHAR = "\\w$\x80-\U0010ffff"


class UnterminatedSQLError(ValueError):
    """A string literal, quoted identifier, dollar quote or comment never ends (the one that
    starts at ``offset``)."""

    def __init__(self, what: str, offset: int):
        super().__init__(f"unterminated {what} at offset {offset}")
        self.offset = offset


_SPECIAL = re.compile(r"""['"$]|--|/\*""")
_DOLLAR_DELIMITER = re.compile(f"\\$(?:[{ID_START}][\\w\x80-\U0010ffff]*)?\\$", re.ASCII)
_ESCAPE_STRING_STOP = re.compile(r"['\\]")
_BLOCK_COMMENT_EDGE = re.compile(r"/\*|\*/")
_LINE_END = re.compile(r"[\n\r]")
_NOT_LINE_BREAK = re.compile(r"[^\n\r]")
_NUMBER_OR_PARAMETER = re.compile(r"\$?[0-9]+(?:[eE][0-9]+)?")
_SIMPLE_NAME = re.compile(r"[a-z_][a-z0-9_$]*")
_UNICODE_ESCAPE = re.compile(r"\\(?:\\|([0-9A-Fa-f]{4})|\+([0-9A-Fa-f]{6}))")


def _is_ident_char(char: str) -> bool:
    return char.isascii() and (char.isalnum() or char in "_$") or char >= "\x80"


def _blank(text: str) -> str:
    return _NOT_LINE_BREAK.sub(" ", text)


def _quoted_end(sql: str, start: int, quote: str, what: str) -> int:
    """End of a quote-delimited token whose quote is escaped by doubling it."""
    at = start + 1
    while True:
        close = sql.find(quote, at)
        if close == -1:
            raise UnterminatedSQLError(what, start)
        if sql.startswith(quote, close + 1):
            at = close + 2
        else:
            return close + 1


def _escape_string_end(sql: str, start: int) -> int:
    """End of an E'' string, where a backslash escapes the next character."""
    at = start + 1
    while (stop := _ESCAPE_STRING_STOP.search(sql, at)) is not None:
        at = stop.end()
        if stop.group() == "\\" or sql.startswith("'", at):
            at += 1
        else:
            return at
    raise UnterminatedSQLError("E'' string", start)


def _block_comment_end(sql: str, start: int) -> int:
    """End of a /* */ comment; they nest."""
    depth, at = 1, start + 2
    while (edge := _BLOCK_COMMENT_EDGE.search(sql, at)) is not None:
        depth += 1 if edge.group() == "/*" else -1
        at = edge.end()
        if depth == 0:
            return at
    raise UnterminatedSQLError("/* comment", start)


def _line_comment_end(sql: str, start: int) -> int:
    end = _LINE_END.search(sql, start)
    return len(sql) if end is None else end.start()


def _decode_unicode_name(body: str) -> str | None:
    """The name inside U&"..." (default escape character), or None if it cannot be decoded."""
    if "\\" in _UNICODE_ESCAPE.sub("", body):
        return None
    try:
        return _UNICODE_ESCAPE.sub(
            lambda m: chr(int(m.group(1) or m.group(2), 16)) if m.group(1) or m.group(2) else "\\",
            body,
        )
    except (ValueError, OverflowError):
        return None


class _Scanner:
    """One pass over the SQL: masked pieces, plus the spans of plainly-spelled quoted names."""

    def __init__(self, sql: str, standard_strings: bool = True):
        self.sql = sql
        self.standard_strings = standard_strings  # standard_conforming_strings is on
        self.pieces: list[str] = []
        self.names: list[tuple[int, int, str]] = []  # (start, end, name) of "name" tokens
        self.pos = 0  # end of the last token handled: a token boundary
        self._run_hint = (-1, -1)  # ($ position, start of its identifier run)

    def scan(self) -> str:
        sql, at = self.sql, 0
        while (match := _SPECIAL.search(sql, at)) is not None:
            start, token = match.start(), match.group()
            if token == "$":
                end = self._dollar_quote(start)
                if end is None:  # a parameter, or a $ inside an identifier
                    at = start + 1
                    continue
                self._mask(start, end, 1)
            elif token == "'":
                self._mask(start, self._string(start), 1)
            elif token == '"':
                self._identifier(start)
            else:
                end = (_line_comment_end if token == "--" else _block_comment_end)(sql, start)
                self._mask(start, end, 0)
            at = self.pos
        self.pieces.append(sql[self.pos :])
        return "".join(self.pieces)

    def _mask(self, start: int, end: int, keep: int) -> None:
        """Blank sql[start:end] except `keep` delimiter characters at each end."""
        sql = self.sql
        self.pieces.append(sql[self.pos : start + keep])
        self.pieces.append(_blank(sql[start + keep : end - keep]))
        self.pieces.append(sql[end - keep : end])
        self.pos = end

    def _starts_token(self, index: int) -> bool:
        """Whether a token starts at index: no identifier runs into it (numbers end there)."""
        sql, run = self.sql, index
        hint_at, hint_run = self._run_hint
        while run > self.pos and _is_ident_char(sql[run - 1]):
            run -= 1
            if run == hint_at:  # the run continues through a $ already walked back from
                run = max(hint_run, self.pos)
                break
        if sql[index : index + 1] == "$":
            self._run_hint = (index, run)
        return run == index or _NUMBER_OR_PARAMETER.fullmatch(sql, run, index) is not None

    def _string(self, start: int) -> int:
        sql = self.sql
        escapes = not self.standard_strings or (
            start - 1 >= self.pos and sql[start - 1] in "eE" and self._starts_token(start - 1))
        if escapes:
            return _escape_string_end(sql, start)
        return _quoted_end(sql, start, "'", "quoted string")

    def _dollar_quote(self, start: int) -> int | None:
        delimiter = _DOLLAR_DELIMITER.match(self.sql, start)
        if delimiter is None or not self._starts_token(start):
            return None
        close = self.sql.find(delimiter.group(), delimiter.end())
        if close == -1:
            raise UnterminatedSQLError("dollar-quoted string", start)
        return close + len(delimiter.group())

    def _identifier(self, start: int) -> None:
        sql = self.sql
        end = _quoted_end(sql, start, '"', "quoted identifier")
        spelled = sql[start + 1 : end - 1].replace('""', '"')
        unicode = start - 2 >= self.pos and sql[start - 2 : start] in ("U&", "u&")
        name = (_decode_unicode_name(spelled) if unicode and self._starts_token(start - 2)
                else spelled)
        if name is not None and _SIMPLE_NAME.fullmatch(name):
            self.names.append((start, end, name))
        self._mask(start, end, 1)


def lex(sql: str, standard_strings: bool = True) -> tuple[str, str]:
    """(masked, names): the masked SQL, and the same with "plain" quoted names spelled out.

    In the names view a quoted identifier that is a valid lower-case name, such as
    "set_config" or U&"set\\005fconfig", is written unquoted (right-aligned,
    space-padded) so that function checks see it; both views have the length of sql.
    """
    scanner = _Scanner(sql, standard_strings)
    masked = scanner.scan()
    if not scanner.names:
        return masked, masked
    pieces, pos = [], 0
    for start, end, name in scanner.names:
        pieces.append(masked[pos:start])
        pieces.append(name.rjust(end - start))
        pos = end
    pieces.append(masked[pos:])
    return masked, "".join(pieces)


_NUMBER = re.compile(r"(?<![\w$.])(?:0[xXoObB][0-9A-Fa-f_]+|(?:[0-9][0-9_]*(?:\.[0-9_]*)?"
                     r"|\.[0-9][0-9_]*)(?:[eE][+-]?[0-9]+)?)")
_STRING_PREFIXES = "eEbBxXnN"  # E'' B'' X'' N'' (U&'' is two characters)


class _Literals(_Scanner):
    """A scan that writes ``?`` for every literal (see ``literals_replaced``)."""

    def scan(self) -> str:
        super().scan()
        self.pieces[-1] = _NUMBER.sub("?", self.pieces[-1])  # (the plain text at the end)
        return "".join(self.pieces)

    def _mask(self, start: int, end: int, keep: int) -> None:
        self.plain_until(self.literal_start(start))
        literal = self.sql[start] in "'$"
        self.pieces.append("?" if literal else self.sql[start:end])  # a name or comment: kept
        self.pos = end

    def literal_start(self, quote: int) -> int:
        """Where the token at ``quote`` starts: a string's E, B, X, N or U&, if any."""
        sql = self.sql
        if sql[quote] != "'":
            return quote
        if quote - 1 >= self.pos and sql[quote - 1] in _STRING_PREFIXES and (
                self._starts_token(quote - 1)):
            return quote - 1
        if quote - 2 >= self.pos and sql[quote - 2 : quote] in ("U&", "u&") and (
                self._starts_token(quote - 2)):
            return quote - 2
        return quote

    def plain_until(self, end: int) -> None:
        """The SQL from the last token to ``end``, its numbers replaced."""
        self.pieces.append(_NUMBER.sub("?", self.sql[self.pos : end]))


def literals_replaced(sql: str) -> str:
    """``sql`` with ``?`` for each of its literals: strings ('', E'', U&'', B'', X''),
    dollar quotes and numbers; quoted names, comments and ``$n`` parameters are kept (what
    telemetry records of a statement without parameters). Whatever follows a literal that
    never ends is one ``?``."""
    scanner = _Literals(sql)
    try:
        return scanner.scan()
    except UnterminatedSQLError as exc:
        scanner.plain_until(scanner.literal_start(exc.offset))
        return "".join(scanner.pieces) + "?"


def mask_sql(sql: str, standard_strings: bool = True) -> str:
    """Blank the contents of literals, quoted identifiers, dollar quotes and comments.

    String literals ('', E'', U&'', B'', X''), quoted identifiers ("", U&"") and dollar
    quotes ($$ $$, $tag$ $tag$) keep their delimiters and get blank contents; comments
    (-- and nested /* */) become blanks. The result has the length of ``sql`` and keeps
    its line breaks. Raises UnterminatedSQLError (a ValueError) when one of these never
    ends, since the rest of the text could then not be told apart from SQL.
    ``standard_strings=False`` reads '' literals as the server does with
    standard_conforming_strings off (a backslash escapes the next character).
    """
    return _Scanner(sql, standard_strings).scan()


# -- patterns over masked SQL ------------------------------------------------------------

_LEADING_WORD = re.compile(f"[\\s(]*([{ID_START}][{ID_CHAR}]*)?", re.ASCII)
# A function call: its (possibly schema-less) name, then "(".
CALL = re.compile(f"(?<![{ID_CHAR}])([{ID_START}][{ID_CHAR}]*)\\s*\\(", re.ASCII)
# UPDATE or MERGE INTO pg_settings (SET in disguise).
SETTINGS_WRITE = re.compile(
    f"(?<![{ID_CHAR}])(?:update|merge\\s+into)(?:\\s+only)?\\s+"
    f"(?:pg_catalog\\s*\\.\\s*)?pg_settings(?![{ID_CHAR}])",
    re.ASCII | re.IGNORECASE,
)


def leading_word(masked: str) -> str | None:
    """The first word of a masked statement (after blanks and opening parentheses), or None
    when it does not start with one."""
    match = _LEADING_WORD.match(masked)
    return None if match is None else match.group(1)


def several_statements(masked: str) -> bool:
    """Whether masked SQL holds something after its first ';' (more than one statement)."""
    semicolon = masked.find(";")
    return semicolon != -1 and bool(masked[semicolon + 1 :].strip(WHITESPACE))
