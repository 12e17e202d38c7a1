"""Settings for Django's own test suite (tests/runtests.py --settings=pgmux_suite_settings).

Django's tests/test_sqlite.py, on PostgreSQL: the "default" and "other" databases of the
server in $PGMUX_SUITE_DSN_* (host, port, user), through the backend $PGMUX_SUITE_BACKEND
names: "pgmux" (pgmux.contrib.django) or "control" (Django's own PostgreSQL backend, on
psycopg2 with psycogreen: see pgmux_suite_boot). Results go to $PGMUX_SUITE_RESULTS
(pgmux_suite_runner).
"""

import os

BACKEND = os.environ.get("PGMUX_SUITE_BACKEND", "pgmux")
ENGINES = {"pgmux": "pgmux.contrib.django", "control": "django.db.backends.postgresql"}
# Each DatabaseTestCase holds a transaction on each of its databases for the whole class,
# and threaded tests (transactions, select_for_update) hold more: room for them.
PGMUX_OPTIONS = {"pipeline_size": 2, "pinned_size": 8, "acquire_timeout": 60}


def _database(name: str) -> dict:
    return {
        "ENGINE": ENGINES[BACKEND],
        "NAME": f"{os.environ.get('PGMUX_SUITE_DB_PREFIX', 'django_suite')}_{name}",
        "USER": os.environ.get("PGMUX_SUITE_USER", "postgres"),
        "PASSWORD": os.environ.get("PGMUX_SUITE_PASSWORD", ""),
        "HOST": os.environ.get("PGMUX_SUITE_HOST", "127.0.0.1"),
        "PORT": os.environ.get("PGMUX_SUITE_PORT", "5432"),
        "OPTIONS": dict(PGMUX_OPTIONS) if BACKEND == "pgmux" else {},
    }


DATABASES = {"default": _database("default"), "other": _database("other")}

SECRET_KEY = "django_tests_secret_key"

PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.MD5PasswordHasher",
]

DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

USE_TZ = False

TEST_RUNNER = "pgmux_suite_runner.RecordingRunner"
