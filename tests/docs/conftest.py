"""Runs the code examples of README.md and docs/**/*.md (Sybil) against the suite's server.

Every document listed in ``documents.txt`` is collected here, one test per example, with
node ids such as ``docs/guide/atomic.md::line:12,column:1``. A document's examples share
one namespace and run in order, with:

* ``dsn``: the superuser's DSN on a database of the document's own, made afresh;
* ``db``: a started ``pgmux.Client(dsn)``, closed after the document;
* ``pgmux``, imported.

Python blocks (fenced ``python``, or hidden in ``<!-- invisible-code-block: python -->``)
run; ``<!-- skip: next "reason" -->`` skips the next example, with the reason shown in
the run's summary. Shell blocks are not run: each must be marked skipped with its reason.
Clients, DB-API connections and SQLAlchemy engines an example leaves in the namespace are
closed after the document.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest
from sybil import Example, Sybil
from sybil.integration.pytest import SybilFile
from sybil.parsers.myst import CodeBlockParser, PythonCodeBlockParser, SkipParser

import pgmux
import pgmux.dbapi

ROOT = Path(__file__).resolve().parents[2]
LIST = Path(__file__).with_name("documents.txt")
SHELLS = ("sh", "bash", "console", "shell")


def _shell_not_run(example: Example) -> None:
    raise AssertionError(
        f"{example.path}:{example.line}: shell examples are not run; mark this one "
        "<!-- skip: next \"why it cannot run here\" --> (or make it a Python example)")


def _close(value: object) -> None:
    """Close what an example left open: clients, DB-API connections, SQLAlchemy engines."""
    try:
        if isinstance(value, (pgmux.Client, pgmux.dbapi.Connection)):
            value.close()
        elif type(value).__name__ == "Engine" and hasattr(value, "dispose"):
            value.dispose()
    except pgmux.Error:
        pass


def _setup(namespace: dict) -> None:
    namespace["pgmux"] = pgmux  # as if the page's first example, often skipped, had run


def _teardown(namespace: dict) -> None:
    for value in list(namespace.values()):
        _close(value)


_PYTHON = [PythonCodeBlockParser(), SkipParser()]
FULL = Sybil(parsers=[*_PYTHON, *(CodeBlockParser(shell, _shell_not_run) for shell in SHELLS)],
             fixtures=["dsn", "db"], setup=_setup, teardown=_teardown)
PYTHON_ONLY = Sybil(parsers=_PYTHON, fixtures=["dsn", "db"], setup=_setup, teardown=_teardown)


def _patterns() -> tuple[list[str], list[str]]:
    """documents.txt: (every document's pattern, the python-only pages' patterns)."""
    every: list[str] = []
    python_only: list[str] = []
    target = every
    for line in LIST.read_text().splitlines():
        line = line.strip()
        if line == "[python only]":
            target = python_only
        elif line and not line.startswith("#"):
            target.append(line)
    return every, python_only


def documents() -> list[tuple[Path, Sybil]]:
    """Each document to run, with the Sybil that parses it."""
    every, python_only = _patterns()
    found: dict[Path, Sybil] = {}
    for pattern in every:
        for path in sorted(ROOT.glob(pattern)):
            relative = path.relative_to(ROOT).as_posix()
            only = any(fnmatch.fnmatch(relative, p) for p in python_only)
            found.setdefault(path, PYTHON_ONLY if only else FULL)
    return list(found.items())


class Documents(pytest.File):
    """documents.txt, collected: one SybilFile per document it names."""

    def collect(self):
        for path, sybil in documents():
            yield SybilFile.from_parent(self, path=path, sybils=[sybil])


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if file_path == LIST:
        return Documents.from_parent(parent, path=file_path)
    return None


def database_name(path: Path) -> str:
    """The database of a document's examples: docs/guide/atomic.md -> doc_docs_guide_atomic."""
    stem = path.relative_to(ROOT).with_suffix("").as_posix()
    return ("doc_" + re.sub(r"[^a-z0-9]+", "_", stem.lower()))[:63]


@pytest.fixture(scope="module")
def dsn(pg, request):
    """The superuser's DSN on a fresh database of the document's own (module scope: one
    document; a SybilItem's module is its document)."""
    name = database_name(Path(request.node.path))
    pg.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", dbname="postgres")
    pg.admin(f"CREATE DATABASE {name}", dbname="postgres")
    yield pg.dsn_for(dbname=name)
    pgmux.dbapi.close_shared_clients(name)


@pytest.fixture(scope="module")
def db(dsn):
    """A started client on the document's database."""
    client = pgmux.Client(dsn)
    client.start()
    yield client
    client.close()
