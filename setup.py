"""Build script: the package (metadata in setup.cfg) and its optional C extensions.

The extensions are the compiled twins of the inner loops (``pgmux._native`` explains
the choice at import). A failed or impossible build (no compiler, ``CC=false``) warns and
installs the pure-Python implementation, unless ``PGMUX_REQUIRE_COMPILED=1`` makes it an
error; ``PGMUX_PURE_PYTHON=1`` skips the build. Each extension is stamped with the SHA-256
of its sources, so a stale build is recognised at import.
"""

from __future__ import annotations

import hashlib
import os
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


def _flag(name: str) -> bool:  # as pgmux._native.flag, which setup.py cannot import
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


PURE, REQUIRED = _flag("PGMUX_PURE_PYTHON"), _flag("PGMUX_REQUIRE_COMPILED")


def _extension(name: str, sources: list[str]) -> Extension:
    digest = hashlib.sha256()
    for source in sources:
        digest.update((ROOT / source).read_bytes())
    return Extension(
        name, [s for s in sources if s.endswith(".c")], depends=sources[1:],
        define_macros=[("PGMUX_SOURCE_HASH", f'"{digest.hexdigest()}"'),
                       ("PGMUX_SOURCES", f'"{",".join(sources)}"')],
    )


class OptionalBuildExt(build_ext):
    """build_ext that turns a failed build into a warning (unless PGMUX_REQUIRE_COMPILED)."""

    failed: set[str] = set()

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler at all, a broken toolchain
            if REQUIRED:
                raise
            self._warn_failed("the C extensions", exc)

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

    def _warn_failed(self, what: str, exc: Exception) -> None:
        self.warn(f"pgmux: building {what} failed ({exc}); pgmux installs and runs in pure "
                  "Python (pgmux.implementation == 'python'). Set PGMUX_REQUIRE_COMPILED=1 "
                  "to make this an error.")


setup(
    ext_modules=[] if PURE else [_extension(n, s) for n, s in EXTENSIONS.items()],
    cmdclass={"build_ext": OptionalBuildExt},
)
