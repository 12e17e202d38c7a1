"""SQLAlchemy's source distribution for its test suites: downloaded once into a cache."""

from __future__ import annotations

from pathlib import Path

from support.sdist import CACHE_ENV, cache_dir, unpacked_sdist

__all__ = ["CACHE_ENV", "cache_dir", "sqlalchemy_sdist"]

# What SQLAlchemy's own test run needs besides test/: its configuration (the [sqla_testing]
# and [tool.pytest.ini_options] sections), its pytest plugin, which test/conftest.py
# loads by file name from lib/ (the installed sqlalchemy is the one tested), and the
# examples test/base/test_examples.py runs.
SUITE_DIRS = ("test/", "lib/sqlalchemy/testing/plugin/", "examples/")
SUITE_FILES = ("setup.cfg", "pyproject.toml", "test/requirements.py",
               "lib/sqlalchemy/testing/plugin/bootstrap.py",
               "lib/sqlalchemy/testing/plugin/plugin_base.py",
               "lib/sqlalchemy/testing/plugin/pytestplugin.py", "examples/__init__.py")


def sqlalchemy_sdist(version: str) -> Path:
    """The unpacked ``SUITE_DIRS`` and ``SUITE_FILES`` of SQLAlchemy ``version``'s source
    distribution (their parent is returned), fetched with pip on first use."""
    return unpacked_sdist("sqlalchemy", version, SUITE_DIRS + SUITE_FILES, SUITE_FILES)
