"""SQLAlchemy's source distribution for its test suites: downloaded once into a cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

CACHE_ENV = "PGMUX_CACHE_DIR"


def cache_dir() -> Path:
    """$PGMUX_CACHE_DIR, else ~/.cache/pgmux."""
    path = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "pgmux")
    path.mkdir(parents=True, exist_ok=True)
    return path


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
    distribution (their parent is returned), fetched with pip from the package index on
    first use."""
    root = cache_dir() / f"sqlalchemy-{version}"
    if all((root / name).exists() for name in SUITE_FILES):
        return root
    with tempfile.TemporaryDirectory(dir=cache_dir()) as scratch:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:",
             "--no-deps", f"sqlalchemy=={version}", "--dest", scratch],
            check=True, timeout=600)
        archive = next(Path(scratch).glob("sqlalchemy-*.tar.gz"))
        prefix = f"sqlalchemy-{version}/"
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers()
                       if m.name.removeprefix(prefix).startswith(SUITE_DIRS)
                       or m.name.removeprefix(prefix) in SUITE_FILES]
            tar.extractall(scratch, members=members, filter="data")
        if root.exists():  # an older cache without all of it
            shutil.rmtree(root)
        os.replace(Path(scratch) / f"sqlalchemy-{version}", root)
    return root
