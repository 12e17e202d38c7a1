"""The django_http suite: the Django example (examples/django_app) on pgmux.contrib.django
against the same project on Django's own PostgreSQL backend, under gunicorn's gevent workers.

It runs as the http suite does (``pgmux.tooling.bench.http``: gunicorn with
examples/gunicorn.conf.py, 2 gevent workers, wrk with 64 connections, the apps measured back
to back per endpoint, CPU and the peak of server connections alongside), on the Django ORM
endpoints /db and /queries?n=20 (its 20 lookups one after another, as Django code runs
them), each view in a transaction (the example's ATOMIC_REQUESTS). The apps, the same code
and settings but the database backend:

* ``django-pgmux``: ENGINE pgmux.contrib.django, 2 pipelined + 4 pinned connections per
  worker, one shared client per worker;
* ``django-psycopg2``: Django's backend on psycopg2 with psycogreen, a server connection
  per request (Django's CONN_MAX_AGE=0; a persistent one per greenlet is never reused);
* ``django-psycopg``: Django's backend on psycopg 3, likewise.
"""

from __future__ import annotations

from typing import Any

from pgmux.tooling.bench import http

NAME = "django_http"  # the suite's name among the workloads
ENDPOINTS: dict[str, int | None] = {"/db": None, "/queries?n=20": 20}
APPS = {app.name: app for app in (
    http.App("django-pgmux", "django_app.wsgi:application", "django-pgmux-",
             ("django", "psycopg"), "2 pipelined + 4 pinned per worker"),
    http.App("django-psycopg2", "django_app.wsgi_psycopg2:application", "django-psycopg2-",
             ("django", "psycopg2", "psycogreen"), "one per request in flight"),
    http.App("django-psycopg", "django_app.wsgi_psycopg:application", "django-psycopg-",
             ("django", "psycopg"), "one per request in flight"),
)}


def missing(apps: list[str]) -> list[str]:
    """Why the suite cannot run (each with what to install), or nothing."""
    return http.missing(apps, APPS)


def run_rtt(run: http.HttpRun, rtt: float, route: dict[str, Any], progress: Any,
            results: list[dict[str, Any]], errors: list[str]) -> None:
    """Every endpoint of every app at one RTT (see ``http.run_rtt``)."""
    http.run_rtt(run, rtt, route, progress, results, errors, APPS, ENDPOINTS)
