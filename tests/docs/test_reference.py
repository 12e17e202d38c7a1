"""The API reference (docs/api/) documents every public name of pgmux, pgmux.dbapi and
pgmux.types."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import pgmux
import pgmux.dbapi
import pgmux.types

API = Path(__file__).resolve().parents[2] / "docs" / "api"
# A directive that describes an object: MyST's ```{py:data} pgmux.implementation, or
# autodoc's reStructuredText in an eval-rst block, .. autoclass:: pgmux.Client
DIRECTIVE = re.compile(r"^(?:```\{py:\w+\}|\.\. auto\w+::)\s+([\w.]+)", re.MULTILINE)


def documented() -> set[str]:
    names: set[str] = set()
    for page in API.glob("*.md"):
        names.update(DIRECTIVE.findall(page.read_text()))
    return names


@pytest.mark.parametrize("module", [pgmux, pgmux.dbapi, pgmux.types],
                         ids=lambda module: module.__name__)
def test_every_public_name_is_in_the_reference(module):
    missing = sorted(f"{module.__name__}.{name}" for name in module.__all__
                     if f"{module.__name__}.{name}" not in documented())
    assert not missing, f"not in docs/api/: {missing}"


def test_the_version_is_in_the_reference():
    assert "pgmux.__version__" in documented()


def test_the_reference_names_only_what_exists():
    """A name documented but gone (renamed, removed) fails here as well as in the build."""
    gone = []
    for name in documented():
        module, _, attribute = name.rpartition(".")
        target = {"pgmux": pgmux, "pgmux.dbapi": pgmux.dbapi, "pgmux.types": pgmux.types}.get(module)
        if target is not None and not hasattr(target, attribute):
            gone.append(name)
    assert not gone, gone
