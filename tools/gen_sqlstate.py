"""Generate pgmux/_sqlstate.py from PostgreSQL's src/backend/utils/errcodes.txt.

Usage: python tools/gen_sqlstate.py ERRCODES_TXT --pg-version 18.6 [-o pgmux/_sqlstate.py]
e.g.   python tools/gen_sqlstate.py tools/errcodes.txt --pg-version 18.6 -o pgmux/_sqlstate.py

Naming rules (pgmux.errors builds one exception class per entry):

* One class per SQLSTATE class that has error ("E") codes; the success, warning and
  no-data classes (00, 01, 02) never arrive in an ErrorResponse and are left out.
  Its name is the CamelCase of the section title without the parenthetical
  ("Class 42 - Syntax Error or Access Rule Violation" -> SyntaxErrorOrAccessRuleViolation),
  except for CLASS_OVERRIDES (DB-API names, and a name that would shadow a builtin).
* One entry per error code with a condition name: the CamelCase of that name
  (unique_violation -> UniqueViolation), except for CODE_OVERRIDES. A class's generic "000" code takes its class's
  name, so pgmux.errors reuses the class for it. A condition name that an earlier class
  already used (e.g. modifying_sql_data_not_permitted in 2F and 38) is prefixed with its
  class's title minus a trailing "Exception"/"Error" (ExternalRoutineModifyingSqlData...).
* Generation fails if a name would shadow a builtin or a base class of pgmux.errors.
"""

from __future__ import annotations

import argparse
import builtins
import re
import sys
from dataclasses import dataclass, field

# SQLSTATE class -> exception class name, where the section title is not the name we want.
CLASS_OVERRIDES: dict[str, str] = {
    "22": "DataError",  # DB-API / psycopg convention
    "23": "IntegrityError",  # DB-API / psycopg convention
    "58": "ExternalSystemError",  # "System Error" would shadow the builtin SystemError
    "P0": "PlpgsqlError",  # as its condition name plpgsql_error, not "PL/pgSQL" -> PlPgsql
}

# SQLSTATE code -> exception class name, where the condition name's CamelCase is not usable.
CODE_OVERRIDES: dict[str, str] = {
    "42601": "SqlSyntaxError",  # syntax_error would shadow the builtin SyntaxError
}

# Classes pgmux.errors defines by hand; generated names must not replace them.
BASE_NAMES = frozenset(
    {
        "Error",
        "InterfaceError",
        "OperationalError",
        "ProtocolError",
        "NotDispatchedError",
        "IndeterminateResultError",
        "UnsafeMultiplexError",
        "QueryTimeout",
        "PoolTimeout",
        "PipelineAborted",
        "DatabaseError",
    }
)
RESERVED_NAMES = BASE_NAMES | frozenset(dir(builtins))

_SECTION = re.compile(r"^Section:\s+Class\s+(\w\w)\s+-\s+(.*)$")
_CODE = re.compile(r"^(\w{5})\s+([EWS])\s+(\w+)(?:\s+(\w+))?\s*$")
_PARENTHETICAL = re.compile(r"\([^)]*\)")


@dataclass
class Section:
    """One "Section: Class XX - Title" block and its (code, condition name) error entries."""

    class_code: str
    title: str
    codes: list[tuple[str, str]] = field(default_factory=list)


def parse(text: str) -> list[Section]:
    """The sections of errcodes.txt with their named error codes, in file order."""
    sections: list[Section] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        section = _SECTION.match(line)
        if section:
            sections.append(Section(section.group(1), section.group(2)))
            continue
        entry = _CODE.match(line)
        if entry is None:
            raise ValueError(f"unrecognised line in errcodes.txt: {raw!r}")
        code, kind, _macro, condition = entry.groups()
        if kind == "E" and condition and sections:
            if code[:2] != sections[-1].class_code:
                raise ValueError(f"{code} listed under class {sections[-1].class_code}")
            if all(code != seen for seen, _ in sections[-1].codes):
                sections[-1].codes.append((code, condition))
    return [s for s in sections if s.codes]


def camel(words: str) -> str:
    """CamelCase of words separated by anything but letters and digits."""
    return "".join(w[:1].upper() + w[1:].lower() for w in re.split(r"[^A-Za-z0-9]+", words) if w)


def class_name(section: Section) -> str:
    """The exception class name of a SQLSTATE class."""
    override = CLASS_OVERRIDES.get(section.class_code)
    return override or camel(_PARENTHETICAL.sub(" ", section.title))


def class_stem(section: Section) -> str:
    """The class title without a trailing "Exception"/"Error", to qualify repeated names."""
    return re.sub(r"(Exception|Error)$", "", camel(_PARENTHETICAL.sub(" ", section.title)))


def build(sections: list[Section]) -> tuple[dict[str, str], dict[str, str]]:
    """(CLASS_NAMES, CODE_NAMES), both sorted by code."""
    class_names = {s.class_code: class_name(s) for s in sections}
    taken = set(class_names.values())
    if len(taken) != len(class_names):
        raise ValueError("two SQLSTATE classes share a name")
    code_names: dict[str, str] = {}
    for section in sections:
        for code, condition in section.codes:
            if code.endswith("000"):
                code_names[code] = class_names[section.class_code]
                continue
            name = CODE_OVERRIDES.get(code) or camel(condition)
            if name in taken:
                name = class_stem(section) + name
            if name in taken:
                raise ValueError(f"{code}: name {name} is not unique")
            taken.add(name)
            code_names[code] = name
    clashes = taken & RESERVED_NAMES
    if clashes:
        raise ValueError(f"names would shadow builtins or pgmux.errors: {sorted(clashes)}")
    return dict(sorted(class_names.items())), dict(sorted(code_names.items()))


def _dict_text(name: str, table: dict[str, str]) -> str:
    rows = "".join(f'    "{key}": "{value}",\n' for key, value in table.items())
    return f"{name}: dict[str, str] = {{\n{rows}}}\n"


def render(class_names: dict[str, str], code_names: dict[str, str], pg_version: str) -> str:
    """The text of pgmux/_sqlstate.py."""
    return (
        f'"""SQLSTATE class and code names (generated by tools/gen_sqlstate.py from PostgreSQL '
        f'{pg_version} errcodes.txt; do not edit)."""\n\n'
        f'PG_VERSION = "{pg_version}"\n\n'
        "# SQLSTATE class (two characters) -> exception class name.\n"
        + _dict_text("CLASS_NAMES", class_names)
        + '\n# SQLSTATE code -> exception class name; a generic "000" code names its class.\n'
        + _dict_text("CODE_NAMES", code_names)
    )


def generate(errcodes_text: str, pg_version: str) -> str:
    """errcodes.txt contents -> _sqlstate.py contents."""
    return render(*build(parse(errcodes_text)), pg_version)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("errcodes", help="path to PostgreSQL's src/backend/utils/errcodes.txt")
    parser.add_argument("--pg-version", required=True, help="PostgreSQL version of that file")
    parser.add_argument("-o", "--output", help="write here instead of stdout")
    args = parser.parse_args(argv)
    with open(args.errcodes, encoding="utf-8") as f:
        text = generate(f.read(), args.pg_version)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
