"""Which implementation runs: the compiled extensions and control path, or pure Python.

pgmux's framing, row decoding and Bind building have a compiled twin (C extensions
built by ``setup.py`` when a compiler is there), and so has its control path: the modules
in ``COMPILED`` (the engine, the drivers, the pool) are compiled by Cython from their own
Python source into a twin extension ``_cy_<module>``, typed by the ``.pxd`` files beside
them (``_cy_<module>.pxd`` includes ``<module>.pxd``, which the other twins cimport). The pure-Python code is the reference and always
present; the compiled one is used only when every extension and every twin was built
from the sources next to it, so the choice is all or nothing and ``implementation`` says
which runs:

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

A twin cannot be imported here (it imports the layers it belongs to): its binary carries
its stamp as text (``STAMP`` and the SHA-256 of its module's source and of the ``.pxd``
files it depends on, ``twin_sources``), read from the file. A module in ``COMPILED`` ends with
``adopt(globals())``, which, when the compiled implementation runs, replaces what the
module defined with what its twin defined (as gevent's ``import_c_accel`` does), so the
rest of pgmux imports the same names either way.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import mmap
import os
import re
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["COMPILED", "EXTENSIONS", "adopt", "describe", "extension", "flag", "implementation",
           "reason", "twin_of", "twin_sources"]

EXTENSIONS = ("pgmux.protocol._cframing", "pgmux.protocol._cmessages", "pgmux.types._crows",
              "pgmux.types._cparams")
# The control path compiled from its own source (setup.py has the same list).
COMPILED = (
    "pgmux.engine.outcome",
    "pgmux.engine.result",
    "pgmux.engine.rowshape",
    "pgmux.engine.statements",
    "pgmux.engine.costs",
    "pgmux.engine.settings",
    "pgmux.engine.shapes",
    "pgmux.engine.exchanges",
    "pgmux.engine.units",
    "pgmux.engine.requests",
    "pgmux.engine.core",
    "pgmux.io.wire",
    "pgmux.io.pipeline",
    "pgmux.io.pinned",
    "pgmux.pool.counters",
    "pgmux.pool.slots",
    "pgmux.pool.dispatch",
    "pgmux.pool.router",
    "pgmux.multiplexed",
    "pgmux.pending",
    "pgmux.atomic",
    "pgmux.session",
    "pgmux.pool.pinned",
    "pgmux.transaction_control",
)
TWIN_PREFIX = "_cy_"  # pgmux/engine/core.py -> pgmux.engine._cy_core, typed by _cy_core.pxd
# What a .pxd depends on: the .pxd files it cimports from and those it includes.
_CIMPORT = re.compile(r"^from (pgmux\.[\w.]+) cimport", re.MULTILINE)
_INCLUDE = re.compile(r'^include "([\w.]+\.pxd)"', re.MULTILINE)
_CIMPORT_MODULE = re.compile(r"^from (pgmux[\w.]*) cimport (\w+)\b(?! *,)", re.MULTILINE)  # a module
STAMP = b"pgmux-source-sha256:"  # followed in a twin's binary by its sources' SHA-256
REBUILD = "rebuild with: pip install -e . (or python setup.py build_ext --inplace)"
_PACKAGE = Path(__file__).resolve().parent
_ROOT = _PACKAGE.parent  # the project root in a checkout


def flag(name: str) -> bool:
    """Whether environment variable ``name`` is set to something other than 0/false/no/off."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def twin_of(module: str) -> str:
    """The compiled twin of control-path module ``module``."""
    package, _, leaf = module.rpartition(".")
    return f"{package}.{TWIN_PREFIX}{leaf}"


def twin_sources(module: str) -> tuple[str, ...]:
    """What twin ``module`` is compiled from, from the project root: its module's source,
    its ``.pxd`` and those the ``.pxd`` files cimport, as far as they are present (setup.py
    stamps the twin with the same list)."""
    sources = [_path(module) + ".py"]
    todo = [_path(twin_of(module)) + ".pxd"]
    while todo:
        pxd = todo.pop()
        if pxd in sources or not (_ROOT / pxd).is_file():
            continue
        sources.append(pxd)
        text = (_ROOT / pxd).read_text()
        todo.extend(_path(name) + ".pxd" for name in _CIMPORT.findall(text))
        todo.extend(_path(f"{package}.{name}") + ".pxd"
                    for package, name in _CIMPORT_MODULE.findall(text))
        todo.extend(f"{os.path.dirname(pxd)}/{name}" for name in _INCLUDE.findall(text))
    return (sources[0], *sorted(sources[1:]))


def _path(module: str) -> str:
    return module.replace(".", "/")


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


def _binary(name: str) -> Path | None:
    """The file of extension ``name`` in the package, if built."""
    *packages, leaf = name.split(".")[1:]
    directory = _PACKAGE.joinpath(*packages)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = directory / (leaf + suffix)
        if path.is_file():
            return path
    return None


def _twin_problem(module: str) -> str | None:
    """Why the twin of ``module`` must not be used (not built, or stale), or None."""
    twin = twin_of(module)
    binary = _binary(twin)
    if binary is None:
        return f"{twin} is not built; {REBUILD}"
    try:
        with open(binary, "rb") as file, mmap.mmap(file.fileno(), 0,
                                                   access=mmap.ACCESS_READ) as data:
            at = data.find(STAMP)
            built = data[at + len(STAMP):at + len(STAMP) + 64].decode("ascii") if at >= 0 else ""
    except (OSError, ValueError) as exc:  # unreadable, or empty
        return f"{twin} cannot be read ({exc}); {REBUILD}"
    sources = twin_sources(module)
    now = _source_hash(sources)
    if now is not None and now != built:
        return (f"stale build: {', '.join(sources)} changed since {twin} was compiled; "
                f"{REBUILD}")
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
    for name in COMPILED:
        problem = _twin_problem(name)
        if problem is not None:
            if problem.startswith("stale"):
                warnings.warn(f"pgmux: {problem}; using the pure-Python implementation",
                              RuntimeWarning, stacklevel=2)
            return {}, problem
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


def adopt(namespace: dict[str, Any]) -> None:
    """(The last line of a module in ``COMPILED``) when the compiled implementation runs,
    replace the module's names with its twin's: its functions and classes, compiled from
    this same source. The module keeps its own name, file and spec; the twin, running the
    same line, does nothing."""
    name = namespace["__name__"]
    if not _modules or name not in COMPILED:
        return
    twin = twin_of(name)
    try:
        compiled = importlib.import_module(twin)
    except ImportError as exc:  # built and current, yet it does not load: a broken build
        raise ImportError(f"pgmux: {twin} failed to import ({exc}); {REBUILD}, or set "
                          "PGMUX_PURE_PYTHON=1") from exc
    own = {key: namespace[key] for key in _OWN if key in namespace}
    namespace.clear()
    namespace.update(compiled.__dict__)
    namespace.update(own)


_OWN = ("__name__", "__file__", "__cached__", "__spec__", "__loader__", "__package__",
        "__builtins__")
