"""The import graph of pgmux points down only, has no cycles, and no module imports or
touches another module's private names: parse every module and check each import and
attribute."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "pgmux"

# Which layer a pgmux module belongs to: first matching prefix wins; the package root
# (pgmux/__init__.py, the public names) is "root". Bottom to top.
LAYER_OF_PREFIX = [
    ("pgmux._native", "native"),
    ("pgmux._version", "native"),  # the version string: imports nothing, as _native
    ("pgmux.cache", "cache"),
    ("pgmux._sqlstate", "sqlstate"),
    ("pgmux.errors", "errors"),
    ("pgmux.telemetry", "telemetry"),
    ("pgmux.protocol", "protocol"),
    ("pgmux.types", "types"),
    ("pgmux.sql", "sql"),
    ("pgmux.guard", "guard"),
    ("pgmux.engine", "engine"),
    ("pgmux.io", "io"),
    ("pgmux.pool", "pool"),
    ("pgmux.transaction_control", "session"),
    ("pgmux.session_pipeline", "session"),
    ("pgmux.session", "session"),
    ("pgmux.pending", "client"),
    ("pgmux.multiplexed", "client"),
    ("pgmux.batch", "client"),
    ("pgmux.atomic", "client"),
    ("pgmux.client", "client"),
    ("pgmux.dbapi", "adapters"),
    ("pgmux.contrib", "adapters"),
    ("pgmux.psycopg2", "adapters"),
    ("pgmux.tooling", "tooling"),
    ("pgmux.__main__", "tooling"),
]
_BELOW_SESSION = frozenset(
    {"native", "cache", "sqlstate", "errors", "protocol", "types", "sql", "guard", "engine", "io",
     "pool"})
# Telemetry (OpenTelemetry's API, the slow-query log) sits just above the errors: what
# observes operations (sessions, the client, the adapters) may use it; it reads the layers
# above only through what they hand it (a client's stats()).
_OBSERVING = _BELOW_SESSION | {"telemetry"}
RUNTIME_LAYERS = _OBSERVING | {"session", "client", "adapters", "root"}
ALL_LAYERS = RUNTIME_LAYERS | {"tooling"}
# The pgmux layers each layer may import (its own included where it is a package).
# Nothing but tooling imports tooling: the runtime never loads benchmarks or test servers.
MAY_IMPORT = {
    "native": frozenset(),  # which implementation runs: compiled extensions or Python
    "cache": frozenset(),
    "sqlstate": frozenset(),
    "errors": frozenset({"sqlstate"}),
    "telemetry": frozenset({"errors", "telemetry"}),
    "protocol": frozenset({"native", "errors", "protocol"}),
    "types": frozenset({"native", "errors", "types"}),
    "sql": frozenset({"errors", "sql"}),
    "guard": frozenset({"errors", "sql"}),
    "engine": frozenset({"native", "errors", "protocol", "types", "sql", "guard", "engine"}),
    "io": frozenset(
        {"native", "sqlstate", "errors", "protocol", "types", "sql", "guard", "engine", "io"}),
    "pool": frozenset(
        {"native", "sqlstate", "errors", "protocol", "types", "sql", "guard", "engine", "io",
         "pool"}),
    "session": _OBSERVING | {"session"},
    "client": _OBSERVING | {"session", "client"},
    "adapters": _OBSERVING | {"session", "client", "adapters", "root"},
    "root": _OBSERVING | {"session", "client"},
    "tooling": ALL_LAYERS,
}
# pgmux.cache (the bounded-cache helper) is the bottom layer: every other layer may use it.
MAY_IMPORT = {layer: allowed | {"cache"} if layer != "cache" else allowed
              for layer, allowed in MAY_IMPORT.items()}
# Pure (sans-IO) layers: the standard library minus these, plus the listed third-party packages.
NO_IO = frozenset(
    {"socket", "ssl", "gevent", "select", "selectors", "threading", "asyncio", "subprocess"}
)
PURE_THIRD_PARTY = {
    "native": frozenset(),
    "cache": frozenset(),
    "sqlstate": frozenset(),
    "errors": frozenset(),
    "protocol": frozenset({"cryptography"}),
    "types": frozenset({"cryptography"}),
    "sql": frozenset(),
    "guard": frozenset(),
    "engine": frozenset(),
}
# Sans-IO modules inside an I/O layer: connection parameters are parsed, checked and
# modelled without sockets (the password file and PG* variables are plain reads).
PURE_MODULES = {
    "pgmux.io.dsn": frozenset(),
    "pgmux.io.conninfo_checks": frozenset(),
    "pgmux.io.conninfo": frozenset(),
}
STDLIB = frozenset(sys.stdlib_module_names)


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    module: str
    target: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.module} imports {self.target} ({self.reason})"


def layer_of(module: str) -> str:
    for prefix, layer in LAYER_OF_PREFIX:
        if module == prefix or module.startswith(prefix + "."):
            return layer
    return "root"


def module_name(path: Path) -> tuple[str, bool]:
    """Dotted name of a file under PACKAGE_DIR, and whether it is a package's __init__."""
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def package_modules() -> dict[str, tuple[Path, bool]]:
    return {module_name(p)[0]: (p, module_name(p)[1]) for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def _resolve_from(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def type_checking_only(tree: ast.AST) -> set[ast.AST]:
    """The nodes inside ``if TYPE_CHECKING:`` blocks: imports for annotations only."""
    inside: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
                "TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for statement in node.body:
                inside.update(ast.walk(statement))
    return inside


def collect_imports(
    tree: ast.AST, module: str, is_package: bool, known: set[str], *, runtime_only: bool = False
) -> list[tuple[int, str]]:
    """Every (line, imported module) in the tree, at any depth, relative imports resolved.

    ``from pkg import name`` counts as importing ``pkg.name`` when that is a known module.
    ``runtime_only`` leaves out the imports under ``if TYPE_CHECKING:``.
    """
    found: list[tuple[int, str]] = []
    skipped = type_checking_only(tree) if runtime_only else set()
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_from(node, module, is_package)
            for alias in node.names:
                candidate = f"{source}.{alias.name}"
                found.append((node.lineno, candidate if candidate in known else source))
    return sorted(found)


def judge(module: str, target: str) -> str | None:
    """Why ``module`` may not import ``target``, or None if it may."""
    layer = layer_of(module)
    top_name = target.split(".")[0]
    if top_name == "pgmux":
        wanted = layer_of(target)
        if wanted not in MAY_IMPORT[layer]:
            return f"{layer} may not import {wanted}"
        return None
    pure = PURE_THIRD_PARTY.get(layer, PURE_MODULES.get(module))
    if pure is None:
        return None
    what = layer if layer in PURE_THIRD_PARTY else module
    if top_name in NO_IO:
        return f"{what} is sans-IO"
    if top_name not in STDLIB and top_name not in pure:
        return f"{what} may use only the standard library"
    return None


def check_source(
    source: str, module: str, is_package: bool, known: set[str], path: str
) -> list[Violation]:
    tree = ast.parse(source, filename=path)
    violations = []
    for line, target in collect_imports(tree, module, is_package, known):
        reason = judge(module, target)
        if reason is not None:
            violations.append(Violation(path, line, module, target, reason))
    return violations


def check_tree() -> list[Violation]:
    modules = package_modules()
    known = set(modules)
    violations = []
    for module, (path, is_package) in modules.items():
        rel = str(path.relative_to(PACKAGE_DIR.parent))
        violations += check_source(path.read_text(), module, is_package, known, rel)
    return violations


def private_imports(tree: ast.AST, module: str, is_package: bool,
                    known: set[str]) -> list[tuple[int, str]]:
    """(line, "module.name") of every ``from pgmux... import _name`` of a name that is not a
    module: another module's private name."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = _resolve_from(node, module, is_package)
        if not source.startswith("pgmux"):
            continue
        for alias in node.names:
            if alias.name.startswith("_") and f"{source}.{alias.name}" not in known:
                found.append((node.lineno, f"{source}.{alias.name}"))
    return found


def import_graph(sources: dict[str, tuple[str, bool]] | None = None) -> dict[str, set[str]]:
    """pgmux module -> the pgmux modules it imports at run time: at the top, in a function
    (an import put off to dodge a cycle is still one) or through a package (importing
    ``a.b.c`` runs ``a/b/__init__.py`` first). A package counts as its __init__; imports
    for annotations only, under ``if TYPE_CHECKING:``, make no cycle. ``sources``: module ->
    (its text, whether it is a package), the real tree's by default."""
    if sources is None:
        sources = {module: (path.read_text(), is_package)
                   for module, (path, is_package) in package_modules().items()}
    known = set(sources)
    graph: dict[str, set[str]] = {}
    for module, (source, is_package) in sources.items():
        tree = ast.parse(source, filename=module)
        imports = collect_imports(tree, module, is_package, known, runtime_only=True)
        parts = module.split(".")
        own = {".".join(parts[:i]) for i in range(1, len(parts) + is_package)}
        targets = set()
        for _, target in imports:
            names = target.split(".")
            targets |= {".".join(names[:i]) for i in range(1, len(names) + 1)}
        graph[module] = {t for t in targets - own if t in known and t != module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (as a path that ends where it starts), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


# -- private attributes ---------------------------------------------------------------------


@dataclass(frozen=True)
class PrivateAccess:
    path: str
    line: int
    expression: str
    owners: tuple[str, ...]  # the pgmux modules that define the name

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.expression} (defined in {', '.join(self.owners)})"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_expression(node: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()``: the object's own members, whatever their module."""
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "super")


def _block_names(body: list[ast.stmt]) -> set[str]:
    """Names a module or class body binds: defs, classes, assignments, imports, __slots__
    entries (through if/try/with blocks, not into functions)."""
    names: set[str] = set()
    for statement in body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(statement.name)
        elif isinstance(statement, ast.ClassDef):
            names.add(statement.name)
            names |= _block_names(statement.body)
        elif isinstance(statement, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in statement.names}
        elif isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [
                statement.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
                if isinstance(target, ast.Name) and target.id == "__slots__":
                    names |= {e.value for e in ast.walk(statement.value)
                              if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                names |= _block_names(getattr(statement, field, []))
    return names


def private_names(tree: ast.Module) -> set[str]:
    """The underscore (not dunder) names a module defines: its functions, classes, module
    globals, class attributes and __slots__ entries, and every ``self._x`` / ``cls._x``
    it assigns."""
    names = _block_names(tree.body)
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler):
            names |= _block_names(node.body)
        if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                and _own_expression(node.value)):
            names.add(node.attr)
    return {name for name in names if _is_private(name)}


def private_accesses(sources: dict[str, str]) -> list[PrivateAccess]:
    """Every ``expr._x`` (read, written or deleted; ``expr`` not self, cls or super()) in
    the modules ``sources`` (path -> text) where ``_x`` is not defined in the same module
    but is defined in another of them: a reach into another module's private members.
    Names defined in no pgmux module (a library's) are not this check's business."""
    trees = {path: ast.parse(text, filename=path) for path, text in sources.items()}
    defined = {path: private_names(tree) for path, tree in trees.items()}
    owners: dict[str, set[str]] = {}
    for path, names in defined.items():
        for name in names:
            owners.setdefault(name, set()).add(path)
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and _is_private(node.attr)
                    and not _own_expression(node.value)
                    and node.attr not in defined[path] and node.attr in owners):
                found.append(PrivateAccess(path, node.lineno, ast.unparse(node),
                                           tuple(sorted(owners[node.attr]))))
    return sorted(found, key=lambda access: (access.path, access.line))


# -- the real tree --------------------------------------------------------------------------


def test_the_tree_is_checked():
    modules = package_modules()
    for expected in ("pgmux", "pgmux.errors", "pgmux.protocol.frontend", "pgmux.protocol.framing"):
        assert expected in modules
    framing = modules["pgmux.protocol.framing"][0]
    imports = {t for _, t in collect_imports(ast.parse(framing.read_text()), "x", False, set())}
    assert "pgmux.protocol.backend" in imports


def test_imports_point_down_only():
    violations = check_tree()
    assert not violations, "imports against the layering:\n" + "\n".join(map(str, violations))


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


# No module of pgmux is longer than this: split it by job (tooling included).
MAX_MODULE_LINES = 600


def test_no_module_is_longer_than_600_lines():
    found = []
    for path, _ in package_modules().values():
        rel = str(path.relative_to(PACKAGE_DIR.parent))
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{rel}: {lines} lines")
    assert not found, (f"modules over {MAX_MODULE_LINES} lines (split them by job):\n"
                       + "\n".join(found))


def test_no_module_imports_another_modules_private_names():
    modules = package_modules()
    known = set(modules)
    found = []
    for module, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        found += [f"{path.name}:{line}: {name}"
                  for line, name in private_imports(tree, module, is_package, known)]
    assert not found, "private names imported from another module:\n" + "\n".join(found)


def test_no_module_touches_another_modules_private_attributes():
    sources = {str(path.relative_to(PACKAGE_DIR.parent)): path.read_text()
               for path, _ in package_modules().values()}
    found = private_accesses(sources)
    assert not found, ("another module's private attributes used (give the member a public "
                       "name or a method):\n" + "\n".join(map(str, found)))


def test_importing_the_runtime_loads_no_tooling():
    code = ("import sys, pgmux, pgmux.dbapi, pgmux.contrib.sqlalchemy\n"
            "print(sorted(m for m in sys.modules if m.startswith('pgmux.tooling')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_the_engine_is_sans_io():
    source = "import gevent\nimport socket\nfrom pgmux.io import pipeline\n"
    assert offenders(source, "pgmux.engine.fake") == [
        (1, "gevent"), (2, "socket"), (3, "pgmux.io.pipeline")]
    allowed = ("from pgmux.protocol import frontend\nfrom pgmux.types import registry\n"
               "from pgmux import guard\nimport hashlib\n")
    assert offenders(allowed, "pgmux.engine.fake") == []
    assert offenders("from pgmux.engine import core\n", "pgmux.io.fake") == []


def test_cycle_and_private_name_checkers():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    sources = {
        "pgmux.client": ("from pgmux import atomic\n", False),
        "pgmux.atomic": ("def f():\n    from pgmux.client import Client\n", False),
    }
    assert find_cycle(import_graph(sources)) == ["pgmux.atomic", "pgmux.client", "pgmux.atomic"]
    sources["pgmux.atomic"] = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                               "    from pgmux.client import Client\n", False)
    assert find_cycle(import_graph(sources)) is None
    through_a_package = {
        "pgmux.telemetry": ("from pgmux.telemetry.observer import Observer\n", True),
        "pgmux.telemetry.observer": ("from pgmux.telemetry import names\n", False),
        "pgmux.telemetry.names": ("", False),
        "pgmux.client": ("from pgmux.telemetry.names import PINNED\n", False),
        "pgmux.session": ("import pgmux.client\n", False),
    }
    graph = import_graph(through_a_package)
    assert graph["pgmux.telemetry.observer"] == {"pgmux.telemetry.names"}  # (its own package)
    assert graph["pgmux.client"] == {"pgmux.telemetry", "pgmux.telemetry.names"}
    assert find_cycle(graph) is None
    through_a_package["pgmux.telemetry"] = ("from pgmux.session import Session\n", True)
    assert find_cycle(import_graph(through_a_package)) == [
        "pgmux.client", "pgmux.telemetry", "pgmux.session", "pgmux.client"]
    annotated = ast.parse("from typing import TYPE_CHECKING\nimport pgmux.errors\n"
                          "if TYPE_CHECKING:\n    from pgmux.io import pipeline\n")
    assert collect_imports(annotated, "pgmux.io.fake", False, KNOWN, runtime_only=True) == [
        (1, "typing"), (2, "pgmux.errors")]
    assert (4, "pgmux.io.pipeline") in collect_imports(annotated, "pgmux.io.fake", False, KNOWN)
    tree = ast.parse("from pgmux.io.pinned import _Expired, PinnedConnection\n"
                     "from pgmux import _sqlstate\n")
    assert private_imports(tree, "pgmux.io.fake", False, KNOWN | {"pgmux._sqlstate"}) == [
        (1, "pgmux.io.pinned._Expired")]


def test_private_access_checker():
    owner = ("class Conn:\n    __slots__ = ('_slot',)\n    _class_level = 1\n"
             "    def __init__(self):\n        self._state = 'new'\n"
             "    def _query(self):\n        return self._state\n"
             "_registry = {}\ndef _helper():\n    pass\n")
    user = ("import owner\nfrom gevent import hub\n"
            "def run(conn, cursor):\n"
            "    conn._query()\n"              # 4: another module's method
            "    conn._state = 'x'\n"          # 5: written, not only read
            "    owner._helper()\n"            # 6: a module's private function
            "    del conn._slot\n"             # 7: a __slots__ entry
            "    owner._registry.clear()\n"    # 8: a module global
            "    return conn._class_level\n"   # 9: a class attribute
            "class Cursor:\n"
            "    def __init__(self):\n        self._rows = []\n"
            "    def fetch(self, other):\n"
            "        self._query()\n"           # own member (a subclass may use it)
            "        super()._query()\n"        # the parent's, through super()
            "        other._rows.pop()\n"       # defined here too: this module's business
            "        hub._threadpool\n"         # a library's private: not checked
            "        return other.__class__\n") # a dunder is not private
    found = private_accesses({"owner.py": owner, "user.py": user})
    assert [(a.path, a.line, a.expression) for a in found] == [
        ("user.py", 4, "conn._query"), ("user.py", 5, "conn._state"),
        ("user.py", 6, "owner._helper"), ("user.py", 7, "conn._slot"),
        ("user.py", 8, "owner._registry"), ("user.py", 9, "conn._class_level")]
    assert str(found[0]) == "user.py:4: conn._query (defined in owner.py)"


# -- the checker itself ---------------------------------------------------------------------

KNOWN = {
    "pgmux.session",
    "pgmux.dbapi",
    "pgmux.tooling",
    "pgmux.tooling.embedded",
    "pgmux",
    "pgmux.errors",
    "pgmux._sqlstate",
    "pgmux.cache",
    "pgmux.client",
    "pgmux.guard",
    "pgmux.sql",
    "pgmux.sql.scanner",
    "pgmux.protocol",
    "pgmux.protocol.frontend",
    "pgmux.types",
    "pgmux.types.registry",
    "pgmux.io",
    "pgmux.io.pipeline",
    "pgmux.pool",
    "pgmux.pool.router",
}


def offenders(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    found = check_source(source, module, is_package, KNOWN, "<synthetic>")
    return [(v.line, v.target) for v in found]


def test_checker_reports_upward_import_inside_a_function():
    source = "import struct\n\ndef f():\n    from pgmux.client import Client\n"
    assert offenders(source, "pgmux.protocol.fake") == [(4, "pgmux.client")]


def test_checker_reports_the_file_and_line_in_its_message():
    (violation,) = check_source(
        "\n\nimport socket\n", "pgmux.protocol.fake", False, KNOWN, "pgmux/protocol/fake.py"
    )
    assert str(violation).startswith("pgmux/protocol/fake.py:3: pgmux.protocol.fake imports socket")


def test_checker_resolves_relative_imports():
    assert offenders("from ..pool import router\n", "pgmux.io.fake") == [(1, "pgmux.pool.router")]
    assert offenders("from .. import client\n", "pgmux.io.fake") == [(1, "pgmux.client")]
    assert offenders("from . import pipeline\n", "pgmux.io.fake") == []
    package_init = "from . import frontend\nfrom .. import client\n"
    assert offenders(package_init, "pgmux.protocol", is_package=True) == [(2, "pgmux.client")]


def test_checker_pure_layers():
    source = "import gevent.socket\nimport numpy\nfrom pgmux.protocol import frontend\n"
    assert offenders(source, "pgmux.types.fake") == [
        (1, "gevent.socket"),
        (2, "numpy"),
        (3, "pgmux.protocol.frontend"),
    ]
    allowed = "import hashlib\nfrom cryptography import x509\nfrom pgmux.errors import Error\n"
    assert offenders(allowed, "pgmux.protocol.fake") == []
    assert offenders("import threading\nimport asyncio\n", "pgmux.protocol.fake") == [
        (1, "threading"),
        (2, "asyncio"),
    ]


def test_checker_protocol_and_types_do_not_import_each_other():
    assert offenders("from pgmux.types import registry\n", "pgmux.protocol.fake") == [
        (1, "pgmux.types.registry")
    ]
    assert offenders("import pgmux.protocol.frontend\n", "pgmux.types.fake") == [
        (1, "pgmux.protocol.frontend")
    ]


def test_checker_package_root_counts_as_top():
    assert offenders("from pgmux import Client\n", "pgmux.protocol.fake") == [(1, "pgmux")]
    assert offenders("from pgmux import errors\n", "pgmux.protocol.fake") == []


def test_checker_sans_io_modules_inside_io():
    source = "import os\nimport gevent\nfrom pgmux.io import passfile\nimport ssl\n"
    assert offenders(source, "pgmux.io.dsn") == [(2, "gevent"), (4, "ssl")]
    assert offenders(source, "pgmux.io.transport") == []


def test_checker_sql_scanner_and_guard():
    assert offenders("import re\nfrom pgmux.errors import Error\n", "pgmux.sql.fake") == []
    assert offenders("import gevent\nfrom pgmux import guard\n", "pgmux.sql.fake") == [
        (1, "gevent"), (2, "pgmux.guard")]
    assert offenders("from pgmux.sql import scanner\n", "pgmux.guard") == []
    for user in ("pgmux.engine.fake", "pgmux.io.fake", "pgmux.dbapi.fake"):
        assert offenders("from pgmux.sql import scanner\n", user) == [], user


def test_checker_guard_is_pure():
    assert offenders("import re\nfrom pgmux.errors import Error\n", "pgmux.guard") == []
    assert offenders("from pgmux.protocol import frontend\n", "pgmux.guard") == [
        (1, "pgmux.protocol.frontend")
    ]
    assert offenders("from cryptography import x509\n", "pgmux.guard") == [(1, "cryptography")]


def test_checker_the_cache_helper_is_the_bottom_layer():
    for user in ("pgmux.errors", "pgmux._sqlstate", "pgmux.protocol.fake", "pgmux.types.fake",
                 "pgmux.sql.fake", "pgmux.guard", "pgmux.engine.fake", "pgmux.io.fake",
                 "pgmux.pool.fake", "pgmux.client", "pgmux.dbapi.fake"):
        assert offenders("from pgmux.cache import put_bounded\n", user) == [], user
    assert offenders("from pgmux.errors import Error\nimport gevent\n", "pgmux.cache") == [
        (1, "pgmux.errors"), (2, "gevent")]


def test_checker_telemetry_layer():
    """Telemetry imports only the errors (and itself); observers above it may import it."""
    assert offenders("from pgmux.errors import Error\nfrom pgmux.telemetry import names\n",
                     "pgmux.telemetry.fake") == []
    assert offenders("from pgmux.io import pipeline\n", "pgmux.telemetry.fake") == [
        (1, "pgmux.io.pipeline")]
    for user in ("pgmux.session", "pgmux.client", "pgmux.dbapi.fake"):
        assert offenders("from pgmux.telemetry import observed\n", user) == [], user
    assert offenders("from pgmux.telemetry import observed\n", "pgmux.engine.fake") == [
        (1, "pgmux.telemetry")]


def test_checker_errors_and_sqlstate():
    assert offenders("from pgmux._sqlstate import CODE_NAMES\n", "pgmux.errors") == []
    assert offenders("from pgmux.protocol import frontend\n", "pgmux.errors") == [
        (1, "pgmux.protocol.frontend")
    ]
    assert offenders("from pgmux.errors import Error\n", "pgmux._sqlstate") == [(1, "pgmux.errors")]


def test_checker_io_pool_client_order():
    everything_below_io = (
        "import gevent\nfrom pgmux import errors\nfrom pgmux.protocol import frontend\n"
        "from pgmux.types import registry\nfrom pgmux import guard\n"
    )
    assert offenders(everything_below_io, "pgmux.io.fake") == []
    assert offenders("from pgmux.pool import router\n", "pgmux.io.fake") == [
        (1, "pgmux.pool.router")
    ]
    assert offenders("from pgmux.io import pipeline\n", "pgmux.pool.fake") == []
    assert offenders("import pgmux.client\n", "pgmux.pool.fake") == [(1, "pgmux.client")]
    anything = "from pgmux.pool import router\nfrom pgmux.io import pipeline\nimport pgmux.guard\n"
    assert offenders(anything, "pgmux.client") == []


def test_checker_upper_layers_and_tooling():
    assert offenders("from pgmux.client import Client\n", "pgmux.session") == [
        (1, "pgmux.client")]
    assert offenders("import pgmux.dbapi\n", "pgmux.client") == [(1, "pgmux.dbapi")]
    assert offenders("from pgmux.client import Client\nfrom pgmux import session\n",
                     "pgmux.dbapi.fake") == []
    for runtime in ("pgmux.client", "pgmux.dbapi.fake", "pgmux.contrib.fake", "pgmux",
                    "pgmux.io.fake", "pgmux.session"):
        assert offenders("from pgmux.tooling import embedded\n", runtime) == [
            (1, "pgmux.tooling.embedded")], runtime
    anything = "from pgmux.client import Client\nimport pgmux.dbapi\nimport gevent\n"
    assert offenders(anything, "pgmux.tooling.bench.fake") == []


# -- one place for each job ------------------------------------------------------------------

WIRE_FORMAT = frozenset({"pgmux.protocol.frontend", "pgmux.protocol.backend"})
FRAMING_CALLS = frozenset({"read_messages", "next_message", "recv_target", "advance"})


def _runtime_trees():
    for module, (path, is_package) in package_modules().items():
        if layer_of(module) != "tooling":
            yield module, path, is_package, ast.parse(path.read_text(), filename=str(path))


def test_only_the_engine_and_the_protocol_build_or_read_messages():
    """Requests come from the engine, connection set-up messages from protocol.startup:
    nothing above them imports the message encoders or decoders."""
    known = set(package_modules())
    found = [f"{module}:{line} imports {target}"
             for module, _, is_package, tree in _runtime_trees()
             if layer_of(module) not in ("protocol", "engine")
             for line, target in collect_imports(tree, module, is_package, known)
             if target in WIRE_FORMAT]
    assert not found, "\n".join(found)


def test_one_receive_loop():
    """Only io/wire.py drives the framing buffer: every reader receives through it."""
    found = [f"{module}:{node.lineno} calls .{node.attr}()"
             for module, _, _, tree in _runtime_trees()
             if module not in ("pgmux.io.wire", "pgmux.protocol.framing")
             for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and node.attr in FRAMING_CALLS]
    assert not found, "\n".join(found)


def test_the_decision_after_a_reply_is_the_engines():
    """Outside the engine: no check of an exchange's kind, no retry predicate."""
    banned = {"DescribeExchange", "is_stale_statement_error", "is_duplicate_statement_error"}
    found = [f"{module}:{node.lineno} uses {name}"
             for module, _, _, tree in _runtime_trees()
             if layer_of(module) != "engine"
             for node in ast.walk(tree)
             for name in [getattr(node, "id", None) or getattr(node, "attr", None)
                          or getattr(node, "name", None)]
             if name in banned]
    assert not found, "\n".join(found)
