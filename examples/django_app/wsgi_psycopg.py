"""The example on Django's own PostgreSQL backend with psycopg 3 (which waits cooperatively
under gevent's monkey-patching), a server connection per request as Django does by default."""

import os

os.environ["DJANGO_APP_BACKEND"] = "psycopg"

from django_app.wsgi import application, close_client, get_client  # noqa: E402, F401
