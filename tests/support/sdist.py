"""Source distributions of test suites (SQLAlchemy's, Django's): downloaded once into a cache."""

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


def unpacked_sdist(package: str, version: str, folder: str, marker: str) -> Path:
    """The root of ``package`` ``version``'s source distribution with only its ``folder``
    unpacked, fetched with pip from the package index the first time (``marker``, a path
    under the root, says it is there)."""
    root = cache_dir() / f"{package}-{version}"
    if (root / marker).exists():
        return root
    with tempfile.TemporaryDirectory(dir=cache_dir()) as scratch:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", package,
             "--no-deps", f"{package}=={version}", "--dest", scratch],
            check=True, timeout=600)
        archive = next(Path(scratch).glob(f"{package}-*.tar.gz"))
        prefix = f"{package}-{version}/{folder}/"
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
            tar.extractall(scratch, members=members, filter="data")
        os.replace(Path(scratch) / f"{package}-{version}", root)
    return root
