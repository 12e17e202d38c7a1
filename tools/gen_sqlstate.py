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
* Each class gets its PEP 249 parent (CLASS_PARENTS) from DBAPI_PARENTS, as psycopg maps
  them; a class named like its parent (22 DataError, 23 IntegrityError, XX InternalError)
  is that PEP 249 class itself.
* Generation fails if a name would shadow a builtin or a base class of pgmux.errors, or if
  a SQLSTATE class has no PEP 249 parent.
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

# SQLSTATE class (or its first character) -> PEP 249 parent, as psycopg 3 maps them;
# a class listed nowhere here has DatabaseError as its parent.
DBAPI_PARENTS: dict[str, str] = {
    "08": "OperationalError",  # Connection Exception
    "0A": "NotSupportedError",  # Feature Not Supported
    "10": "ProgrammingError",  # XQuery Error
    "20": "ProgrammingError",  # Case Not Found
    "21": "ProgrammingError",  # Cardinality Violation
    "22": "DataError",  # Data Exception
    "23": "IntegrityError",  # Integrity Constraint Violation
    "24": "InternalError",  # Invalid Cursor State
    "25": "InternalError",  # Invalid Transaction State
    "26": "ProgrammingError",  # Invalid SQL Statement Name
    "27": "OperationalError",  # Triggered Data Change Violation
    "28": "OperationalError",  # Invalid Authorization Specification
    "2B": "InternalError",  # Dependent Privilege Descriptors Still Exist
    "2D": "InternalError",  # Invalid Transaction Termination
    "2F": "OperationalError",  # SQL Routine Exception
    "34": "ProgrammingError",  # Invalid Cursor Name
    "38": "OperationalError",  # External Routine Exception
    "39": "OperationalError",  # External Routine Invocation Exception
    "3B": "OperationalError",  # Savepoint Exception
    "3D": "ProgrammingError",  # Invalid Catalog Name
    "3F": "ProgrammingError",  # Invalid Schema Name
    "40": "OperationalError",  # Transaction Rollback
    "42": "ProgrammingError",  # Syntax Error or Access Rule Violation
    "44": "ProgrammingError",  # WITH CHECK OPTION Violation
    "53": "OperationalError",  # Insufficient Resources
    "54": "OperationalError",  # Program Limit Exceeded
    "55": "OperationalError",  # Object Not In Prerequisite State
    "57": "OperationalError",  # Operator Intervention
    "58": "OperationalError",  # System Error
    "F": "OperationalError",  # Configuration File Error
    "H": "OperationalError",  # Foreign Data Wrapper Error
    "P": "ProgrammingError",  # PL/pgSQL Error
    "X": "InternalError",  # Internal Error
}
DBAPI_NAMES = frozenset(
    {
        "DatabaseError",
        "DataError",
        "OperationalError",
        "IntegrityError",
        "InternalError",
        "ProgrammingError",
        "NotSupportedError",
    }
)

# Classes pgmux.errors defines by hand; generated names must not replace them (except a
# SQLSTATE class that is its own PEP 249 parent).
BASE_NAMES = DBAPI_NAMES | frozenset(
    {
        "Warning",
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


def dbapi_parent(class_code: str) -> str:
    """The PEP 249 class a SQLSTATE class derives from."""
    return DBAPI_PARENTS.get(class_code) or DBAPI_PARENTS.get(class_code[0]) or "DatabaseError"


def build(sections: list[Section]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(CLASS_NAMES, CODE_NAMES, CLASS_PARENTS), all sorted by code."""
    class_names = {s.class_code: class_name(s) for s in sections}
    parents = {code: dbapi_parent(code) for code in class_names}
    for code, name in class_names.items():
        if name in DBAPI_NAMES and name != parents[code]:
            raise ValueError(f"class {code} is named {name} but derives from {parents[code]}")
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
    own_parents = {name for code, name in class_names.items() if name == parents[code]}
    clashes = (taken - own_parents) & RESERVED_NAMES
    if clashes:
        raise ValueError(f"names would shadow builtins or pgmux.errors: {sorted(clashes)}")
    return (dict(sorted(class_names.items())), dict(sorted(code_names.items())),
            dict(sorted(parents.items())))


def _dict_text(name: str, table: dict[str, str]) -> str:
    rows = "".join(f'    "{key}": "{value}",\n' for key, value in table.items())
    return f"{name}: dict[str, str] = {{\n{rows}}}\n"


def render(class_names: dict[str, str], code_names: dict[str, str],
           parents: dict[str, str], pg_version: str) -> str:
    """The text of pgmux/_sqlstate.py."""
    return (
        f'"""SQLSTATE class and code names (generated by tools/gen_sqlstate.py from PostgreSQL '
        f'{pg_version} errcodes.txt; do not edit)."""\n\n'
        f'PG_VERSION = "{pg_version}"\n\n'
        "# SQLSTATE class (two characters) -> exception class name.\n"
        + _dict_text("CLASS_NAMES", class_names)
        + '\n# SQLSTATE code -> exception class name; a generic "000" code names its class.\n'
        + _dict_text("CODE_NAMES", code_names)
        + "\n# SQLSTATE class -> its PEP 249 parent (a class named like it is that class).\n"
        + _dict_text("CLASS_PARENTS", parents)
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
