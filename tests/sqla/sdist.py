"""SQLAlchemy's source distribution for its dialect suite: downloaded once into a cache."""

from __future__ import annotations

import os
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


def sqlalchemy_sdist(version: str) -> Path:
    """The unpacked test/ folder of SQLAlchemy ``version``'s source distribution (its
    parent is returned), fetched with pip from the package index on first use."""
    root = cache_dir() / f"sqlalchemy-{version}"
    if (root / "test" / "requirements.py").exists():
        return root
    with tempfile.TemporaryDirectory(dir=cache_dir()) as scratch:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", "sqlalchemy",
             "--no-deps", f"sqlalchemy=={version}", "--dest", scratch],
            check=True, timeout=600)
        archive = next(Path(scratch).glob("sqlalchemy-*.tar.gz"))
        prefix = f"sqlalchemy-{version}/test/"
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
            tar.extractall(scratch, members=members, filter="data")
        os.replace(Path(scratch) / f"sqlalchemy-{version}", root)
    return root
