"""The ``pgmux`` command: check, demo, bench dispatch, help; and the progress bar."""

from __future__ import annotations

import io
import os
import re
import shutil
import socket
import subprocess
import sys
import types

import pytest

import pgmux
import pgmux._native
from pgmux.tooling import cli
from pgmux.tooling.progress import Progress

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_pgmux(*args: str, timeout: float = 60, env: dict | None = None):
    return subprocess.run([sys.executable, "-m", "pgmux", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env=env)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report_lines(stdout: str) -> dict[str, str]:
    return {line[:11].strip(): line[11:].strip() for line in stdout.splitlines()}


# check --------------------------------------------------------------------------------------

def test_check_reports_server_facts_over_tls(pg):
    pg.need_tls()
    done = run_pgmux("check", pg.dsn_for("scram_user"))
    assert done.returncode == 0, done.stderr
    report = report_lines(done.stdout)
    assert report["version"].startswith(f"PostgreSQL {pg.version}.")
    assert report["protocol"] == "3.0"  # the default; 3.2 is opt-in
    assert report["tls"].startswith("TLSv1.")
    assert report["auth"].startswith("scram-sha-256")
    assert re.fullmatch(r"\d+\.\d\d ms \(median of 5 x SELECT 1\)", report["round trip"])
    assert report["pgmux"] == f"{pgmux.__version__} {pgmux._native.describe()}"
    assert report["pgmux"].split()[1] == pgmux.implementation
    assert "scram-user-pw" not in done.stdout + done.stderr


def test_check_reports_plain_connection_and_trust(pg):
    done = run_pgmux("check", pg.dsn_for("trust_user", sslmode="disable"), "--count", "2")
    assert done.returncode == 0, done.stderr
    report = report_lines(done.stdout)
    assert report["tls"] == "no"
    assert report["auth"] == "trust"
    assert "median of 2" in report["round trip"]


def test_check_wrong_password_fails_in_one_clear_line(pg):
    done = run_pgmux("check", pg.dsn_for("scram_user", password="not-the-password"))
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith('pgmux check: authentication failed for user "scram_user"')
    assert "password authentication failed" in lines[0]
    assert "not-the-password" not in done.stderr


def test_check_unreachable_host_fails_in_one_clear_line():
    port = free_port()  # nothing listens there any more
    done = run_pgmux("check", f"postgresql://someone:hunter2@127.0.0.1:{port}/db")
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"pgmux check: could not connect to 127.0.0.1:{port}")
    assert "refused" in lines[0].lower()
    assert "hunter2" not in done.stderr
    assert "Traceback" not in done.stderr


def test_check_invalid_dsn_fails_without_traceback():
    done = run_pgmux("check", "postgresql://u:pw@host:notaport/db")
    assert done.returncode == 1
    assert done.stderr.startswith("pgmux check: invalid connection settings: ")
    assert "Traceback" not in done.stderr


# demo ---------------------------------------------------------------------------------------

def test_demo_quick_on_the_embedded_default():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    done = run_pgmux("demo", "--quick", env=env)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "embedded PostgreSQL" in out
    # it says what it does while the server starts, before any result
    steps = out[:out.index("queries/s")]
    assert "starting a throwaway PostgreSQL" in steps and "initdb" in steps
    assert re.search(r"server ready in \d+\.\d s", steps), steps
    rows = {line.split()[0]: [float(x) for x in line.split()[-4:]]
            for line in out.splitlines() if line.startswith(("pgmux multiplexed", "naive pool"))}
    assert sorted(rows) == ["naive", "pgmux"], out
    fast, slow = rows["pgmux"], rows["naive"]  # queries/s, p50, p99, server connections
    assert fast[3] == slow[3] == 4  # server connections: 4 on each side
    ratio = float(re.search(r"ran ([\d.]+)x the queries/s", out).group(1))
    assert ratio == pytest.approx(fast[0] / slow[0], rel=0.05)
    assert ratio > 3  # 64 callers on 4 connections at 10 ms: pipelining wins by ~15x
    drivers = re.findall(r"^\s+(\d+)\s+(\d+)\s+([\d.]+)\s", out.split("pgmux stats")[1], re.M)
    assert len(drivers) == 4
    assert max(float(d[2]) for d in drivers) > 1.0  # several queries per socket read


def test_demo_rejects_bad_arguments():
    assert cli.main(["demo", "--connections", "0"]) == 2


# bench and help -----------------------------------------------------------------------------

def test_bench_dispatches_its_arguments(monkeypatch):
    seen = []
    fake = types.ModuleType("pgmux.tooling.bench")
    fake.main = lambda argv: seen.append(argv) or 0
    monkeypatch.setitem(sys.modules, "pgmux.tooling.bench", fake)
    assert cli.main(["bench", "--quick", "--help"]) == 0
    assert seen == [["--quick", "--help"]]


def test_bench_missing_says_so(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pgmux.tooling.bench", None)  # import raises ModuleNotFoundError
    assert cli.main(["bench"]) == 2
    assert "pgmux bench: the benchmark suite" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--help"], ["demo", "--help"], ["check", "--help"]])
def test_help_everywhere(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 0
    assert "usage: pgmux" in capsys.readouterr().out


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_console_script_is_installed():
    """`pip install -e '.[test]'` puts the script beside the interpreter that runs the tests."""
    beside = os.path.join(os.path.dirname(sys.executable), "pgmux")
    script = beside if os.path.exists(beside) else shutil.which("pgmux")
    assert script is not None, "no pgmux console script: install with pip install -e '.[test]'"
    done = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    assert "check" in done.stdout


# progress -----------------------------------------------------------------------------------

def test_progress_is_silent_when_not_a_terminal():
    stream = io.StringIO()
    with Progress(10, "work", stream=stream) as bar:
        bar.update(5)
        bar.update(10)
    assert stream.getvalue() == ""


def test_progress_draws_in_place_and_clears():
    stream = io.StringIO()
    bar = Progress(4, "work", width=8, stream=stream, enabled=True)
    assert bar.render() == "work [........]   0%"
    bar.update(2)
    assert bar.render() == "work [####....]  50%"
    bar.update(99)  # clamped; the final state is always drawn
    assert bar.render() == "work [########] 100%"
    bar.finish()
    drawn = stream.getvalue()
    assert drawn.startswith("\rwork [####....]  50%")
    assert "\rwork [########] 100%" in drawn
    assert drawn.endswith("\r" + " " * len("work [########] 100%") + "\r")
