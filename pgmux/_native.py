"""Which implementation of the inner loops runs: the compiled extensions or pure Python.

pgmux's framing, row decoding and Bind building have a compiled twin (C extensions
built by ``setup.py`` when a compiler is there). The pure-Python code is the reference
and always present; the compiled one is used only when every extension imports and was
built from the sources next to it, so the choice is all or nothing and
``implementation`` says which runs:

* ``PGMUX_PURE_PYTHON=1``: pure Python, whatever is built (the build skips them too);
* ``PGMUX_REQUIRE_COMPILED=1``: an extension that is missing, fails to import or is
  stale raises ``ImportError`` at import (CI sets it); ``PGMUX_PURE_PYTHON`` wins;
* otherwise: compiled when all extensions load and are current, else pure Python. A
  stale build (its sources changed since it was compiled, e.g. an edited checkout of an
  editable install) is not used, and a ``RuntimeWarning`` says so and how to rebuild.

Each extension carries the SHA-256 of the sources it was built from (``SOURCE_HASH``;
``SOURCES``: their paths from the project root, comma-separated); when those files are
present (a checkout), they are hashed again and compared. The extensions are loaded here,
from their files in the package, before any module that uses them is imported; each
layer's Python module gets its own through ``extension``.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from pathlib import Path
from types import ModuleType

__all__ = ["EXTENSIONS", "describe", "extension", "flag", "implementation", "reason"]

EXTENSIONS = ("pgmux.protocol._cframing", "pgmux.protocol._cmessages", "pgmux.types._crows",
              "pgmux.types._cparams")
REBUILD = "rebuild with: pip install -e . (or python setup.py build_ext --inplace)"
_PACKAGE = Path(__file__).resolve().parent
_ROOT = _PACKAGE.parent  # the project root in a checkout


def flag(name: str) -> bool:
    """Whether environment variable ``name`` is set to something other than 0/false/no/off."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def _source_hash(sources: tuple[str, ...]) -> str | None:
    """The SHA-256 of the listed source files as they are now; None if any is absent."""
    digest = hashlib.sha256()
    for relative in sources:
        path = _ROOT / relative
        if not path.is_file():
            return None
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _problem(module: ModuleType) -> str | None:
    """Why a loaded extension must not be used (it is stale), or None."""
    built = getattr(module, "SOURCE_HASH", "")
    sources = tuple(name for name in getattr(module, "SOURCES", "").split(",") if name)
    if not built or not sources:
        return None  # built without setup.py's stamp: nothing to compare
    now = _source_hash(sources)
    if now is not None and now != built:
        return (f"stale build: {', '.join(sources)} changed since {module.__name__} was "
                f"compiled; {REBUILD}")
    return None


def _import(name: str) -> ModuleType:
    """Load extension ``name`` from its file in the package, without importing its parent
    package first (whose modules ask this one which implementation runs)."""
    found = sys.modules.get(name)
    if found is not None:
        return found
    *packages, leaf = name.split(".")[1:]
    directory = _PACKAGE.joinpath(*packages)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        spec = importlib.util.spec_from_file_location(name, directory / (leaf + suffix))
        if spec is not None and spec.loader is not None and Path(spec.origin or "").is_file():
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[name] = module
            return module
    raise ImportError(f"No module named {name!r}")


def _load() -> tuple[dict[str, ModuleType], str]:
    """The extensions (all of them, or none) and, when none, why."""
    if flag("PGMUX_PURE_PYTHON"):
        return {}, "PGMUX_PURE_PYTHON is set"
    loaded: dict[str, ModuleType] = {}
    for name in EXTENSIONS:
        try:
            module = _import(name)
        except ImportError as exc:
            return {}, f"{name} is not built ({exc}); {REBUILD}"
        problem = _problem(module)
        if problem is not None:
            warnings.warn(f"pgmux: {problem}; using the pure-Python implementation",
                          RuntimeWarning, stacklevel=2)
            return {}, problem
        loaded[name] = module
    return loaded, ""


_modules, reason = _load()
implementation = "compiled" if _modules else "python"
if not _modules and flag("PGMUX_REQUIRE_COMPILED") and not flag("PGMUX_PURE_PYTHON"):
    raise ImportError(f"PGMUX_REQUIRE_COMPILED is set, but {reason}")


def extension(name: str) -> ModuleType | None:
    """The compiled extension ``name`` when the compiled implementation runs, else None."""
    return _modules.get(name)


def describe() -> str:
    """``implementation``, with the reason when it is the pure-Python one."""
    return implementation if not reason else f"{implementation} ({reason})"
