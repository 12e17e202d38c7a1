"""Fan-out: the example app's ``/queries?n=20``, whose twenty reads are handed to the
multiplexer at once from the request's greenlet (``db.gather``) and share round trips,
against the psycopg2 app, which runs them one after another as a sync app does (gunicorn,
2 gevent workers, wrk -c64)."""

from __future__ import annotations

from pgmux.tooling.bench.goals.common import (
    RTT_MS,
    Area,
    Goal,
    Run,
    find_http,
    http_figures,
    joined,
    ratio,
    rps,
)

ENDPOINT = "/queries?n=20"
LOCAL, FAR = 2.0, 15.0  # >= x psycopg2's app locally, at 10 ms


def judge(run: Run) -> list[Goal]:
    out = []
    for key, rtt, goal, where in (("queries20_local", 0.0, LOCAL, "locally"),
                                  ("queries20_rtt10", RTT_MS, FAR, f"at {RTT_MS:g} ms RTT")):
        mux, peer = (find_http(run.http, app, ENDPOINT, rtt) for app in ("pgmux", "psycopg2"))
        out.append(ratio(key, f"http {ENDPOINT} {where}: pgmux >= {goal:g}x psycopg2 req/s",
                         mux, peer, rps, goal, joined(http_figures(mux), http_figures(peer))))
    return out


AREA = Area("fan_out", "fan-out", judge, endpoints=(ENDPOINT,))
