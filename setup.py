"""Build script: the package (metadata in setup.cfg), its optional C extensions and the
compiled twins of its control path.

The extensions are the compiled twins of the inner loops; the control path's modules
(``COMPILED``) are compiled by Cython from their own Python source, typed by the ``.pxd``
beside each (``pgmux._native`` explains the choice at import). Cython is needed to build
only (pyproject.toml's build-system), never to run. A failed or impossible build (no
compiler, ``CC=false``, no Cython) warns and installs the pure-Python implementation,
unless ``PGMUX_REQUIRE_COMPILED=1`` makes it an error; ``PGMUX_PURE_PYTHON=1`` skips the
build. Each extension and twin is stamped with the SHA-256 of its sources, so a stale
build is recognised at import. The extensions build in parallel, one job per CPU.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
SHARED = ["pgmux/_cextension.h"]  # included by every extension
EXTENSIONS = {  # module -> sources (the .c compiled, then headers it includes)
    "pgmux.protocol._cframing": ["pgmux/protocol/_cframing.c", "pgmux/protocol/_crowrun.h",
                                 *SHARED],
    "pgmux.protocol._cmessages": ["pgmux/protocol/_cmessages.c", *SHARED],
    "pgmux.types._crows": ["pgmux/types/_crows.c", "pgmux/types/_cvalues.h",
                           "pgmux/types/_cjson.h", *SHARED],
    "pgmux.types._cparams": ["pgmux/types/_cparams.c", *SHARED],
}
# The control path compiled from its own source, as pgmux._native.COMPILED lists it: each
# pgmux/x/m.py becomes the extension pgmux.x._cy_m, typed by pgmux/x/_cy_m.pxd if present.
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
TWIN_PREFIX = "_cy_"
# What a .pxd depends on: the .pxd files it cimports from and those it includes.
_CIMPORT = re.compile(r"^from (pgmux\.[\w.]+) cimport", re.MULTILINE)
_INCLUDE = re.compile(r'^include "([\w.]+\.pxd)"', re.MULTILINE)
_CIMPORT_MODULE = re.compile(r"^from (pgmux[\w.]*) cimport (\w+)\b(?! *,)", re.MULTILINE)  # a module
# The stamp a twin carries in its binary, for pgmux._native to read (it cannot import a twin
# to ask: a twin imports the layers it belongs to): the SHA-256 of its sources, as text.
STAMP = ("/* pgmux: the sources of {name} (pgmux._native reads this) */\n"
         "#if defined(__GNUC__) || defined(__clang__)\n__attribute__((used))\n#endif\n"
         'static const char pgmux_source_stamp[] = "pgmux-source-sha256:{digest}";\n')
# Cython's directives: Python semantics everywhere (annotations never become C types: a
# ``float`` annotation must accept None; only the .pxd files type), Python 3.
DIRECTIVES = {
    "language_level": 3,
    "annotation_typing": False,
    "nonecheck": True,  # a field of None raises AttributeError, as in Python
    "binding": True,
    "embedsignature": False,
    "auto_pickle": False,  # no exchange, statement or driver is pickled: 13 % less C to compile
    "always_allow_keywords": True,
}


# The twins' optimisation: -O1 without debug information (a third of the compile time of -O3 -g,
# which counts 1.5 % fewer instructions; -O2: 1 % fewer, at 1.7 times -O1's compile time).
TWIN_CFLAGS = ["-O1", "-g0"]


def _flag(name: str) -> bool:  # as pgmux._native.flag, which setup.py cannot import
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


PURE, REQUIRED = _flag("PGMUX_PURE_PYTHON"), _flag("PGMUX_REQUIRE_COMPILED")


def _digest(sources: list[str]) -> str:
    digest = hashlib.sha256()
    for source in sources:
        digest.update((ROOT / source).read_bytes())
    return digest.hexdigest()


def _extension(name: str, sources: list[str]) -> Extension:
    return Extension(
        name, [s for s in sources if s.endswith(".c")], depends=sources[1:],
        define_macros=[("PGMUX_SOURCE_HASH", f'"{_digest(sources)}"'),
                       ("PGMUX_SOURCES", f'"{",".join(sources)}"')],
    )


def _path(module: str) -> str:
    return module.replace(".", "/")


def _twin_name(module: str) -> str:
    package, _, leaf = module.rpartition(".")
    return f"{package}.{TWIN_PREFIX}{leaf}"


def _twin_sources(module: str) -> list[str]:
    """``module``'s source, its .pxd and those they cimport (as pgmux._native.twin_sources)."""
    sources = [_path(module) + ".py"]
    todo = [_path(_twin_name(module)) + ".pxd"]
    while todo:
        pxd = todo.pop()
        if pxd in sources or not (ROOT / pxd).is_file():
            continue
        sources.append(pxd)
        text = (ROOT / pxd).read_text()
        todo.extend(_path(name) + ".pxd" for name in _CIMPORT.findall(text))
        todo.extend(_path(f"{package}.{name}") + ".pxd"
                    for package, name in _CIMPORT_MODULE.findall(text))
        todo.extend(f"{os.path.dirname(pxd)}/{name}" for name in _INCLUDE.findall(text))
    return [sources[0], *sorted(sources[1:])]


def _twin(module: str) -> Extension:
    """The extension compiling ``module``'s own source (Cython runs in ``build_ext``, which
    adds the stamp)."""
    sources = _twin_sources(module)
    return Extension(_twin_name(module), sources[:1], depends=sources[1:],
                     extra_compile_args=TWIN_CFLAGS)


class OptionalBuildExt(build_ext):
    """build_ext that turns a failed build into a warning (unless PGMUX_REQUIRE_COMPILED),
    probes the compiler once before anything is compiled, runs Cython on the twins, and
    builds in parallel."""

    failed: set[str] = set()

    def finalize_options(self) -> None:
        super().finalize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler at all, a broken toolchain
            if REQUIRED:
                raise
            self._warn_failed("the C extensions", exc)

    def build_extensions(self) -> None:
        problem = self._compiler_problem()
        if problem is not None:  # nothing can be built: say so once, cythonize nothing
            if REQUIRED:
                raise RuntimeError(problem)
            self.failed.update(ext.name for ext in self.extensions)
            for ext in self.extensions:
                self._warn_failed(ext.name, problem)
            return
        self._cythonize()
        super().build_extensions()

    def _compiler_problem(self) -> str | None:
        """Why nothing can be compiled here (CC=false, no compiler), or None."""
        with tempfile.TemporaryDirectory() as scratch:
            probe = os.path.join(scratch, "probe.c")
            with open(probe, "w") as file:
                file.write("int pgmux_probe(void) { return 0; }\n")
            try:
                self.compiler.compile([probe], output_dir=scratch)
            except Exception as exc:
                return f"the C compiler does not work ({exc})"
        return None

    def _cythonize(self) -> None:
        """Turn each twin's Python source into C (in the build directory), in parallel."""
        twins = [ext for ext in self.extensions if ext.sources[0].endswith(".py")]
        if not twins:
            return
        try:
            from Cython.Build import cythonize
        except ImportError as exc:
            if REQUIRED:
                raise
            for ext in twins:
                self.failed.add(ext.name)
                self._warn_failed(ext.name, f"Cython is not installed: {exc}")
            self.extensions = [ext for ext in self.extensions if ext not in twins]
            return
        built = cythonize(twins, compiler_directives=DIRECTIVES, quiet=True, force=self.force,
                          include_path=[str(ROOT)],
                          nthreads=self.parallel if self.parallel > 1 else 0,
                          build_dir=os.path.join(self.build_temp, "cython"))
        generated = {ext.name: ext.sources for ext in built}
        for ext in twins:  # (the extensions setuptools set up, their C in place of Python)
            stamp = self._stamp(ext)
            ext.sources = [*generated[ext.name], stamp]

    def _stamp(self, ext: Extension) -> str:
        """A C file holding ``ext``'s stamp, in the build directory (rewritten only when it
        changes, so that an unchanged twin is not built again)."""
        path = os.path.join(self.build_temp, "stamps", ext.name.replace(".", "_") + ".c")
        text = STAMP.format(name=ext.name, digest=_digest([*ext.sources[:1], *ext.depends]))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.exists(path) or Path(path).read_text() != text:
            Path(path).write_text(text)
        return path

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            if REQUIRED:
                raise
            self.failed.add(ext.name)
            self._warn_failed(ext.name, exc)

    def copy_extensions_to_source(self) -> None:
        """An in-place (editable) build copies only the extensions that were built."""
        every = self.extensions
        self.extensions = [ext for ext in every if ext.name not in self.failed]
        try:
            super().copy_extensions_to_source()
        finally:
            self.extensions = every

    def _warn_failed(self, what: str, exc: object) -> None:
        self.warn(f"pgmux: building {what} failed ({exc}); pgmux installs and runs in pure "
                  "Python (pgmux.implementation == 'python'). Set PGMUX_REQUIRE_COMPILED=1 "
                  "to make this an error.")


setup(
    ext_modules=[] if PURE else [*(_extension(n, s) for n, s in EXTENSIONS.items()),
                                 *(_twin(module) for module in COMPILED)],
    cmdclass={"build_ext": OptionalBuildExt},
)
