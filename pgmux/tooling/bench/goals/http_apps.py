"""HTTP apps: ``examples/wsgi_app.py`` under gunicorn's gevent workers against the same
endpoints on psycopg2 + psycogreen (``examples/wsgi_app_psycopg2.py``), wrk with 64
connections: a point read (``/db``) and writes (``/updates?n=``: n reads gathered, then the n UPDATEs
as one atomic unit), locally and through the 10 ms delay line."""

from __future__ import annotations

from pgmux.tooling.bench.goals.common import (
    RTT_MS,
    Area,
    Goal,
    Result,
    Run,
    find,
    find_http,
    http_figures,
    joined,
    line,
    not_measured,
    ratio,
    rps,
)

CONCURRENCY = 64  # wrk's connections
RATIOS = (  # (id, endpoint, rtt, >= x the psycopg2 app)
    ("db_local", "/db", 0.0, 1.6),
    ("updates5_local", "/updates?n=5", 0.0, 1.3),
    ("updates20_local", "/updates?n=20", 0.0, 2.0),
    ("updates20_rtt10", "/updates?n=20", RTT_MS, 10.0),
)
DB_SHARE = 0.9  # /db at 10 ms: of wrk's connections over the round trip
ENDPOINTS = ("/db", "/updates?n=5", "/updates?n=20")


def delay_line(results: list[Result], rtt: float) -> str:
    """What a round trip through the delay line really took, from psycopg2's naive pool at
    ``rtt`` (its connections over its queries/s: one round trip each), and what it allows."""
    naive = find(results, "psycopg2", "select_int", rtt=rtt)
    if naive is None:
        return ""
    seconds = naive["connections"] / naive["qps"]
    return (f"round trip through the delay line, measured: {seconds * 1000:.1f} ms (psycopg2 "
            f"select_int), which allows {CONCURRENCY / seconds:,.0f} req/s")


def judge(run: Run) -> list[Goal]:
    out = []
    for key, endpoint, rtt, goal in RATIOS:
        where = "locally" if rtt == 0 else f"at {rtt:g} ms RTT"
        mux, peer = (find_http(run.http, app, endpoint, rtt) for app in ("pgmux", "psycopg2"))
        out.append(ratio(key, f"http {endpoint} {where}: pgmux >= {goal:g}x psycopg2 req/s",
                         mux, peer, rps, goal, joined(http_figures(mux), http_figures(peer))))
    bound = CONCURRENCY / (RTT_MS / 1000)
    text = (f"http /db at {RTT_MS:g} ms RTT: pgmux >= {DB_SHARE:.0%} of {CONCURRENCY} "
            f"connections / RTT ({bound:,.0f} req/s)")
    mux, peer = (find_http(run.http, app, "/db", RTT_MS) for app in ("pgmux", "psycopg2"))
    if mux is None:
        out.insert(1, not_measured("db_rtt10", text, "needs the pgmux app at 10 ms"))
    else:
        out.insert(1, line("db_rtt10", text, mux["rps"] >= DB_SHARE * bound,
                           f"{mux['rps'] / bound:.0%}", joined(http_figures(mux), http_figures(
                               peer), delay_line(run.results, RTT_MS))))
    return out


AREA = Area("http_apps", "HTTP apps", judge, endpoints=ENDPOINTS)
