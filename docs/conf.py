"""Sphinx configuration of pgmux's documentation site: Markdown pages (MyST), furo, autodoc."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath(".."))
# autodoc imports pgmux.contrib.locust (Locust would monkey-patch the build on import) and
# the Django backend (Django's modules need settings).
os.environ.setdefault("LOCUST_SKIP_MONKEY_PATCH", "1")
# The reference is read from the Python source: a compiled twin's signatures name their
# annotations' types without their modules (which then match several classes).
os.environ.setdefault("PGMUX_PURE_PYTHON", "1")

import django  # noqa: E402
from django.conf import settings  # noqa: E402

if not settings.configured:
    settings.configure()
    django.setup()

from pgmux import __version__  # noqa: E402

project = "pgmux"
author = "the pgmux authors"
copyright = "pgmux's authors"
release = __version__
version = ".".join(__version__.split(".")[:2])

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
# docs/bench/ holds the benchmark runs' raw output and plots, linked from benchmarks.md.
exclude_patterns = ["_build", "bench/**"]

# Markdown: headings up to ### get anchors (links such as guide/atomic.md#retries),
# ::: fences for admonitions, definition lists.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# Docstrings are reStructuredText prose (not Google or NumPy sections, so no napoleon):
# ``code``, and a bare `name` renders as code too.
default_role = "code"
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# Subclasses of SQLAlchemy's and Django's classes: their docstrings, not pgmux's, are not shown.
autodoc_inherit_docstrings = False
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_mock_imports: list[str] = []

# No network in CI: no intersphinx, no remote images.
html_theme = "furo"
html_title = f"pgmux {release}"
html_static_path: list[str] = []
pygments_style = "sphinx"
pygments_dark_style = "monokai"


def _sqlstate_table(app):
    """The ``sqlstate-table`` directive: one row per SQLSTATE class and code pgmux names."""
    from docutils import nodes
    from sphinx.util.docutils import SphinxDirective

    from pgmux import _sqlstate, errors

    class SqlstateTable(SphinxDirective):
        def run(self):
            rows = [(code, name) for code, name in _sqlstate.CLASS_NAMES.items()]
            rows += [(code, name) for code, name in _sqlstate.CODE_NAMES.items()
                     if name not in _sqlstate.CLASS_NAMES.values()]
            rows.sort()
            table = nodes.table(classes=["sqlstate-table"])
            group = nodes.tgroup(cols=3)
            table += group
            for width in (10, 45, 45):
                group += nodes.colspec(colwidth=width)
            head = nodes.thead()
            group += head
            head += _row(nodes, ["SQLSTATE", "class", "a subclass of"])
            body = nodes.tbody()
            group += body
            for code, name in rows:
                cls = getattr(errors, name)
                body += _row(nodes, [code, f"pgmux.errors.{name}", cls.__mro__[1].__name__])
            return [table]

    app.add_directive("sqlstate-table", SqlstateTable)


def _psycopg2_sqlstate_table(app):
    """The ``psycopg2-sqlstate-table`` directive: per SQLSTATE class and code, its constants
    in pgmux.psycopg2.errorcodes and its exception class in pgmux.psycopg2.errors."""
    from docutils import nodes
    from sphinx.util.docutils import SphinxDirective

    from pgmux.psycopg2 import errorcodes, errors

    class Psycopg2SqlstateTable(SphinxDirective):
        def run(self):
            names: dict[str, list[str]] = {}
            for name in errorcodes.__all__:
                if name != "lookup":
                    names.setdefault(getattr(errorcodes, name), []).append(name)
            table = nodes.table(classes=["sqlstate-table"])
            group = nodes.tgroup(cols=4)
            table += group
            for width in (10, 40, 30, 20):
                group += nodes.colspec(colwidth=width)
            head = nodes.thead()
            group += head
            head += _row(nodes, ["SQLSTATE", "errorcodes", "errors", "a subclass of"])
            body = nodes.tbody()
            group += body
            for code in sorted(names):
                try:
                    cls = errors.lookup(code)
                except KeyError:
                    cls = None
                body += _row(nodes, [code, ", ".join(names[code]),
                                     "" if cls is None else cls.__name__,
                                     "" if cls is None else cls.__mro__[1].__name__])
            return [table]

    app.add_directive("psycopg2-sqlstate-table", Psycopg2SqlstateTable)


def _row(nodes, cells):
    row = nodes.row()
    for text in cells:
        entry = nodes.entry()
        entry += nodes.paragraph(text="", children=[nodes.literal(text=text)])
        row += entry
    return row


def setup(app):
    _sqlstate_table(app)
    _psycopg2_sqlstate_table(app)

