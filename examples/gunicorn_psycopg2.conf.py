"""gunicorn settings for examples/wsgi_app_psycopg2.py: the real psycopg2, or pgmux's drop-in.

    PGMUX_DSN=postgresql://user:pw@localhost/db gunicorn -c examples/gunicorn_psycopg2.conf.py
    PSYCOPG2_DRIVER=pgmux PGMUX_DSN=... gunicorn -c examples/gunicorn_psycopg2.conf.py

The app is the same file either way; this file chooses. With PSYCOPG2_DRIVER=pgmux it calls
``pgmux.psycopg2.register()`` as gunicorn loads it, in the master: from then on
``import psycopg2`` (and its submodules) resolve to pgmux's, in the master (the app module
with --preload) and in every worker it forks (the app module otherwise). register() opens
nothing; each worker's client connects on first use, after the fork and the gevent
worker's monkey-patching. Without it (PSYCOPG2_DRIVER=psycopg2, the default) the app runs
on the real psycopg2, made cooperative by psycogreen's patch in the app module.
"""

import os
import sys

wsgi_app = "wsgi_app_psycopg2:application"
pythonpath = os.path.dirname(os.path.abspath(__file__))  # so the app imports from here
worker_class = "gevent"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_connections = 1000
bind = os.environ.get("PGMUX_BIND", "127.0.0.1:8000")

DRIVER = os.environ.get("PSYCOPG2_DRIVER", "psycopg2")
if DRIVER == "pgmux":
    import pgmux.psycopg2

    pgmux.psycopg2.register()
elif DRIVER != "psycopg2":
    raise RuntimeError(f"PSYCOPG2_DRIVER must be psycopg2 or pgmux, not {DRIVER!r}")


def app_module():
    return sys.modules.get(wsgi_app.split(":")[0])


def post_worker_init(worker):
    """In the worker, patched and with the app loaded: say which psycopg2 it got, and open
    the pool before serving."""
    worker.log.info("psycopg2 is %s", getattr(sys.modules.get("psycopg2"), "__name__", None))
    app = app_module()
    if app is None:
        return
    try:
        app.get_client()
    except Exception as exc:  # the database may come up later: requests retry lazily
        worker.log.warning("psycopg2: not connected yet (%s); will retry on first request", exc)


def worker_exit(server, worker):
    """In the exiting worker: close the pool's connections."""
    app = app_module()
    if app is not None:
        app.close_client()
        server.log.info("psycopg2: worker %s closed its connections", worker.pid)
