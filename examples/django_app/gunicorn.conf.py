"""gunicorn settings for the Django example on gevent workers.

    PGMUX_DSN=postgresql://user:pw@localhost/db gunicorn -c examples/django_app/gunicorn.conf.py

An app given on the command line replaces django_app.wsgi (django_app.wsgi_psycopg2 and
django_app.wsgi_psycopg are the same project on Django's own backend, for `pgmux bench`).
The gevent worker monkey-patches itself before it loads the app; each worker gets its own
pgmux client, opened after the fork (`post_worker_init` warms it up and seeds the tables),
closed in `worker_exit`. Not with --preload: the settings name each worker's connections
after its pid (application_name), which the master would fix for all of them.
"""

import os
import sys

wsgi_app = "django_app.wsgi:application"
pythonpath = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # examples/
worker_class = "gevent"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_connections = 1000
bind = os.environ.get("PGMUX_BIND", "127.0.0.1:8000")


def app_module(worker):
    uri = getattr(worker.app, "app_uri", None) or wsgi_app
    return sys.modules.get(uri.split(":")[0])


def post_worker_init(worker):
    app = app_module(worker)
    if app is None:
        return
    try:
        app.get_client()
    except Exception as exc:  # the database may come up later: requests connect lazily
        worker.log.warning("pgmux: could not seed yet (%s)", exc)


def worker_exit(server, worker):
    app = app_module(worker)
    if app is not None:
        app.close_client()
        server.log.info("pgmux: worker %s closed its connections", worker.pid)
