"""Which implementation runs, and the build: pgmux.implementation tells the truth,
PGMUX_PURE_PYTHON forces Python, PGMUX_REQUIRE_COMPILED makes a missing or stale build an
error, a stale build is never used, and setup.py without a compiler warns and installs
pure Python (or fails, when the compiled build is required)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pgmux
from pgmux import _native
from pgmux.protocol import framing, frontend
from pgmux.types import rows

ROOT = Path(__file__).resolve().parents[1]
BUILT = all(list((ROOT / "pgmux" / name.split(".")[1]).glob(name.split(".")[2] + ".*.so"))
            for name in _native.EXTENSIONS)
needs_build = pytest.mark.skipif(not BUILT, reason="no compiled build in this checkout")
REPORT = ("import pgmux, pgmux._native as n; from pgmux.protocol import framing; "
          "print(pgmux.implementation, framing.FrameBuffer.__module__, n.reason, sep='|')")


def test_implementation_reports_what_runs():
    compiled = pgmux.implementation == "compiled"
    assert pgmux.implementation in ("compiled", "python")
    assert (framing.FrameBuffer is framing.CompiledFrameBuffer) is compiled
    assert (framing.FrameBuffer is framing.PythonFrameBuffer) is not compiled
    assert (frontend.bind_statement is frontend.python_bind_statement) is not compiled
    assert (rows.make_row_decoder is rows.compiled_row_decoder) is compiled
    assert (_native.reason == "") is compiled


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
    assert done.stdout.strip() == "compiled|pgmux.protocol._cframing|"


@needs_build
@pytest.mark.parametrize("required", ["", "1"])
def test_pure_python_is_forced_whatever_is_built(tmp_path, required):
    done = python(REPORT, copy_of_package(tmp_path, keep_builds=True), PGMUX_PURE_PYTHON="1",
                  PGMUX_REQUIRE_COMPILED=required)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "python|pgmux.protocol.framing|PGMUX_PURE_PYTHON is set"


def test_no_build_runs_python_and_says_why(tmp_path):
    done = python(REPORT, copy_of_package(tmp_path, keep_builds=False))
    assert done.returncode == 0, done.stderr
    implementation, module, reason = done.stdout.strip().split("|")
    assert (implementation, module) == ("python", "pgmux.protocol.framing")
    assert "pgmux.protocol._cframing is not built" in reason and "pip install -e ." in reason


def test_no_build_is_an_error_when_required(tmp_path):
    done = python(REPORT, copy_of_package(tmp_path, keep_builds=False),
                  PGMUX_REQUIRE_COMPILED="1")
    assert done.returncode == 1
    assert "ImportError: PGMUX_REQUIRE_COMPILED is set, but pgmux.protocol._cframing is not " \
        "built" in done.stderr


@needs_build
@pytest.mark.parametrize("source", ["protocol/_cframing.c", "types/_cvalues.h", "_cextension.h"])
def test_a_stale_build_is_said_and_not_used(tmp_path, source):
    checkout = copy_of_package(tmp_path, keep_builds=True)
    with open(checkout / "pgmux" / source, "a") as f:
        f.write("/* edited after the build */\n")
    done = python(REPORT, checkout)
    assert done.returncode == 0, done.stderr
    implementation, module, reason = done.stdout.strip().split("|")
    assert (implementation, module) == ("python", "pgmux.protocol.framing")
    assert reason.startswith(f"stale build: pgmux/{source}") or f"pgmux/{source}" in reason
    assert "RuntimeWarning: pgmux: stale build" in done.stderr and "rebuild with" in done.stderr
    required = python(REPORT, checkout, PGMUX_REQUIRE_COMPILED="1")
    assert required.returncode == 1 and "is set, but stale build" in required.stderr


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
    for name in _native.EXTENSIONS:
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
