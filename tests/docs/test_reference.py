"""The API reference (docs/api/) documents every public name of pgmux, pgmux.dbapi,
pgmux.types, and pgmux.psycopg2 and its modules."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

import pgmux
import pgmux.dbapi
import pgmux.types

API = Path(__file__).resolve().parents[2] / "docs" / "api"
PSYCOPG2 = ["pgmux.psycopg2", *(f"pgmux.psycopg2.{name}" for name in (
    "extensions", "extras", "sql", "errors", "errorcodes", "pool", "tz"))]
MODULES: list[ModuleType] = [pgmux, pgmux.dbapi, pgmux.types,
                             *map(importlib.import_module, PSYCOPG2)]
# A directive that describes an object: MyST's ```{py:data} pgmux.implementation, or
# reStructuredText in an eval-rst block, .. autoclass:: pgmux.Client, .. py:exception:: x
DIRECTIVE = re.compile(r"^(?:```\{py:\w+\}|\.\. (?:auto|py:)\w+::)\s+([\w.]+)", re.MULTILINE)
# autodoc's whole module: every name of its __all__ but those it excludes (documented apart)
AUTOMODULE = re.compile(r"^\.\. automodule::\s+([\w.]+)\n((?:[ \t]+\S.*\n)*)", re.MULTILINE)
EXCLUDED = re.compile(r":exclude-members:((?:.*\n?)*)")
# the SQLSTATE listing: a class (errors) and constants (errorcodes) per SQLSTATE
SQLSTATE_TABLE = "```{psycopg2-sqlstate-table}"


def _public(module: ModuleType) -> list[str]:
    """A module's public names: its __all__ but the private ones some list (dunders kept)."""
    return [name for name in module.__all__
            if not name.startswith("_") or name.startswith("__")]


def _sqlstate_names() -> set[str]:
    from pgmux.psycopg2 import _sqlstates, errorcodes

    classes = {f"pgmux.psycopg2.errors.{name}" for _, _, name in _sqlstates.CODES if name}
    constants = {f"pgmux.psycopg2.errorcodes.{name}" for name in errorcodes.__all__
                 if name != "lookup"}
    return classes | constants


def documented() -> set[str]:
    names: set[str] = set()
    for page in API.glob("*.md"):
        text = page.read_text()
        names.update(DIRECTIVE.findall(text))
        for module, options in AUTOMODULE.findall(text):
            if ":members:" not in options:
                continue
            excluded = EXCLUDED.search(options)
            skip = set(re.findall(r"\w+", excluded.group(1))) if excluded else set()
            names.update(f"{module}.{name}" for name in _public(importlib.import_module(
                module)) if name not in skip)
        if SQLSTATE_TABLE in text:
            names.update(_sqlstate_names())
    return names


@pytest.mark.parametrize("module", MODULES, ids=lambda module: module.__name__)
def test_every_public_name_is_in_the_reference(module):
    found = documented()
    missing = sorted(f"{module.__name__}.{name}" for name in _public(module)
                     if f"{module.__name__}.{name}" not in found)
    assert not missing, f"not in docs/api/: {missing}"


def test_the_version_is_in_the_reference():
    assert {"pgmux.__version__", "pgmux.psycopg2.__version__"} <= documented()


def test_the_reference_names_only_what_exists():
    """A name documented but gone (renamed, removed) fails here as well as in the build."""
    modules = {module.__name__: module for module in MODULES}
    gone = []
    for name in documented():
        module, _, attribute = name.rpartition(".")
        target = modules.get(module)
        if target is not None and not hasattr(target, attribute):
            gone.append(name)
    assert not gone, gone
