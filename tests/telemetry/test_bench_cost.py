"""What telemetry costs, as ``pgmux bench`` counts it: its three configurations run and mean
what they say, its goal lines judge what they should. (Its instruction counts are the
bench's to print.)"""

from __future__ import annotations

import subprocess

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the test extra's opentelemetry-sdk")

from pgmux.tooling.bench import build_parser  # noqa: E402
from pgmux.tooling.bench.goals import telemetry  # noqa: E402
from pgmux.tooling.bench.goals.common import Run  # noqa: E402
from pgmux.tooling.bench.instructions import CONFIGS, command  # noqa: E402
from pgmux.tooling.bench.plan import settings_from  # noqa: E402


@pytest.mark.parametrize("config, expected", [
    ("absent", "False [False, False]"), ("api", "True [False, False]"),
    ("sdk", "True [True, True]")])
def test_each_configuration_is_what_it_says(config, expected):
    done = subprocess.run(command(config, "probe", ""), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


@pytest.mark.parametrize("config", CONFIGS)
def test_the_measured_loop_runs_in_each_configuration(pg, config):
    done = subprocess.run(command(config, "select_int=64,tpcb_unit=16,transaction=16", pg.dsn),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    segments = done.stdout.split()
    assert segments[::2] == ["dump"] * 6, done.stdout  # N and 3N of each, timed
    assert all(float(seconds) > 0 for seconds in segments[1::2])


def _rows(absent: float, api: float, counter: str = "instructions") -> list[dict]:
    return [{"implementation": "compiled", "workload": "select_int", "config": config,
             counter: value} for config, value in
            (("absent", absent), ("api", api), ("sdk", absent * 1.5))]


def _line(rows: list[dict]) -> dict:
    return {g["id"]: g for g in telemetry.judge(Run([], instructions=rows))}[
        "telemetry_select_int_compiled"]


def test_goal_lines():
    met = _line(_rows(50_000, 50_900))
    assert met["status"] == "met" and "+1.80 %" in met["measured"]
    missed = _line(_rows(50_000, 51_100))
    assert missed["status"] == "not met"
    assert "SDK exporting nowhere: 75,000 (+50.0 %)" in missed["detail"]
    assert _line(_rows(10.0, 10.1, counter="cpu_us"))["status"] == "not measured"


def test_the_medians_are_judged_and_the_runs_printed():
    rows = _rows(50_000, 50_500)
    rows[0]["runs"] = [49_000.0, 50_000.0, 53_000.0]  # one run off by 6 %: the median holds
    line = _line(rows)
    assert line["status"] == "met"
    assert "absent 50,000 (49,000-53,000), API 50,500)" in line["measured"]


def test_part_of_the_goal_run_and_alone():
    parse = build_parser().parse_args
    alone = settings_from(parse(["--telemetry-cost"]), ["--telemetry-cost"])
    assert alone.instructions == "telemetry" and alone.cases == [] and alone.micro == "none"
    assert settings_from(parse(["--goals"]), ["--goals"]).instructions == "telemetry"
    assert settings_from(parse(["--goals", "--quick"]), []).instructions == "control"
    assert settings_from(parse(["--smoke"]), []).instructions == "none"
