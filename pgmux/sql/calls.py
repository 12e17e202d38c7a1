"""Which functions a statement's text calls, and which built-ins leave nothing in the session."""

# A call is a name, schema-qualified or not, before "(" in the names view of ``lex``
# (``calls``), unless the text says it is something else:
# * a keyword that stands before "(" without calling anything (IN, CAST, VARCHAR(10), OVER,
#   FILTER, ...: ``NOT_FUNCTIONS``), unqualified;
# * a name after AS or "::" (an alias's column list, a type's modifier: AS v(a), ::t(3)),
#   or after INTO, TABLE, REFERENCES or COPY (a relation's column list);
# * ON CONFLICT (...), MERGE's THEN INSERT (...), UPDATE t SET (a, b) = ...,
#   CHARACTER VARYING(n).
# Anything else counts as a call, so that none is missed: a column list these rules do not
# know (WITH c (a) AS ..., FROM t x(a), CREATE INDEX ON t (a)) is a call of an unknown
# function. A quoted name that is not a plain lower-case one cannot be spelled: its call is
# reported with the name None.

from __future__ import annotations

import re

from pgmux.sql.keywords import RESERVED_KEYWORDS
from pgmux.sql.scanner import ID_CHAR, ID_START, WHITESPACE

# Unreserved keywords that stand before "(" in a statement without calling anything.
SYNTAX_WORDS = frozenset({
    "filter", "over", "within", "sets", "rows", "range", "groups", "cube", "rollup",
    "ordinality", "materialized", "by", "zone", "first", "escape", "operator"})
NOT_FUNCTIONS = RESERVED_KEYWORDS | SYNTAX_WORDS
SEQUENCE_FUNCTIONS = frozenset({"nextval", "currval", "setval", "lastval"})
_NOT_CALLED_AFTER = frozenset({"as", "::", "into", "table", "references", "copy"})
_VARYING_AFTER = frozenset({"character", "char", "bit", "national"})

# Built-in functions (pg_catalog's) known to leave nothing in the session that outlives
# the transaction: what ORMs and applications call. Any other function's call, a user
# function's above all, may (set_config, a session advisory lock, a temporary table inside
# it), so it counts as session state for the pinned reset (``session_scope.residue``).
SESSION_FREE = frozenset({
    # aggregates and window functions
    "count", "sum", "avg", "min", "max", "array_agg", "string_agg", "json_agg", "jsonb_agg",
    "json_object_agg", "jsonb_object_agg", "bool_and", "bool_or", "every", "bit_and",
    "bit_or", "bit_xor", "stddev", "stddev_pop", "stddev_samp", "variance", "var_pop",
    "var_samp", "corr", "covar_pop", "covar_samp", "percentile_cont", "percentile_disc",
    "mode", "any_value", "range_agg", "xmlagg", "row_number", "rank", "dense_rank",
    "percent_rank", "cume_dist", "ntile", "lag", "lead", "first_value", "last_value",
    "nth_value",
    # strings
    "length", "char_length", "character_length", "octet_length", "bit_length", "lower",
    "upper", "initcap", "concat", "concat_ws", "substr", "strpos", "replace", "translate",
    "btrim", "ltrim", "rtrim", "lpad", "rpad", "repeat", "reverse", "split_part",
    "starts_with", "format", "quote_ident", "quote_literal", "quote_nullable",
    "regexp_replace", "regexp_match", "regexp_matches", "regexp_split_to_array",
    "regexp_split_to_table", "regexp_like", "regexp_count", "regexp_instr", "regexp_substr",
    "string_to_array", "string_to_table", "array_to_string", "ascii", "chr", "md5",
    "sha224", "sha256", "sha384", "sha512", "encode", "decode", "convert_from", "convert_to",
    "to_hex", "unistr", "casefold", "text",
    # numbers
    "abs", "ceil", "ceiling", "floor", "round", "trunc", "mod", "power", "pow", "sqrt",
    "cbrt", "exp", "ln", "log", "log10", "sign", "div", "gcd", "lcm", "pi", "degrees",
    "radians", "sin", "cos", "tan", "cot", "asin", "acos", "atan", "atan2", "width_bucket",
    "scale", "random", "random_normal", "int2", "int4", "int8", "float4", "float8", "bool",
    # time
    "now", "transaction_timestamp", "statement_timestamp", "clock_timestamp", "timeofday",
    "date_trunc", "date_part", "date_bin", "age", "make_date", "make_time",
    "make_timestamp", "make_timestamptz", "make_interval", "justify_days", "justify_hours",
    "justify_interval", "isfinite", "timezone", "to_timestamp", "to_date", "to_char",
    "to_number", "date", "timestamptz",
    # JSON
    "to_json", "to_jsonb", "array_to_json", "row_to_json", "json_build_array",
    "jsonb_build_array", "json_build_object", "jsonb_build_object", "json_object",
    "jsonb_object", "json_array_length", "jsonb_array_length", "json_each", "jsonb_each",
    "json_each_text", "jsonb_each_text", "json_extract_path", "jsonb_extract_path",
    "json_extract_path_text", "jsonb_extract_path_text", "json_object_keys",
    "jsonb_object_keys", "json_array_elements", "jsonb_array_elements",
    "json_array_elements_text", "jsonb_array_elements_text", "json_typeof", "jsonb_typeof",
    "json_strip_nulls", "jsonb_strip_nulls", "jsonb_set", "jsonb_set_lax", "jsonb_insert",
    "jsonb_pretty", "jsonb_path_exists", "jsonb_path_match", "jsonb_path_query",
    "jsonb_path_query_array", "jsonb_path_query_first", "json_populate_record",
    "jsonb_populate_record", "json_to_record", "jsonb_to_record", "json_to_recordset",
    "jsonb_to_recordset",
    # arrays, ranges, sets
    "array_length", "array_lower", "array_upper", "array_ndims", "array_dims",
    "array_position", "array_positions", "array_remove", "array_replace", "array_append",
    "array_prepend", "array_cat", "array_fill", "array_sample", "array_shuffle",
    "cardinality", "trim_array", "unnest", "generate_series", "generate_subscripts",
    "isempty", "lower_inc", "upper_inc", "lower_inf", "upper_inf", "range_merge",
    "int4range", "int8range", "numrange", "tsrange", "tstzrange", "daterange",
    "num_nulls", "num_nonnulls", "bernoulli", "system",
    # full text search
    "to_tsvector", "to_tsquery", "plainto_tsquery", "phraseto_tsquery",
    "websearch_to_tsquery", "ts_rank", "ts_rank_cd", "ts_headline", "setweight",
    # identifiers and the transaction (its id, snapshot, notifications, locks to its end)
    "gen_random_uuid", "uuidv4", "uuidv7", "uuid_extract_timestamp",
    "uuid_extract_version", "txid_current", "txid_current_if_assigned",
    "pg_current_xact_id", "pg_current_xact_id_if_assigned", "pg_xact_status",
    "pg_current_snapshot", "txid_current_snapshot", "pg_export_snapshot", "pg_notify",
    "pg_advisory_xact_lock", "pg_advisory_xact_lock_shared", "pg_try_advisory_xact_lock",
    "pg_try_advisory_xact_lock_shared", "pg_sleep", "pg_sleep_for",
    # the catalog and the server (reads)
    "version", "current_database", "current_setting", "pg_backend_pid", "pg_typeof",
    "format_type", "pg_get_expr", "pg_get_constraintdef", "pg_get_indexdef",
    "pg_get_viewdef", "pg_get_functiondef", "pg_get_triggerdef", "pg_get_serial_sequence",
    "pg_get_userbyid", "pg_table_is_visible", "pg_type_is_visible", "pg_encoding_to_char",
    "obj_description", "col_description", "shobj_description", "has_table_privilege",
    "has_schema_privilege", "has_column_privilege", "has_database_privilege",
    "has_function_privilege", "has_sequence_privilege", "pg_has_role", "to_regclass",
    "to_regtype", "to_regproc", "to_regprocedure", "to_regnamespace", "to_regrole",
    "pg_relation_size", "pg_total_relation_size", "pg_table_size", "pg_indexes_size",
    "pg_database_size", "pg_size_pretty", "pg_column_size", "pg_is_in_recovery",
    "pg_current_wal_lsn", "pg_current_wal_insert_lsn", "pg_current_wal_flush_lsn",
    "pg_last_wal_replay_lsn", "pg_last_wal_receive_lsn", "pg_wal_lsn_diff",
    "pg_postmaster_start_time", "pg_listening_channels", "pg_input_is_valid",
    "pg_cancel_backend", "pg_terminate_backend",
})

_PART = f'(?:[{ID_START}][{ID_CHAR}]*|"[^"]*")'  # a name, or a quoted one left blank
_CALL_SITE = re.compile(
    f'(?<![{ID_CHAR}"])((?:{_PART}\\s*\\.\\s*)*)({_PART})\\s*\\(', re.ASCII)
_DOT = re.compile(r"\s*\.\s*")

Call = tuple[str | None, str | None]  # (schema or None, lower-case name or None: unknown)


def calls(names: str) -> list[Call]:
    """The function calls in a statement's names view (``lex``), in order; the schema is
    None for an unqualified name, and '"' for one that cannot be spelled."""
    found: list[Call] = []
    for match in _CALL_SITE.finditer(names):
        qualifier, part = match.group(1), match.group(2)
        previous = _previous(names, match.start())
        if previous in _NOT_CALLED_AFTER:
            continue
        name = None if part[0] == '"' else part.lower()
        schema = None
        if qualifier:
            schema = _DOT.split(qualifier.strip(WHITESPACE))[-2]
            schema = '"' if schema[0] == '"' else schema.lower()
        elif name in NOT_FUNCTIONS or _syntax(name, previous):
            continue
        found.append((schema, name))
    return found


def _syntax(name: str | None, previous: str) -> bool:
    """Whether an unreserved word before "(" is syntax where it stands."""
    if name == "conflict":
        return previous == "on"
    if name == "insert":
        return previous == "then"
    if name == "varying":
        return previous in _VARYING_AFTER
    if name == "set":  # UPDATE t SET (a, b) = ..., after the relation, its alias or UPDATE
        return previous == '"' or (_is_word(previous) and previous not in RESERVED_KEYWORDS)
    if name == "repeatable":  # TABLESAMPLE m (n) REPEATABLE (seed)
        return previous == ")"
    return False


def _is_word(token: str) -> bool:
    return token[:1].isalpha() or token[:1] == "_" or token[:1] >= "\x80"


def _in_name(char: str) -> bool:
    return char.isascii() and (char.isalnum() or char in "_$") or char >= "\x80"


def _previous(names: str, end: int) -> str:
    """The token before ``end``: a lower-case word, "::", or one character ('' at the start)."""
    at = end - 1
    while at >= 0 and names[at] in WHITESPACE:
        at -= 1
    if at < 0:
        return ""
    char = names[at]
    if char == ":" and at > 0 and names[at - 1] == ":":
        return "::"
    if not _in_name(char):
        return char
    start = at
    while start > 0 and _in_name(names[start - 1]):
        start -= 1
    return names[start : at + 1].lower()
