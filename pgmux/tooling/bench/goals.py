"""Issues 14's and 21's goals: the cases they are judged on, and each goal met / not met / not
measured.

Every goal compares figures measured side by side in one run (pgmux against
psycopg2 + psycogreen on the same server, 4 server connections each), except the
"unchanged or better" ones, which compare this run's pgmux/psycopg2 ratio with
the same ratio in a baseline run (``--baseline``: a JSON file of an earlier run).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pgmux.tooling.bench.report import find_result, plural, target
from pgmux.tooling.bench.workloads import SLOW_FRACTION, SLOW_SECONDS, WIDE_RESULT_ROWS

Result = dict[str, Any]

GOAL_CONNECTIONS = 4
GOAL_CLIENTS = ("pgmux", "pgmux-python", "pgmux-before", "psycopg2", "psycopg3")
GOAL_CASES = (  # (workload, greenlets, rtt_ms), each for every goal client
    ("select_int", 64, 0.0), ("select_int", 1024, 0.0), ("select_int", 4096, 0.0),
    ("select_int", 64, 10.0),
    ("point_lookup", 64, 0.0), ("slow_mix", 64, 0.0),
    ("tpcb", 64, 0.0), ("wide", 16, 0.0), ("wide_stream", 1, 0.0),
)
GOAL_HTTP_RTTS = (0.0, 10.0)
PROFILED_WORKLOADS = ("select_int", "tpcb", "wide", "tpcb_unit")  # --profile in a goal run

TPCB_RATIO = 1.3
TPCB_TURNS = 6.0  # 5 statements + COMMIT: BEGIN rides with the first, the reset costs none
WIDE_RATIO = 1.0
STREAM_GROWTH_MIB = 16.0
MUX_RATIO, MUX_CPU_US = 2.5, 10.0
UNCHANGED = 0.9  # "unchanged or better": at least this share of the baseline's ratio
SLOW_P99_RATIO = 3.0
HTTP_LOCAL = {"/db": 2.0, "/queries?n=20": 3.0, "/updates?n=5": 1.3}
HTTP_RTT_MS, HTTP_CONCURRENCY = 10.0, 64
HTTP_DB_SHARE = 0.9  # of HTTP_CONCURRENCY / RTT
HTTP_QUERIES_RTT_RATIO = 15.0


def goal_cases(clients: list[str], rtts: list[float],
               workloads: list[str] | None) -> list[tuple[float, str, int, int, str]]:
    """The goal cases as (rtt, workload, greenlets, connections, client), filtered by the
    options (``workloads`` None: all of them)."""
    return [(rtt, workload, greenlets, GOAL_CONNECTIONS, client)
            for workload, greenlets, rtt in GOAL_CASES
            if rtt in rtts and (workloads is None or workload in workloads)
            for client in GOAL_CLIENTS if client in clients]


def load_baseline(path: str | None) -> list[Result] | None:
    """The results of an earlier run's JSON (``pgmux bench --json``), or None."""
    if path is None:
        return None
    with open(path) as f:
        return json.load(f)["results"]


def _find(results: list[Result], client: str, workload: str, greenlets: int,
          rtt: float = 0.0) -> Result | None:
    return find_result(results, client, rtt, GOAL_CONNECTIONS, greenlets, workload)


def _counted(results: list[Result], client: str, workload: str) -> Result | None:
    for r in results:
        if r["client"] == client and r["workload"] == workload and r.get("turns_counted"):
            return r
    return None


def _ms(value: float) -> str:
    return f"{value:.2f} ms" if value < 100 else f"{value:,.0f} ms"


# -- tpcb -------------------------------------------------------------------------------------


def _tpcb_line(results: list[Result], client: str) -> str | None:
    r = _find(results, client, "tpcb", 64)
    if r is None:
        return None
    text = (f"{client} {r['qps']:,.0f} tx/s, p99 {_ms(r['latency_ms']['p99'])}, "
            f"{r['cpu_us_per_query']:,.0f} us CPU/tx")
    counted = _counted(results, client, "tpcb")
    if counted and counted.get("turns_per_query") is not None:
        text += (f", {counted['turns_per_query']:.2f} round trips/tx "
                 f"({counted['bytes_out_per_query']:,.0f} B sent, "
                 f"{counted['bytes_in_per_query']:,.0f} B received)")
    return text


def tpcb_goals(results: list[Result]) -> list[dict[str, Any]]:
    where = "tpcb (pgbench TPC-B via transaction(), 64 greenlets, 4 pinned connections)"
    detail = "; ".join(filter(None, (_tpcb_line(results, c) for c in GOAL_CLIENTS)))
    out = [ratio_goal("tpcb_throughput", f"{where}: pgmux >= {TPCB_RATIO}x psycopg2 tx/s",
                       _find(results, "pgmux", "tpcb", 64),
                       _find(results, "psycopg2", "tpcb", 64), _qps, TPCB_RATIO, detail)]
    mux, peer = _counted(results, "pgmux", "tpcb"), _counted(results, "psycopg2", "tpcb")
    text = (f"tpcb: pgmux round trips per transaction <= {TPCB_TURNS:g} (5 statements + COMMIT; "
            "BEGIN and the reset ride along)")
    turns = mux.get("turns_per_query") if mux else None
    if turns is None:
        out.append(target("tpcb_round_trips", text, None, "-",
                          "needs the turn-counted case (a TCP server address)"))
    else:
        reference = (f" (psycopg2 {peer['turns_per_query']:.2f})"
                     if peer and peer.get("turns_per_query") is not None else "")
        out.append(target("tpcb_round_trips", text, turns <= TPCB_TURNS + 0.05,
                          f"{turns:.2f}{reference}"))
    return out


# -- wide -------------------------------------------------------------------------------------


def _qps(r: Result) -> float:
    return r["qps"]


def _rows(r: Result) -> float:
    return r.get("rows_per_s") or 0.0


def _cpu_per_row(r: Result) -> float:
    """Rows per CPU second: higher is better, so it divides like a throughput."""
    cpu = r.get("cpu_us_per_row")
    return 1e6 / cpu if cpu else 0.0


def _wide_line(r: Result | None, client: str) -> str | None:
    if r is None:
        return None
    text = (f"{client} {r['qps']:,.1f} {plural(r['unit'])}/s, {_rows(r):,.0f} rows/s, "
            f"{r.get('cpu_us_per_row') or 0:.2f} us CPU/row")
    if r.get("rss_peak_mib") is not None:
        text += f", peak RSS {r['rss_peak_mib']:.0f} MiB (+{r['rss_growth_mib']:.1f})"
    return text


def wide_goals(results: list[Result]) -> list[dict[str, Any]]:
    out = []
    for workload, greenlets, where in (
            ("wide", 16, f"wide ({WIDE_RESULT_ROWS:,} rows x 8 columns, 16 greenlets, "
                         "multiplexed db.query)"),
            ("wide_stream", 1, "wide_stream (session.stream() vs a named cursor, 1 greenlet)")):
        found = {c: _find(results, c, workload, greenlets) for c in GOAL_CLIENTS}
        detail = "; ".join(filter(None, (_wide_line(r, c) for c, r in found.items())))
        mux, peer = found["pgmux"], found["psycopg2"]
        out.append(ratio_goal(f"{workload}_rows", f"{where}: pgmux >= {WIDE_RATIO}x psycopg2 "
                               "rows/s", mux, peer, _rows, WIDE_RATIO, detail))
        out.append(ratio_goal(f"{workload}_cpu", f"{workload}: pgmux client CPU per row <= "
                               "psycopg2's (ratio: psycopg2's / pgmux's)", mux, peer,
                               _cpu_per_row, WIDE_RATIO))
    mux = _find(results, "pgmux", "wide_stream", 1)
    growth = mux.get("rss_growth_mib") if mux else None
    out.append(target("wide_stream_memory", f"wide_stream: pgmux resident memory grows <= "
                      f"{STREAM_GROWTH_MIB:g} MiB while streaming",
                      None if growth is None else growth <= STREAM_GROWTH_MIB,
                      "-" if growth is None else f"+{growth:.1f} MiB"))
    return out


# -- the multiplexed path ---------------------------------------------------------------------


def mux_goals(results: list[Result], baseline: list[Result] | None) -> list[dict[str, Any]]:
    where = "select_int (SELECT $1::int, 4 connections)"
    mux, peer = _find(results, "pgmux", "select_int", 64), _find(results, "psycopg2",
                                                                  "select_int", 64)
    out = [ratio_goal("mux_local", f"{where}, 64 greenlets, local: pgmux >= {MUX_RATIO}x "
                       "psycopg2", mux, peer, _qps, MUX_RATIO)]
    cpu = mux.get("cpu_us_per_query") if mux else None
    out.append(target("mux_cpu", f"{where}, 64 greenlets, local: pgmux client CPU <= "
                      f"{MUX_CPU_US:g} us/query", None if cpu is None else cpu <= MUX_CPU_US,
                      "-" if cpu is None else f"{cpu:.1f} us/query"))
    for key, greenlets, rtt, shape in (("mux_rtt10", 64, 10.0, "64 greenlets, 10 ms RTT"),
                                       ("mux_g1024", 1024, 0.0, "1,024 greenlets, local")):
        out.append(_unchanged_goal(key, f"{where}, {shape}: pgmux/psycopg2 unchanged or better "
                                   f"(>= {UNCHANGED:.0%} of the baseline's ratio)",
                                   results, baseline, greenlets, rtt))
    return out


def _pair_ratio(results: list[Result] | None, greenlets: int, rtt: float) -> float | None:
    if not results:
        return None
    mux = _find(results, "pgmux", "select_int", greenlets, rtt)
    peer = _find(results, "psycopg2", "select_int", greenlets, rtt)
    return mux["qps"] / peer["qps"] if mux and peer and peer["qps"] else None


def _unchanged_goal(key: str, text: str, results: list[Result], baseline: list[Result] | None,
                    greenlets: int, rtt: float) -> dict[str, Any]:
    now, before = _pair_ratio(results, greenlets, rtt), _pair_ratio(baseline, greenlets, rtt)
    mux = _find(results, "pgmux", "select_int", greenlets, rtt)
    detail = "" if mux is None else (
        f"pgmux {mux['qps']:,.0f} q/s, p99 {_ms(mux['latency_ms']['p99'])}, "
        f"{mux['cpu_us_per_query']:.1f} us CPU/query")
    if now is None:
        return target(key, text, None, "-", "needs pgmux and psycopg2 at this shape")
    if before is None:
        why = "pass --baseline BEFORE.json" if baseline is None else "not in the baseline"
        return target(key, text, None, f"{now:.2f}x now", f"{detail}; {why} to judge")
    return target(key, text, now >= UNCHANGED * before, f"{now:.2f}x (baseline {before:.2f}x)",
                  detail)


# -- slow queries -----------------------------------------------------------------------------


def slow_mix_goals(results: list[Result]) -> list[dict[str, Any]]:
    text = (f"slow_mix ({SLOW_FRACTION:.0%} pg_sleep({SLOW_SECONDS:g}), the rest point selects, "
            f"64 greenlets, 4 connections): pgmux fast-query p99 <= {SLOW_P99_RATIO:g}x the p99 "
            "without slow queries (point_lookup)")
    lines, ratios = [], {}
    for client in GOAL_CLIENTS:
        mixed, alone = (_find(results, client, w, 64) for w in ("slow_mix", "point_lookup"))
        fast = (mixed or {}).get("kinds", {}).get("fast", {}).get("latency_ms", {}).get("p99")
        if fast is None or alone is None or not alone["latency_ms"].get("p99"):
            continue
        ratios[client] = fast / alone["latency_ms"]["p99"]
        lines.append(f"{client} fast p99 {_ms(fast)} vs {_ms(alone['latency_ms']['p99'])} "
                     f"without: {ratios[client]:.1f}x")
    ratio = ratios.get("pgmux")
    return [target("slow_mix_p99", text, None if ratio is None else ratio <= SLOW_P99_RATIO,
                   "-" if ratio is None else f"{ratio:.1f}x", "; ".join(lines))]


# -- http -------------------------------------------------------------------------------------


def find_http(http: list[Result], app: str, endpoint: str, rtt: float) -> Result | None:
    for r in http:
        if r["app"] == app and r["endpoint"] == endpoint and r["rtt_ms"] == rtt and r["requests"]:
            return r
    return None


def _http_line(r: Result | None) -> str | None:
    if r is None:
        return None
    return f"{r['app']} {r['rps']:,.0f} req/s, p99 {_ms(r['latency_ms']['p99'])}"


def effective_rtt(results: list[Result], rtt: float) -> str:
    """What the delay line really costs per round trip, from a naive pool at ``rtt``: its
    connections over its queries/s (each query one round trip), and what that allows."""
    naive = _find(results, "psycopg2", "select_int", 64, rtt)
    if naive is None or not naive["qps"]:
        return ""
    seconds = naive["connections"] / naive["qps"]
    return (f"; round trip through the delay line, measured: {seconds * 1000:.1f} ms (psycopg2 "
            f"select_int, 4 connections: {naive['qps']:,.0f} q/s), which allows "
            f"{HTTP_CONCURRENCY / seconds:,.0f} req/s")


def http_goals(http: list[Result], results: list[Result] | None = None) -> list[dict[str, Any]]:
    where = f"http (gunicorn, 2 gevent workers, wrk -c{HTTP_CONCURRENCY})"
    out = []
    for endpoint, goal in HTTP_LOCAL.items():
        mux, peer = find_http(http, "pgmux", endpoint, 0.0), find_http(http, "psycopg2",
                                                                        endpoint, 0.0)
        out.append(ratio_goal(f"http_{_slug(endpoint)}_local",
                               f"{where} {endpoint}, local: pgmux >= {goal:g}x psycopg2",
                               mux, peer, _rps, goal, pair_text(mux, peer)))
    rtt = HTTP_RTT_MS
    mux, peer = find_http(http, "pgmux", "/db", rtt), find_http(http, "psycopg2", "/db", rtt)
    bound = HTTP_CONCURRENCY / (rtt / 1000.0)
    out.append(target("http_db_rtt10", f"{where} /db, {rtt:g} ms RTT: pgmux >= "
                      f"{HTTP_DB_SHARE:.0%} of {HTTP_CONCURRENCY}/RTT ({bound:,.0f} req/s)",
                      None if mux is None else mux["rps"] >= HTTP_DB_SHARE * bound,
                      "-" if mux is None else f"{mux['rps'] / bound:.0%}",
                      pair_text(mux, peer) + effective_rtt(results or [], rtt)))
    endpoint = "/queries?n=20"
    mux, peer = find_http(http, "pgmux", endpoint, rtt), find_http(http, "psycopg2", endpoint, rtt)
    out.append(ratio_goal("http_queries_rtt10", f"{where} {endpoint}, {rtt:g} ms RTT: pgmux >= "
                           f"{HTTP_QUERIES_RTT_RATIO:g}x psycopg2", mux, peer, _rps,
                           HTTP_QUERIES_RTT_RATIO, pair_text(mux, peer)))
    return out


def _rps(r: Result) -> float:
    return r["rps"]


def _slug(endpoint: str) -> str:
    return endpoint.strip("/").split("?")[0]


def pair_text(mux: Result | None, peer: Result | None) -> str:
    return "; ".join(filter(None, (_http_line(mux), _http_line(peer))))


# -- all --------------------------------------------------------------------------------------


def ratio_goal(key: str, text: str, mux: Result | None, peer: Result | None,
                metric: Callable[[Result], float], goal: float,
                detail: str = "") -> dict[str, Any]:
    """``metric(mux) / metric(peer) >= goal``; not measured without both."""
    if mux is None or peer is None or not metric(peer):
        return target(key, text, None, "-", detail or "needs pgmux and psycopg2 figures")
    ratio = metric(mux) / metric(peer)
    return target(key, text, ratio >= goal, f"{ratio:.2f}x", detail)


def evaluate_goals(results: list[Result], http: list[Result],
                   baseline: list[Result] | None = None) -> list[dict[str, Any]]:
    """Every goal of issue 14, then of issue 21 (keys ending in _21), in the issues' order."""
    return [*tpcb_goals(results), *wide_goals(results), *mux_goals(results, baseline),
            *http_goals(http, results), *slow_mix_goals(results),
            *compiled_goals(results, http, baseline)]


# -- issue 21: the compiled inner loops ----------------------------------------------------------

COMPILED_WIDE_RATIO = 1.5  # rows/s and CPU per row, wide and wide_stream
COMPILED_MUX_RATIO, COMPILED_MUX_CPU_US = 3.0, 8.0
COMPILED_TPCB_RATIO = 1.0
COMPILED_HTTP_LOCAL = {"/db": 1.6, "/queries?n=20": 2.0}
FLAT_GREENLETS, FLAT_CPU_RATIO, FLAT_QPS_SHARE = 4096, 1.3, 0.8
PURE_SHARE = 0.95  # pure Python: at least this share of the baseline's pgmux/psycopg2 ratio
PURE_CASES = (("select_int", 64, 0.0), ("wide", 16, 0.0), ("tpcb", 64, 0.0))


def compiled_goals(results: list[Result], http: list[Result],
                   baseline: list[Result] | None = None) -> list[dict[str, Any]]:
    """Every goal of issue 21, in the issue's order (the pure-Python one needs a run with
    PGMUX_PURE_PYTHON=1 and a baseline)."""
    out = []
    for workload, greenlets in (("wide", 16), ("wide_stream", 1)):
        mux, peer = _find(results, "pgmux", workload, greenlets), _find(
            results, "psycopg2", workload, greenlets)
        detail = "; ".join(filter(None, (_wide_line(mux, "pgmux"), _wide_line(peer, "psycopg2"))))
        out.append(ratio_goal(f"{workload}_rows_21", f"{workload}: pgmux >= "
                               f"{COMPILED_WIDE_RATIO}x psycopg2 rows/s", mux, peer, _rows,
                               COMPILED_WIDE_RATIO, detail))
        out.append(ratio_goal(f"{workload}_cpu_21", f"{workload}: pgmux client CPU per row "
                               f"<= 1/{COMPILED_WIDE_RATIO}x psycopg2's (ratio: psycopg2's / "
                               "pgmux's)", mux, peer, _cpu_per_row, COMPILED_WIDE_RATIO))
    where = "select_int, 64 greenlets, local"
    mux, peer = _find(results, "pgmux", "select_int", 64), _find(results, "psycopg2",
                                                                  "select_int", 64)
    out.append(ratio_goal("mux_local_21", f"{where}: pgmux >= {COMPILED_MUX_RATIO:g}x "
                           "psycopg2", mux, peer, _qps, COMPILED_MUX_RATIO))
    cpu = mux.get("cpu_us_per_query") if mux else None
    out.append(target("mux_cpu_21", f"{where}: pgmux client CPU <= {COMPILED_MUX_CPU_US:g} "
                      "us/query", None if cpu is None else cpu <= COMPILED_MUX_CPU_US,
                      "-" if cpu is None else f"{cpu:.1f} us/query"))
    out.append(ratio_goal("tpcb_21", f"tpcb via transaction(): pgmux >= "
                           f"{COMPILED_TPCB_RATIO:g}x psycopg2 tx/s",
                           _find(results, "pgmux", "tpcb", 64),
                           _find(results, "psycopg2", "tpcb", 64), _qps, COMPILED_TPCB_RATIO))
    for endpoint, goal in COMPILED_HTTP_LOCAL.items():
        mux, peer = find_http(http, "pgmux", endpoint, 0.0), find_http(http, "psycopg2",
                                                                        endpoint, 0.0)
        out.append(ratio_goal(f"http_{_slug(endpoint)}_local_21", f"http {endpoint}, local: "
                               f"pgmux >= {goal:g}x psycopg2", mux, peer, _rps, goal,
                               pair_text(mux, peer)))
    return [*out, *flat_goals(results), *pure_goals(results, baseline)]


def flat_goals(results: list[Result], suffix: str = "_21") -> list[dict[str, Any]]:
    """The cost per query flat in the number of callers: pgmux at 4,096 greenlets against
    64, CPU per query and throughput (the goals' ids end in ``suffix``, the issue's)."""
    few, many = _find(results, "pgmux", "select_int", 64), _find(
        results, "pgmux", "select_int", FLAT_GREENLETS)
    where = f"select_int, {FLAT_GREENLETS:,} greenlets vs 64, 4 connections"
    if few is None or many is None or not few["cpu_us_per_query"] or not few["qps"]:
        return [target(f"flat_cpu{suffix}", f"{where}: CPU/query", None, "-",
                       "needs pgmux at 64 and 4,096 greenlets")]
    cpu = many["cpu_us_per_query"] / few["cpu_us_per_query"]
    share = many["qps"] / few["qps"]
    detail = (f"pgmux {few['qps']:,.0f} q/s, {few['cpu_us_per_query']:.1f} us CPU/query at 64; "
              f"{many['qps']:,.0f} q/s, {many['cpu_us_per_query']:.1f} us at "
              f"{FLAT_GREENLETS:,}")
    return [target(f"flat_cpu{suffix}", f"{where}: CPU/query <= {FLAT_CPU_RATIO:g}x", cpu <=
                   FLAT_CPU_RATIO, f"{cpu:.2f}x", detail),
            target(f"flat_qps{suffix}", f"{where}: throughput >= {FLAT_QPS_SHARE:.0%}",
                   share >= FLAT_QPS_SHARE, f"{share:.0%}")]


def pure_goals(results: list[Result], baseline: list[Result] | None,
               cases: tuple[tuple[str, int, float], ...] = PURE_CASES,
               suffix: str = "_21") -> list[dict[str, Any]]:
    """Pure Python against the code before, for each (workload, greenlets, rtt) of ``cases``:
    pgmux-python against pgmux-before in this run (throughput and CPU per operation), else
    a pure-Python run's pgmux/psycopg2 against the same ratio in the baseline; the goals'
    ids end in ``suffix`` (the issue's)."""
    out = []
    for workload, greenlets, rtt in cases:
        key = f"pure_{workload}{suffix}"
        text = (f"pure Python, {workload} ({greenlets} greenlets): >= {PURE_SHARE:.0%} of "
                "before (pgmux-before in this run, else the baseline's pgmux/psycopg2)")
        pure, before = (_find(results, c, workload, greenlets, rtt)
                        for c in ("pgmux-python", "pgmux-before"))
        if pure and before and before["qps"] and pure["cpu_us_per_query"]:
            speed = pure["qps"] / before["qps"]
            cpu = before["cpu_us_per_query"] / pure["cpu_us_per_query"]
            out.append(target(key, text, min(speed, cpu) >= PURE_SHARE,
                              f"{speed:.2f}x ops/s, {cpu:.2f}x CPU",
                              f"pgmux-python {pure['qps']:,.1f}/s, "
                              f"{pure['cpu_us_per_query']:,.1f} us CPU/op; pgmux-before "
                              f"{before['qps']:,.1f}/s, {before['cpu_us_per_query']:,.1f} us"))
            continue
        mux = _find(results, "pgmux", workload, greenlets, rtt)
        now = _pair(results, workload, greenlets, rtt)
        was = _pair(baseline or [], workload, greenlets, rtt)
        if mux is None or mux.get("pgmux_implementation") != "python" or now is None \
                or was is None:
            out.append(target(key, text, None, "-", "needs pgmux-python and pgmux-before, or "
                              "a PGMUX_PURE_PYTHON=1 run with psycopg2 and --baseline"))
            continue
        out.append(target(key, text, now >= PURE_SHARE * was, f"{now:.2f}x (baseline {was:.2f}x)"))
    return out


def _pair(results: list[Result], workload: str, greenlets: int, rtt: float) -> float | None:
    mux = _find(results, "pgmux", workload, greenlets, rtt)
    peer = _find(results, "psycopg2", workload, greenlets, rtt)
    return mux["qps"] / peer["qps"] if mux and peer and peer["qps"] else None
