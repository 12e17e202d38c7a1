"""gunicorn settings for examples/wsgi_app.py on gevent workers, one pgmux Client per worker.

    PGMUX_DSN=postgresql://user:pw@localhost/db gunicorn -c examples/gunicorn.conf.py
    PGMUX_DSN=... gunicorn -c examples/gunicorn.conf.py --preload     # works the same

An app given on the command line replaces wsgi_app, e.g. `gunicorn -c examples/gunicorn.conf.py
wsgi_app_psycopg2:application` (the psycopg2 peer in `pgmux bench`'s http suite); the hooks
call that module's get_client() and close_client(). The gevent worker monkey-patches itself
before it loads the app, so the app module does not patch. The Client is created in each
worker after the fork: `post_worker_init` (after the patching) warms it up, and requests
create it lazily otherwise. With --preload the master imports the app module, which opens
nothing at import time. Do not create the Client in `post_fork`: it runs before the worker
monkey-patches.
"""

import os
import sys

wsgi_app = "wsgi_app:application"
pythonpath = os.path.dirname(os.path.abspath(__file__))  # so "wsgi_app" imports from here
worker_class = "gevent"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_connections = 1000
bind = os.environ.get("PGMUX_BIND", "127.0.0.1:8000")


def app_module(worker):
    """The module of the app gunicorn loaded (this file's wsgi_app unless given)."""
    uri = getattr(worker.app, "app_uri", None) or wsgi_app
    return sys.modules.get(uri.split(":")[0])


def post_worker_init(worker):
    """In the worker, patched and with the app loaded: connect and seed before serving."""
    app = app_module(worker)
    if app is None:
        return
    try:
        app.get_client()
    except Exception as exc:  # the database may come up later: requests retry lazily
        worker.log.warning("pgmux: not connected yet (%s); will retry on first request", exc)


def worker_exit(server, worker):
    """In the exiting worker: finish in-flight queries and Terminate the connections."""
    app = app_module(worker)
    if app is not None:
        app.close_client()
        server.log.info("pgmux: worker %s closed its client", worker.pid)
