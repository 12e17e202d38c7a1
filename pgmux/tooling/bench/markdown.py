"""A run as the Benchmarks page's tables (MyST-compatible Markdown): the machine, the goals
by area, each workload's figures with the command that reproduces them.

``pgmux bench --goals --json run.json`` measures; ``pgmux bench --render run.json
--markdown docs/benchmarks.md`` replaces the page's generated part (between ``BEGIN`` and
``END``) and leaves the prose around it; a file without the markers gets the block alone.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterable
from typing import Any

BEGIN = "<!-- pgmux bench --render: the tables below are generated; edit around them -->"
END = "<!-- end of the generated tables -->"
Row = dict[str, Any]
Column = tuple[str, Callable[[Row], str]]
RESULT_COLUMNS: tuple[Column, ...] = (
    ("RTT", lambda r: f"{r['rtt_ms']:g} ms"),
    ("client", lambda r: r["client"]),
    ("greenlets", lambda r: f"{r['greenlets']:,}"),
    ("server conns", lambda r: str(r.get("peak_server_connections", r["connections"]))),
    ("ops/s", lambda r: _number(r["qps"], "{:,.0f}" if r["qps"] >= 100 else "{:,.1f}")),
    ("p50 ms", lambda r: _number(r.get("latency_ms", {}).get("p50"), "{:,.2f}")),
    ("p99 ms", lambda r: _number(r.get("latency_ms", {}).get("p99"), "{:,.2f}")),
    ("client CPU us/op", lambda r: _number(r.get("cpu_us_per_query"), "{:,.1f}")),
    ("x floor", lambda r: _number(r.get("cpu_floor_multiple"), "{:,.1f}")),
    ("server CPU us/op", lambda r: _number(r.get("server_cpu_us_per_query"), "{:,.0f}")),
)
ROWS_COLUMN: Column = ("rows/s", lambda r: _number(r.get("rows_per_s"), "{:,.0f}"))
HTTP_COLUMNS: tuple[Column, ...] = (
    ("RTT", lambda r: f"{r['rtt_ms']:g} ms"),
    ("endpoint", lambda r: f"`{r['endpoint']}`"),
    ("app", lambda r: r["app"]),
    ("req/s", lambda r: f"{r['rps']:,.0f}"),
    ("p50 ms", lambda r: _number(r["latency_ms"].get("p50"), "{:,.1f}")),
    ("p99 ms", lambda r: _number(r["latency_ms"].get("p99"), "{:,.1f}")),
    ("app CPU us/req", lambda r: _number(r.get("app_cpu_us_per_request"), "{:,.0f}")),
    ("server conns", lambda r: str(r.get("peak_server_connections", "-"))),
)
GOAL_COLUMNS: tuple[Column, ...] = (
    ("", lambda g: {"met": "met", "not met": "**not met**"}.get(g["status"], "not measured")),
    ("goal", lambda g: g["target"]),
    ("measured", lambda g: g["measured"]),
    ("id", lambda g: f"`{g['id']}`"),
)
MACHINE = (  # (label, how to read it from the document's machine)
    ("CPU", lambda m: f"{m.get('cpu_model', '?')}, {m.get('cpus', '?')} cores"),
    ("RAM", lambda m: "-" if m.get("memory_gib") is None else f"{m['memory_gib']:g} GiB"),
    ("OS", lambda m: f"{m.get('os', '?')} ({m.get('platform', '?')})"),
    ("Python", lambda m: f"{m.get('implementation', '')} {m.get('python', '?')}, gevent "
                         f"{m.get('gevent', '?')}"),
    ("PostgreSQL", lambda m: m.get("postgresql") or "?"),
    ("pgmux", lambda m: m.get("pgmux_implementation", "?")),
    ("load average at the start", lambda m: ", ".join(
        f"{x:g}" for x in m.get("load_average_at_start") or []) or "-"),
)


def _number(value: Any, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell (and from MyST's dollar math)."""
    return text.replace("|", "\\|").replace("$", "\\$").replace("\n", " ")


def table(rows: Iterable[Row], columns: Iterable[Column]) -> str:
    columns = list(columns)
    lines = ["| " + " | ".join(title for title, _ in columns) + " |",
             "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(_cell(cell(row)) for _, cell in columns) + " |" for row in rows]
    return "\n".join(lines)


def _command(document: dict[str, Any], *options: str) -> str:
    """The command that reproduces part of the run: ``pgmux bench`` with the run's preset and
    client list, and ``options``."""
    settings = document.get("settings", {})
    given = document.get("command", "")
    preset = next((p for p in ("--quick", "--smoke") if p in given.split()), "")
    parts = ["pgmux bench", preset or ("--goals" if settings.get("goals") else ""), *options]
    clients = re.search(r"--clients[ =](\S+)", given)
    if clients:
        parts.append(f"--clients {clients[1]}")
    return " ".join(part for part in parts if part)


_FILES = re.compile(r" --(?:json|markdown|plot|profile|render)[ =]\S+")


def shown(command: str) -> str:
    """A run's command without the files it wrote (its JSON, plots, page, profiles)."""
    return _FILES.sub("", command)


def _measured(results: list[Row]) -> list[Row]:
    return [r for r in results if not r.get("profiled") and not r.get("turns_counted")]


def machine(document: dict[str, Any]) -> str:
    found = document.get("machine", {})
    rows = [{"what": label, "value": read(found)} for label, read in MACHINE]
    rows.append({"what": "server", "value": document.get("server") or "-"})
    return table(rows, (("", lambda r: r["what"]), ("", lambda r: r["value"])))


def goals(document: dict[str, Any]) -> str:
    out = []
    for key, title in document.get("areas", {}).items():
        lines = [g for g in document.get("goals", []) if g["area"] == key]
        if lines:
            met = sum(g["status"] == "met" for g in lines)
            out += [f"### {title[:1].upper()}{title[1:]}", "",
                    f"{met} of {len(lines)} met.", "", table(lines, GOAL_COLUMNS), ""]
    return "\n".join(out)


def workloads(document: dict[str, Any]) -> str:
    from pgmux.tooling.bench.workloads import WORKLOADS

    results = _measured(document.get("results", []))
    present = {r["workload"] for r in results}
    out = []
    for name in [w for w in dict.fromkeys(["floor", *WORKLOADS]) if w in present]:
        rows = sorted((r for r in results if r["workload"] == name),
                      key=lambda r: (r["rtt_ms"], r["greenlets"], r["connections"], r["client"]))
        workload = WORKLOADS.get(name)
        columns = RESULT_COLUMNS + ((ROWS_COLUMN,) if any(r.get("rows_per_s") for r in rows)
                                    else ())
        unit = rows[0].get("unit", "query")
        out += [f"### `{name}`", "", _cell(workload.description if workload else name)
                + f" (an operation: a {unit}).", "", "```sh",
                _command(document, f"--workloads {name}"), "```", "", table(rows, columns), ""]
    return "\n".join(out)


def http(document: dict[str, Any], key: str = "http") -> str:
    """The http suite's table, or the drop-in's (``key`` "psycopg2_http")."""
    rows = document.get(key, [])
    if not rows:
        return ""
    seconds = document.get("settings", {}).get("http_seconds")
    window = f"; wrk measured {seconds[1]} s after {seconds[0]} s of warm-up" if seconds else ""
    if key == "http":
        title, what = "HTTP apps", ("`examples/wsgi_app.py` against "
                                    "`examples/wsgi_app_psycopg2.py`")
    else:
        title, what = "The psycopg2 drop-in under gunicorn", (
            "`examples/wsgi_app_psycopg2.py` on `pgmux.psycopg2` (`pgmux-psycopg2`, through "
            "`register()` in `examples/gunicorn_psycopg2.conf.py`) against the same file on "
            "psycopg2 + psycogreen")
    return "\n".join([f"### {title}", "", f"{what} under gunicorn (2 gevent workers), wrk "
                      f"with 1 thread and {rows[0]['connections']} connections{window}.", "",
                      "```sh", _command(document, f"--workloads {key}"), "```", "",
                      table(rows, HTTP_COLUMNS), ""])


def instructions(document: dict[str, Any]) -> str:
    rows = document.get("instructions", [])
    if not rows:
        return ""
    columns: tuple[Column, ...] = (
        ("pgmux", lambda r: r["implementation"]),
        ("OpenTelemetry", lambda r: {"absent": "absent", "api": "API, no SDK",
                                     "sdk": "SDK, exporting nowhere"}[r["config"]]),
        ("operation", lambda r: f"`{r['workload']}`"),
        ("instructions", lambda r: f"{r.get('instructions', 0):,.0f}"),
        ("runs", lambda r: str(len(r["runs"]))),
    )
    before = {_instruction_key(r): r.get("instructions") for r in
              document.get("baseline_instructions", [])}
    if before:  # the baseline run's count of the same operation, and the change
        columns += (
            ("baseline", lambda r: _number(before.get(_instruction_key(r)), "{:,.0f}")),
            ("change", lambda r: _change(before.get(_instruction_key(r)), r.get("instructions"))),
        )
    return "\n".join(["### Instructions per operation", "", "Counted by callgrind (the "
                      "median of the runs): `select_int` from 64 greenlets on 4 connections, a "
                      "TPC-B `atomic()` unit and a 3-statement `transaction()` from one "
                      "greenlet on one connection; `SELECT %s` and `fetchall()` on a cursor "
                      "from 64 greenlets with a connection each, through `pgmux.dbapi` "
                      "(`dbapi_cursor`) and the drop-in (`psycopg2_cursor`)." + (
                          " Beside them, the baseline run's counts (`--baseline`)."
                          if before else ""), "", "```sh",
                      "pgmux bench --instructions", "```", "", table(rows, columns), ""])


def _instruction_key(row: Row) -> tuple[str, str, str]:
    return row["implementation"], row["config"], row["workload"]


def _change(before: float | None, now: float | None) -> str:
    return "-" if not before or now is None else f"{now / before - 1:+.1%}"


def sqlalchemy(document: dict[str, Any]) -> str:
    rows = [t for t in document.get("sqlalchemy_examples", []) if t.get("test")]
    if not rows:
        return ""
    setting = document.get("settings", {}).get("sqlalchemy_examples") or ["?", "?"]
    columns: tuple[Column, ...] = (
        ("suite", lambda r: r["suite"]), ("test", lambda r: f"`{r['test']}`"),
        ("pgmux s", lambda r: f"{statistics.median(r['pgmux_s']):.3f}"),
        ("psycopg2 s", lambda r: f"{statistics.median(r['psycopg2_s']):.3f}"),
        ("psycopg2's time / pgmux's", lambda r: _number(r.get("ratio"), "{:.2f}x")),
    )
    return "\n".join([
        "### SQLAlchemy's `examples/performance`", "",
        f"`--num {setting[0]}`, {setting[1]} pairs (pgmux, then psycopg2), single-threaded; "
        "the ratio is the median of the pairs'.", "", "```sh",
        "pgmux bench --sqlalchemy-examples", "```", "", table(rows, columns), ""])


def render(document: dict[str, Any]) -> str:
    """The generated block: the run, the machine, the goals, the figures."""
    settings = document.get("settings", {})
    parts = [
        BEGIN, "", "## The run", "",
        f"`{shown(document.get('command', 'pgmux bench'))}`, {document.get('created', '?')}: "
        f"{settings.get('duration_s', '?')} s measured after {settings.get('warmup_s', '?')} s "
        "of warm-up per case, 4 server connections per client unless a table says otherwise.",
        "", machine(document), "", "## Goals", "", goals(document), "## Results", "",
        workloads(document), http(document), http(document, "psycopg2_http"),
        instructions(document), sqlalchemy(document),
        END]
    return "\n".join(part for part in parts if part is not None).rstrip() + "\n"


def update(page: str, document: dict[str, Any]) -> str:
    """``page`` with its generated block replaced (or the block alone, without markers)."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        return render(document)
    return page[:start] + render(document).rstrip("\n") + page[end + len(END):]
