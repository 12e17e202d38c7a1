"""Which implementation runs, and the build: pgmux.implementation tells the truth (all or
nothing over the C extensions and the compiled twins of the control path), PGMUX_PURE_PYTHON
forces Python, PGMUX_REQUIRE_COMPILED makes a missing or stale build an error, a stale build
(a C source, a module's Python source or a .pxd changed since) is never used, and setup.py
without a compiler warns and installs pure Python (or fails, when the compiled build is
required)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pgmux
from pgmux import _native
from pgmux.engine import core
from pgmux.pool import dispatch
from pgmux.protocol import framing, frontend
from pgmux.types import rows

ROOT = Path(__file__).resolve().parents[1]
BINARIES = [*_native.EXTENSIONS, *(_native.twin_of(module) for module in _native.COMPILED)]
BUILT = all(list((ROOT / name.rpartition(".")[0].replace(".", "/")).glob(
    name.rpartition(".")[2] + ".*.so")) for name in BINARIES)
needs_build = pytest.mark.skipif(not BUILT, reason="no compiled build in this checkout")
REPORT = ("import pgmux, pgmux._native as n; from pgmux.protocol import framing; "
          "from pgmux.engine import core; "
          "print(pgmux.implementation, framing.FrameBuffer.__module__, core.Engine.__module__, "
          "n.reason, sep='|')")


def test_implementation_reports_what_runs():
    compiled = pgmux.implementation == "compiled"
    assert pgmux.implementation in ("compiled", "python")
    assert (framing.FrameBuffer is framing.CompiledFrameBuffer) is compiled
    assert (framing.FrameBuffer is framing.PythonFrameBuffer) is not compiled
    assert (frontend.bind_statement is frontend.python_bind_statement) is not compiled
    assert (rows.make_row_decoder is rows.compiled_row_decoder) is compiled
    assert (_native.reason == "") is compiled
    twin = "pgmux.engine._cy_core" if compiled else "pgmux.engine.core"
    assert core.Engine.__module__ == twin and pgmux.engine.Engine is core.Engine
    assert (type(dispatch.run).__name__ != "function") is compiled  # a compiled function


def test_a_compiled_module_keeps_its_own_name_and_the_names_of_its_source():
    """What adopt() leaves in a module of the control path: its own name, file and spec, and
    every name its source defines (the twin's, when compiled)."""
    assert core.__name__ == "pgmux.engine.core" and core.__file__.endswith("core.py")
    assert core.__spec__.name == "pgmux.engine.core"
    source = ast.parse((ROOT / "pgmux" / "engine" / "core.py").read_text())
    defined = {node.name for node in source.body
               if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    assert defined <= set(vars(core)) and "adopt" in vars(core)


def test_setup_compiles_the_modules_native_adopts():
    """setup.py (which cannot import pgmux) lists the same control-path modules."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    listed = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                  and any(getattr(t, "id", None) == "COMPILED" for t in node.targets))
    assert tuple(ast.literal_eval(listed)) == _native.COMPILED
    for module in _native.COMPILED:
        source = (ROOT / _native.twin_sources(module)[0]).read_text()
        assert source.rstrip().endswith("adopt(globals())  # the compiled twin's names, when "
                                        "it runs (pgmux._native)"), module


def copy_of_package(tmp_path: Path, keep_builds: bool) -> Path:
    """A checkout of just the package (its .py and .c sources, and the builds if kept)."""
    def ignore(directory: str, names: list[str]) -> list[str]:
        return [n for n in names if n == "__pycache__" or (n.endswith(".so") and not keep_builds)]

    shutil.copytree(ROOT / "pgmux", tmp_path / "pgmux", ignore=ignore)
    return tmp_path


def python(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if k not in ("PGMUX_PURE_PYTHON", "PGMUX_REQUIRE_COMPILED", "PYTHONPATH")}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          env={**base, "PYTHONPATH": str(cwd), **env}, timeout=60)


@needs_build
def test_a_checkout_with_its_builds_runs_compiled(tmp_path):
    done = python(REPORT, copy_of_package(tmp_path, keep_builds=True))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "compiled|pgmux.protocol._cframing|pgmux.engine._cy_core|"


@needs_build
@pytest.mark.parametrize("required", ["", "1"])
def test_pure_python_is_forced_whatever_is_built(tmp_path, required):
    done = python(REPORT, copy_of_package(tmp_path, keep_builds=True), PGMUX_PURE_PYTHON="1",
                  PGMUX_REQUIRE_COMPILED=required)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("python|pgmux.protocol.framing|pgmux.engine.core|"
                                   "PGMUX_PURE_PYTHON is set")


def test_no_build_runs_python_and_says_why(tmp_path):
    done = python(REPORT, copy_of_package(tmp_path, keep_builds=False))
    assert done.returncode == 0, done.stderr
    implementation, module, engine, reason = done.stdout.strip().split("|")
    assert (implementation, module, engine) == ("python", "pgmux.protocol.framing",
                                                "pgmux.engine.core")
    assert "pgmux.protocol._cframing is not built" in reason and "pip install -e ." in reason


def test_no_build_is_an_error_when_required(tmp_path):
    done = python(REPORT, copy_of_package(tmp_path, keep_builds=False),
                  PGMUX_REQUIRE_COMPILED="1")
    assert done.returncode == 1
    assert "ImportError: PGMUX_REQUIRE_COMPILED is set, but pgmux.protocol._cframing is not " \
        "built" in done.stderr


@needs_build
@pytest.mark.parametrize("source", ["protocol/_cframing.c", "types/_cvalues.h", "_cextension.h",
                                    "engine/core.py", "engine/exchanges.pxd",
                                    "pool/_cy_dispatch.pxd"])
def test_a_stale_build_is_said_and_not_used(tmp_path, source):
    """A C source, a compiled module's Python source or a .pxd edited after the build: the
    whole build is set aside (the twins of what it types too), never run stale."""
    checkout = copy_of_package(tmp_path, keep_builds=True)
    comment = "# edited after the build\n" if source.endswith((".py", ".pxd")) else (
        "/* edited after the build */\n")
    with open(checkout / "pgmux" / source, "a") as f:
        f.write(comment)
    done = python(REPORT, checkout)
    assert done.returncode == 0, done.stderr
    implementation, module, engine, reason = done.stdout.strip().split("|")
    assert (implementation, module, engine) == ("python", "pgmux.protocol.framing",
                                                "pgmux.engine.core")
    assert reason.startswith("stale build: ") and "rebuild with" in reason
    assert "RuntimeWarning: pgmux: stale build" in done.stderr and "rebuild with" in done.stderr
    required = python(REPORT, checkout, PGMUX_REQUIRE_COMPILED="1")
    assert required.returncode == 1 and "is set, but stale build" in required.stderr


@needs_build
def test_a_missing_twin_runs_python_or_fails_when_required(tmp_path):
    """The C extensions built, one compiled module's twin missing: all or nothing."""
    checkout = copy_of_package(tmp_path, keep_builds=True)
    (twin,) = (checkout / "pgmux" / "pool").glob("_cy_dispatch.*.so")
    twin.unlink()
    done = python(REPORT, checkout)
    assert done.returncode == 0, done.stderr
    implementation, module, engine, reason = done.stdout.strip().split("|")
    assert (implementation, module, engine) == ("python", "pgmux.protocol.framing",
                                                "pgmux.engine.core")
    assert reason.startswith("pgmux.pool._cy_dispatch is not built")
    required = python(REPORT, checkout, PGMUX_REQUIRE_COMPILED="1")
    assert required.returncode == 1
    assert "is set, but pgmux.pool._cy_dispatch is not built" in required.stderr


@pytest.mark.parametrize("value", ["0", "", "false", "no", "off", " OFF "])
def test_flags_read_as_off(monkeypatch, value):
    monkeypatch.setenv("PGMUX_TEST_FLAG", value)
    assert _native.flag("PGMUX_TEST_FLAG") is False


@pytest.mark.parametrize("value", ["1", "yes", "true", "on", "anything"])
def test_flags_read_as_on(monkeypatch, value):
    monkeypatch.setenv("PGMUX_TEST_FLAG", value)
    assert _native.flag("PGMUX_TEST_FLAG") is True


# -- setup.py -----------------------------------------------------------------------------------


def source_tree(tmp_path: Path) -> Path:
    for name in ("setup.py", "setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    return copy_of_package(tmp_path, keep_builds=False)


def build(tree: Path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if k not in ("PGMUX_PURE_PYTHON", "PGMUX_REQUIRE_COMPILED")}
    return subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tree,
                          capture_output=True, text=True, env={**base, **env}, timeout=300)


def builds_in(tree: Path) -> list[str]:
    return sorted(p.name for p in (tree / "pgmux").rglob("*.so"))


def test_without_a_compiler_the_build_warns_and_leaves_pure_python(tmp_path):
    tree = source_tree(tmp_path)
    done = build(tree, CC="false")
    assert done.returncode == 0, done.stderr
    for name in BINARIES:
        assert f"pgmux: building {name} failed" in done.stderr
    assert "runs in pure Python" in done.stderr and builds_in(tree) == []


def test_without_a_compiler_a_required_build_fails(tmp_path):
    tree = source_tree(tmp_path)
    done = build(tree, CC="false", PGMUX_REQUIRE_COMPILED="1")
    assert done.returncode != 0 and builds_in(tree) == []


def test_pure_python_skips_the_build(tmp_path):
    tree = source_tree(tmp_path)
    done = build(tree, CC="false", PGMUX_PURE_PYTHON="1")
    assert done.returncode == 0, done.stderr
    assert "failed" not in done.stderr and builds_in(tree) == []
