"""``register()``: ``import psycopg2`` and its submodules resolve to ``pgmux.psycopg2``."""

from __future__ import annotations

import importlib
import sys
from typing import Any

SUBMODULES = ("extensions", "extras", "sql", "errors", "errorcodes", "pool", "tz",
              "_psycopg", "_range", "_json", "_ipaddress")


def register(**options: Any) -> None:
    """Make ``import psycopg2`` (and ``psycopg2.extras`` ...) give pgmux's drop-in, for
    code the application does not own; call it once at start-up, before anything imports
    psycopg2. Idempotent. ``options`` (pgmux.Client's: ``pipeline_size``, ...) apply to
    every connection made from then on. Raises ImportError if the real psycopg2 is
    imported already (objects made from it would not mix with these)."""
    from pgmux.psycopg2._connection import CLIENT_OPTIONS, defaults

    unknown = set(options) - CLIENT_OPTIONS
    if unknown:
        raise TypeError(f"register() got unknown pgmux options: {sorted(unknown)}")
    package = importlib.import_module("pgmux.psycopg2")
    present = sys.modules.get("psycopg2")
    if present is not None and present is not package:
        raise ImportError(
            "the real psycopg2 is imported already: call pgmux.psycopg2.register() at "
            "start-up, before anything imports psycopg2 (objects made by one module do not "
            "work with the other)")
    for name in SUBMODULES:
        real = sys.modules.get(f"psycopg2.{name}")
        module = importlib.import_module(f"pgmux.psycopg2.{name}")
        if real is not None and real is not module:
            raise ImportError(f"the real psycopg2.{name} is imported already: call "
                              "pgmux.psycopg2.register() before anything imports psycopg2")
        sys.modules[f"psycopg2.{name}"] = module
    sys.modules["psycopg2"] = package
    defaults.update(options)
