"""The Celery application: ``celery -A celery_app.app worker --pool=gevent --concurrency=500``.

The psycopg2 implementation is chosen first, before Celery or the tasks import anything
that imports psycopg2 (``celery_app.driver``).
"""

# ruff: noqa: E402  -- the driver is chosen before anything imports psycopg2
from celery_app.driver import use_chosen_psycopg2

DRIVER = use_chosen_psycopg2()

import os

from celery import Celery

REDIS = "redis://127.0.0.1:6379/0"

app = Celery("celery_app",
             broker=os.environ.get("CELERY_BROKER_URL", REDIS),
             backend=os.environ.get("CELERY_RESULT_BACKEND", REDIS),
             include=["celery_app.tasks"])
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_expires=3600,
    broker_connection_retry_on_startup=True,
    # One result backend (and its Redis connection pool) for the worker: by default Celery
    # keeps one per thread, which under the gevent pool means one per task's greenlet, each
    # opening a Redis connection of its own.
    result_backend_thread_safe=True,
    worker_hijack_root_logger=False,
)
