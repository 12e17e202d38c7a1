"""The psycopg2_http suite: ``examples/wsgi_app_psycopg2.py`` on pgmux's drop-in against the
same file on psycopg2 + psycogreen, under gunicorn's gevent workers.

It runs as a pass of the http suite (``pgmux.tooling.bench.http``: 2 gevent workers per
app, the apps measured back to back per endpoint, CPU and the peak of server connections
alongside) on ``/db``, ``/queries?n=20`` and ``/updates?n=20``, with wrk's ``CONNECTIONS``
connections: as many requests in flight as a gevent server takes, more than the psycopg2
pool's connections (with 64, as in the http suite, the drop-in could be at most 64 / 12
times faster at any round trip). The apps, the same code and pool, psycopg2 chosen by
``examples/gunicorn_psycopg2.conf.py``:

* ``pgmux-psycopg2``: ``PSYCOPG2_DRIVER=pgmux`` (``pgmux.psycopg2.register()``), a pool of
  ``CONNECTIONS`` connections per worker: handles, so a request in flight never waits for
  one; 4 pipelined + 2 pinned server connections per worker;
* ``psycopg2``: the http suite's psycopg2 app, a pool of 6 server connections per worker
  (12 in all, as many as the drop-in's).
"""

from __future__ import annotations

import os

from pgmux.tooling.bench import http

NAME = "psycopg2_http"  # the suite's name among the workloads
CONNECTIONS = 256  # wrk's
ENDPOINTS: dict[str, int | None] = {"/db": None, "/queries?n=20": 20, "/updates?n=20": 20}
DROP_IN = http.App(
    "pgmux-psycopg2", "wsgi_app_psycopg2:application", "psycopg2-dropin-", ("psycogreen",),
    f"a pool of {CONNECTIONS} handles per worker, 4 pipelined + 2 pinned",
    config=os.path.join(http.EXAMPLES, "gunicorn_psycopg2.conf.py"),
    env=(("PSYCOPG2_DRIVER", "pgmux"), ("PSYCOPG2_POOL_SIZE", str(CONNECTIONS)),
         ("PSYCOPG2_APP_NAME", "psycopg2-dropin")),
    log="psycopg2 is pgmux.psycopg2")
APPS = {app.name: app for app in (DROP_IN, http.APPS["psycopg2"])}
PASS = http.Pass(tuple(APPS.values()), ENDPOINTS, CONNECTIONS)


def pass_of(endpoints: list[str] | None) -> http.Pass:
    """The suite on ``endpoints`` only (None: all of them)."""
    if endpoints is None:
        return PASS
    return http.Pass(PASS.apps, {path: ENDPOINTS[path] for path in endpoints}, CONNECTIONS)


def missing() -> list[str]:
    """Why the suite cannot run (each with what to install), or nothing."""
    return http.missing(list(APPS), APPS)
