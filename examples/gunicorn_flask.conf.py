"""gunicorn settings for examples/flask_sqlalchemy_app.py on gevent workers.

    PGMUX_DSN=postgresql://user:pw@localhost/db gunicorn -c examples/gunicorn_flask.conf.py

The gevent worker monkey-patches itself before it loads the app (SQLAlchemy's locks must
be gevent's). pgmux's shared client opens in each worker on first use, after the fork.
"""

import os
import sys

wsgi_app = "flask_sqlalchemy_app:app"
pythonpath = os.path.dirname(os.path.abspath(__file__))
worker_class = "gevent"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_connections = 1000
bind = os.environ.get("PGMUX_BIND", "127.0.0.1:8000")


def post_worker_init(worker):
    """Seed the table and connect before serving (the database may come up later: then on
    use)."""
    module = sys.modules.get("flask_sqlalchemy_app")
    if module is None:
        return
    try:
        with module.app.app_context():
            module.warm_up()
    except Exception as exc:
        worker.log.warning("pgmux: could not seed yet (%s)", exc)


def worker_exit(server, worker):
    module = sys.modules.get("flask_sqlalchemy_app")
    if module is not None:
        with module.app.app_context():
            module.shutdown()
        server.log.info("pgmux: worker %s closed its connections", worker.pid)
