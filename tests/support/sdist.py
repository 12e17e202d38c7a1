"""Source distributions of test suites (SQLAlchemy's, Django's): downloaded once into a cache."""

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


def unpacked_sdist(package: str, version: str, members: tuple[str, ...],
                   markers: tuple[str, ...]) -> Path:
    """The root of ``package`` ``version``'s source distribution with only its ``members``
    unpacked (paths under the root: a folder ends with "/"), fetched with pip from the
    package index the first time (``markers``, paths under the root, say it is there)."""
    root = cache_dir() / f"{package}-{version}"
    if all((root / marker).exists() for marker in markers):
        return root
    with tempfile.TemporaryDirectory(dir=cache_dir()) as scratch:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:",
             "--no-deps", f"{package}=={version}", "--dest", scratch],
            check=True, timeout=600)
        archive = next(Path(scratch).glob(f"{package}-*.tar.gz"))
        prefix = f"{package}-{version}/"
        with tarfile.open(archive) as tar:
            wanted = [m for m in tar.getmembers() if _wanted(m.name.removeprefix(prefix),
                                                             members)]
            tar.extractall(scratch, members=wanted, filter="data")
        if root.exists():  # an older cache without all of it
            shutil.rmtree(root)
        os.replace(Path(scratch) / f"{package}-{version}", root)
    return root


def _wanted(path: str, members: tuple[str, ...]) -> bool:
    return any(path.startswith(m) if m.endswith("/") else path == m for m in members)
