"""The example on Django's own PostgreSQL backend with psycopg2 and psycogreen (gevent's wait
callback): the peer of wsgi.py in `pgmux bench`. A server connection per request (Django's
CONN_MAX_AGE=0: a persistent one per greenlet would never be reused under gevent)."""

import os
import sys

os.environ["DJANGO_APP_BACKEND"] = "psycopg2"
sys.modules.setdefault("psycopg", None)  # type: ignore[arg-type]  (else Django picks psycopg 3)

from psycogreen.gevent import patch_psycopg  # noqa: E402

patch_psycopg()

from django_app.wsgi import application, close_client, get_client  # noqa: E402, F401
