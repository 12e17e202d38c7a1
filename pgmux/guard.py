"""The multiplexing guard: reject SQL that would change session state on a shared connection."""

# Theory of operation
# -------------------
# A pipeline connection runs many callers' statements, each as its own
# Parse/Bind/Execute/Sync unit and so its own implicit transaction. Whatever a
# statement leaves behind in the *session* (settings, prepared statements,
# cursors, temp tables, session advisory locks, sequence state, LISTEN, large
# object descriptors ...) would leak into the next caller's work, so such SQL
# must go through db.session() instead.
#
# mask_sql() runs one left-to-right scan that blanks the insides of string
# literals, quoted identifiers, dollar quotes and comments (same length, line
# breaks kept), so the checks below are a handful of regular expressions over
# text in which every remaining word, ';' and '(' is real SQL. Verdicts are
# cached per SQL string: a repeated statement costs one dict lookup.
#
# Decisions:
# * Allowed leading keywords: SELECT INSERT UPDATE DELETE MERGE VALUES WITH
#   TABLE ("TABLE t" is "SELECT * FROM t"). Everything else (SET, BEGIN, SHOW,
#   EXPLAIN, DO, CALL, COPY, LISTEN, PREPARE, DECLARE, CREATE ...) is rejected.
# * Row locks (FOR UPDATE), data-modifying WITH, pg_advisory_xact_lock() and
#   the other _xact_ locks are fine: the unit is its own transaction.
# * Any SELECT ... INTO is rejected: it creates a table.
# * UPDATE/MERGE on pg_settings is rejected: it is SET in disguise.
# * Function names are matched whatever their schema (myschema.set_config(...)
#   is rejected too). Unquoted names fold to lower case; a quoted name is
#   resolved case-sensitively as the server does: "set_config"(...) IS
#   pg_catalog.set_config and is rejected, "SET_CONFIG"(...) is another function.
# * standard_conforming_strings: as the server reports it. When it is off, a
#   backslash escapes the next character in a plain '...' literal too (so '\''
#   is one literal, not two), and the masking follows.
# * Large objects: the descriptor functions (lo_open, loread, ...) are rejected,
#   a descriptor is useless to the next unit; the self-contained ones
#   (lo_create, lo_import, lo_export, lo_unlink, lo_get, lo_put, lo_from_bytea)
#   are allowed.
# * The guard catches mistakes, it is not a security boundary: it cannot see
#   functions called from views, triggers, defaults or other functions.

from __future__ import annotations

import re
from collections.abc import Callable

from pgmux.errors import InterfaceError, UnsafeMultiplexError

__all__ = [
    "MODES",
    "SESSION_FUNCTIONS",
    "STRICT_FUNCTIONS",
    "Guard",
    "UnterminatedSQLError",
    "mask_sql",
    "reject_reason",
    "session_scope",
]

MODES = ("default", "strict", "off")

ALLOWED_LEADING_KEYWORDS = frozenset(
    {"SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "VALUES", "WITH", "TABLE"}
)

# Functions whose effect outlives the statement's transaction.
SESSION_FUNCTIONS = frozenset(
    {
        "set_config",
        "setseed",
        "currval",
        "lastval",
        "pg_advisory_lock",
        "pg_advisory_lock_shared",
        "pg_try_advisory_lock",
        "pg_try_advisory_lock_shared",
        "pg_advisory_unlock",
        "pg_advisory_unlock_shared",
        "pg_advisory_unlock_all",
        "pg_replication_origin_session_setup",
        "pg_replication_origin_session_reset",
        "dblink_connect",
        "dblink_connect_u",
        "dblink_disconnect",
        "dblink_open",
        "dblink_close",
        "lo_open",
        "lo_close",
        "loread",
        "lowrite",
        "lo_lseek",
        "lo_lseek64",
        "lo_tell",
        "lo_tell64",
        "lo_truncate",
        "lo_truncate64",
    }
)

# Rejected by the strict guard only: they touch session state nothing else can see
# on the multiplexed path (nextval/setval feed lastval/currval; an exported
# snapshot dies with the unit's transaction).
STRICT_FUNCTIONS = frozenset({"nextval", "setval", "pg_export_snapshot"})

_MODE_FUNCTIONS = {
    "default": SESSION_FUNCTIONS,
    "strict": SESSION_FUNCTIONS | STRICT_FUNCTIONS,
    "off": frozenset(),
}

_CACHE_SIZE = 4096
MAX_PARAMETERS = 65535  # the protocol's limit: what a statement of unknown text may take
_MAX_CACHED_SQL = 65536  # longer statements are checked every time, not kept alive
_WHITESPACE = " \t\n\r\f\v"  # the server's whitespace

# Identifier characters as the server's lexer sees them (used with re.ASCII).
_ID_START = "A-Za-z_\x80-\U0010ffff"
_ID_CHAR = "\\w$\x80-\U0010ffff"


class UnterminatedSQLError(ValueError):
    """A string literal, quoted identifier, dollar quote or comment never ends."""


# ---------------------------------------------------------------------------
# Masking


_SPECIAL = re.compile(r"""['"$]|--|/\*""")
_DOLLAR_DELIMITER = re.compile(f"\\$(?:[{_ID_START}][\\w\x80-\U0010ffff]*)?\\$", re.ASCII)
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
            raise UnterminatedSQLError(f"unterminated {what} at offset {start}")
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
    raise UnterminatedSQLError(f"unterminated E'' string at offset {start}")


def _block_comment_end(sql: str, start: int) -> int:
    """End of a /* */ comment; they nest."""
    depth, at = 1, start + 2
    while (edge := _BLOCK_COMMENT_EDGE.search(sql, at)) is not None:
        depth += 1 if edge.group() == "/*" else -1
        at = edge.end()
        if depth == 0:
            return at
    raise UnterminatedSQLError(f"unterminated /* comment at offset {start}")


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
            raise UnterminatedSQLError(f"unterminated dollar-quoted string at offset {start}")
        return close + len(delimiter.group())

    def _identifier(self, start: int) -> None:
        sql = self.sql
        end = _quoted_end(sql, start, '"', "quoted identifier")
        name: str | None = sql[start + 1 : end - 1].replace('""', '"')
        unicode = start - 2 >= self.pos and sql[start - 2 : start] in ("U&", "u&")
        if unicode and self._starts_token(start - 2):
            name = _decode_unicode_name(name)
        if name is not None and _SIMPLE_NAME.fullmatch(name):
            self.names.append((start, end, name))
        self._mask(start, end, 1)


def _lex(sql: str, standard_strings: bool = True) -> tuple[str, str]:
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


_PLACEHOLDER = re.compile(f"(?<![{_ID_CHAR}])\\$([0-9]+)", re.ASCII)


def highest_placeholder(sql: str) -> int | None:
    """The largest $n outside literals, identifiers and comments (0: none; None: unknown,
    because a literal or comment never ends and the server should say so)."""
    try:
        masked = mask_sql(sql)
    except ValueError:
        return None
    return max((int(n) for n in _PLACEHOLDER.findall(masked)), default=0)


_placeholders: dict[str, int | None] = {}  # SQL -> its highest $n (bounded, see below)
_scripts: dict[str, bool] = {}  # SQL -> whether it holds several statements (bounded)


def is_script(sql: str, standard_strings: bool = True) -> bool:
    """Whether ``sql`` holds more than one statement (only a simple Query can run those).

    SQL whose literal or comment never ends counts as one statement: the server says why.
    """
    if standard_strings:
        found = _scripts.get(sql)
        if found is not None:
            return found
    try:
        masked = mask_sql(sql, standard_strings)
    except ValueError:
        script = False
    else:
        script = _multiple_statements(masked, masked, frozenset()) is not None
    if standard_strings and len(sql) <= _MAX_CACHED_SQL:
        if len(_scripts) >= _CACHE_SIZE:
            _scripts.clear()
        _scripts[sql] = script
    return script


def parameters_allowed(sql: str) -> int:
    """How many parameters ``sql`` can take: its highest $n (any number when unknown)."""
    try:
        highest = _placeholders[sql]
    except KeyError:
        highest = highest_placeholder(sql)
        if len(_placeholders) >= _CACHE_SIZE:
            _placeholders.clear()
        if len(sql) <= _MAX_CACHED_SQL:
            _placeholders[sql] = highest
    return MAX_PARAMETERS if highest is None else highest


def check_parameter_count(sql: str, given: int) -> None:
    """Refuse surplus parameters before sending: the server accepts typed parameters a
    statement never uses, so the caller's mistake would pass unnoticed."""
    highest = parameters_allowed(sql)
    if given > highest:
        raise InterfaceError(f"{given} parameters given, but the statement uses {highest} "
                             f"(${highest} is the highest placeholder)")


# ---------------------------------------------------------------------------
# Checks: each takes (masked, names, functions) and returns a reason or None.

_LEADING_KEYWORD = re.compile(f"[\\s(]*([{_ID_START}][{_ID_CHAR}]*)?", re.ASCII)
_CALL = re.compile(f"(?<![{_ID_CHAR}])([{_ID_START}][{_ID_CHAR}]*)\\s*\\(", re.ASCII)
_INTO = re.compile(
    f"(?<![{_ID_CHAR}])(?:(insert|merge)\\s+)?into(?![{_ID_CHAR}])", re.ASCII | re.IGNORECASE
)
_SETTINGS_WRITE = re.compile(
    f"(?<![{_ID_CHAR}])(?:update|merge\\s+into)(?:\\s+only)?\\s+"
    f"(?:pg_catalog\\s*\\.\\s*)?pg_settings(?![{_ID_CHAR}])",
    re.ASCII | re.IGNORECASE,
)

_Check = Callable[[str, str, frozenset], "str | None"]


def _empty(masked: str, names: str, functions: frozenset) -> str | None:
    if not masked.strip(_WHITESPACE + ";"):
        return "empty statement"
    return None


def _multiple_statements(masked: str, names: str, functions: frozenset) -> str | None:
    semicolon = masked.find(";")
    if semicolon != -1 and masked[semicolon + 1 :].strip(_WHITESPACE):
        return "multiple statements; use db.session() or separate calls"
    return None


def _leading_keyword(masked: str, names: str, functions: frozenset) -> str | None:
    word = _LEADING_KEYWORD.match(masked).group(1)
    if word is None:
        return "statement does not start with a keyword; use db.session()"
    keyword = word.upper()
    if keyword not in ALLOWED_LEADING_KEYWORDS:
        return f"leading keyword {keyword[:40]}; use db.session()"
    return None


def _select_into(masked: str, names: str, functions: frozenset) -> str | None:
    for match in _INTO.finditer(masked):
        if match.group(1) is None:
            return "SELECT INTO creates a table; use db.session()"
    return None


def _settings_write(masked: str, names: str, functions: frozenset) -> str | None:
    if _SETTINGS_WRITE.search(names):
        return "writing pg_settings changes session settings; use db.session()"
    return None


def _session_functions(masked: str, names: str, functions: frozenset) -> str | None:
    for match in _CALL.finditer(names):
        name = match.group(1).lower()
        if name in functions:
            if name in STRICT_FUNCTIONS:
                return f"{name}() is rejected by the strict guard; use db.session()"
            return f"session-level function {name}(); use db.session()"
    return None


_CHECKS: tuple[_Check, ...] = (
    _empty,
    _multiple_statements,
    _leading_keyword,
    _select_into,
    _settings_write,
    _session_functions,
)


def reject_reason(sql: str, mode: str = "default", standard_strings: bool = True) -> str | None:
    """Why ``sql`` may not run on the multiplexed path under ``mode``, or None (uncached)."""
    if mode not in _MODE_FUNCTIONS:
        raise ValueError(f"guard mode must be one of {', '.join(MODES)}; got {mode!r}")
    functions = _MODE_FUNCTIONS[mode]
    if mode == "off":
        return None
    try:
        masked, names = _lex(sql, standard_strings)
    except UnterminatedSQLError as exc:
        return f"{exc}; the statement cannot be checked"
    for check in _CHECKS:
        reason = check(masked, names, functions)
        if reason is not None:
            return reason
    return None


class Guard:
    """Rejects session-mutating SQL before it reaches a pipeline connection.

    ``mode`` is "default", "strict" (also nextval, setval, pg_export_snapshot) or
    "off" (never rejects). Verdicts, rejections included, are cached per SQL string
    in a dict of at most ``cache_size`` entries that is cleared when full.
    """

    __slots__ = ("mode", "misses", "_cache", "_backslash_cache", "_cache_size", "_enabled")

    def __init__(self, mode: str = "default", cache_size: int = _CACHE_SIZE):
        if mode not in MODES:
            raise ValueError(f"guard mode must be one of {', '.join(MODES)}; got {mode!r}")
        if cache_size < 1:
            raise ValueError("cache_size must be at least 1")
        self.mode = mode
        self.misses = 0  # statements judged (cache misses)
        self._cache: dict[str, str | None] = {}
        self._backslash_cache: dict[str, str | None] = {}  # standard_conforming_strings off
        self._cache_size = cache_size
        self._enabled = mode != "off"

    def __repr__(self) -> str:
        return f"Guard(mode={self.mode!r})"

    def check(self, sql: str, standard_strings: bool = True) -> None:
        """Raise UnsafeMultiplexError if ``sql`` may not be multiplexed.

        ``standard_strings``: the server's standard_conforming_strings is on.
        """
        if not self._enabled:
            return
        cache = self._cache if standard_strings else self._backslash_cache
        try:
            reason = cache[sql]
        except KeyError:
            reason = self._judge(sql, standard_strings, cache)
        if reason is not None:
            raise UnsafeMultiplexError(reason)

    def _judge(self, sql: str, standard_strings: bool, cache: dict[str, str | None]) -> str | None:
        if not isinstance(sql, str):
            raise TypeError(f"SQL must be str, not {type(sql).__name__}")
        self.misses += 1
        reason = reject_reason(sql, self.mode, standard_strings)
        if len(sql) <= _MAX_CACHED_SQL:
            if len(cache) >= self._cache_size:
                cache.clear()
            cache[sql] = reason
        return reason


# ---------------------------------------------------------------------------
# Session scope: which SQL leaves state behind that outlives its transaction.
#
# pgmux.dbapi pins a DB-API connection to one server connection from the first such
# statement until close(), so the state survives transactions as on a real connection.
# A false positive only costs multiplexing for that connection; a false negative loses
# the state at the next commit, so the rules err on the side of "session-scoped":
# * SET and RESET, except SET LOCAL / SET TRANSACTION / SET CONSTRAINTS (transaction
#   scoped); LISTEN, PREPARE, DISCARD, LOAD; DECLARE ... WITH HOLD;
# * temporary objects: CREATE [GLOBAL|LOCAL] TEMP[ORARY] ..., SELECT ... INTO TEMP,
#   anything naming the pg_temp schema;
# * SESSION_SCOPE_FUNCTIONS, set_config() whatever its is_local argument, and writing
#   pg_settings (SET in disguise).
# Each statement of a script is judged. What runs inside functions, DO blocks or
# procedures cannot be seen.

SESSION_SCOPE_KEYWORDS = frozenset({"SET", "RESET", "LISTEN", "PREPARE", "DISCARD", "LOAD"})
SESSION_SCOPE_FUNCTIONS = frozenset(
    {
        "set_config",
        "setseed",
        "pg_advisory_lock",
        "pg_advisory_lock_shared",
        "pg_try_advisory_lock",
        "pg_try_advisory_lock_shared",
        "pg_replication_origin_session_setup",
        "dblink_connect",
        "dblink_connect_u",
    }
)
# SET LOCAL/TRANSACTION/CONSTRAINTS, PREPARE TRANSACTION (two-phase): nothing outlives them
_SCOPED_SET = re.compile(r"\s*(?:set\s+(?:local|transaction|constraints)|prepare\s+transaction)"
                         r"(?![\w$])", re.ASCII | re.IGNORECASE)
_WITH_HOLD = re.compile(r"(?<![\w$])with\s+hold(?![\w$])", re.ASCII | re.IGNORECASE)
_TEMPORARY = re.compile(
    r"(?<![\w$])(?:create(?:\s+or\s+replace)?(?:\s+(?:global|local))?|into)"
    r"\s+temp(?:orary)?(?![\w$])|(?<![\w$])pg_temp\s*\.",
    re.ASCII | re.IGNORECASE,
)
_session_scopes: dict[str, str | None] = {}


def _statement_scope(statement: str, names: str) -> str | None:
    word = _LEADING_KEYWORD.match(statement).group(1)
    keyword = (word or "").upper()
    if keyword in SESSION_SCOPE_KEYWORDS:
        if keyword in ("SET", "PREPARE") and _SCOPED_SET.match(statement):
            return None
        return f"{keyword} outlives the transaction"
    if keyword == "DECLARE" and _WITH_HOLD.search(statement):
        return "a cursor WITH HOLD outlives the transaction"
    if _TEMPORARY.search(names):
        return "a temporary object lives as long as the session"
    if _SETTINGS_WRITE.search(names):
        return "writing pg_settings is SET"
    for match in _CALL.finditer(names):
        name = match.group(1).lower()
        if name in SESSION_SCOPE_FUNCTIONS:
            return f"{name}() has a session-level effect"
    return None


def _judge_scope(sql: str) -> str | None:
    try:
        masked, names = _lex(sql)
    except UnterminatedSQLError:
        return None  # the server refuses it: nothing is left behind
    start = 0
    while start <= len(masked):
        end = masked.find(";", start)
        end = len(masked) if end == -1 else end
        reason = _statement_scope(masked[start:end], names[start:end])
        if reason is not None:
            return reason
        start = end + 1
    return None


def session_scope(sql: str) -> str | None:
    """Why ``sql`` leaves session state that outlives its transaction, or None (cached)."""
    try:
        return _session_scopes[sql]
    except KeyError:
        pass
    reason = _judge_scope(sql)
    if len(sql) <= _MAX_CACHED_SQL:
        if len(_session_scopes) >= _CACHE_SIZE:
            _session_scopes.clear()
        _session_scopes[sql] = reason
    return reason
