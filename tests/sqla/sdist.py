"""SQLAlchemy's source distribution for its dialect suite: downloaded once into a cache."""

from __future__ import annotations

from pathlib import Path

from support.sdist import CACHE_ENV, cache_dir, unpacked_sdist

__all__ = ["CACHE_ENV", "cache_dir", "sqlalchemy_sdist"]


def sqlalchemy_sdist(version: str) -> Path:
    """The unpacked test/ folder of SQLAlchemy ``version``'s source distribution (its
    parent is returned), fetched with pip from the package index on first use."""
    return unpacked_sdist("sqlalchemy", version, "test", "test/requirements.py")
