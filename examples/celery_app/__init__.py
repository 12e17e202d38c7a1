"""A Celery app whose tasks are plain psycopg2 code, for a worker with --pool=gevent.

    redis-server &                                   # the broker and the result backend
    python -m celery_app.schema                      # tables and 20 accounts (once)
    PSYCOPG2_DRIVER=pgmux celery -A celery_app.app worker --pool=gevent --concurrency=500

(from the examples/ directory, or with it on PYTHONPATH). The environment:

* ``DATABASE_URL``: the libpq URL or "key=value" string of the database;
* ``CELERY_BROKER_URL`` / ``CELERY_RESULT_BACKEND``: default ``redis://127.0.0.1:6379/0``;
* ``PSYCOPG2_DRIVER``: ``psycopg2`` (the default: the real psycopg2, made cooperative by
  ``psycogreen.gevent.patch_psycopg()``) or ``pgmux`` (``pgmux.psycopg2.register()``: the
  same task code on pgmux's multiplexed client, at most pipeline_size + pinned_size server
  connections per worker however many greenlets run tasks);
* ``CELERY_APP_DB_CONNECTIONS``: the size of the tasks' connection pool (default 100).

The choice is made once, at the top of ``celery_app/app.py`` (see ``celery_app.driver``);
nothing in ``celery_app/tasks.py`` changes between the two.
"""
