"""Settings of the example project: the database from PGMUX_DSN (or DATABASE_URL, else the
PG* variables); the backend from DJANGO_APP_BACKEND (see the package docstring). Every view
runs in a transaction (ATOMIC_REQUESTS), as many Django projects do."""

import os

from pgmux.io.conninfo import parse_dsn

BACKEND = os.environ.get("DJANGO_APP_BACKEND", "pgmux")
APP_NAME = f"django-{BACKEND}-"  # + the worker's pid: which process a server connection is
PIPELINE_SIZE, PINNED_SIZE = 2, 4  # per worker: at most 6 server connections


def _database() -> dict:
    dsn = os.environ.get("PGMUX_DSN") or os.environ.get("DATABASE_URL") or ""
    params = parse_dsn(dsn) if dsn else {}
    options = {key: value for key, value in params.items()
               if key not in ("host", "port", "user", "password", "dbname")}
    options["application_name"] = f"{APP_NAME}{os.getpid()}"
    engine = "django.db.backends.postgresql"
    if BACKEND == "pgmux":
        engine = "pgmux.contrib.django"
        options.update(pipeline_size=PIPELINE_SIZE, pinned_size=PINNED_SIZE)
    return {"ENGINE": engine, "NAME": params.get("dbname", os.environ.get("PGDATABASE", "")),
            "USER": params.get("user", ""), "PASSWORD": params.get("password", ""),
            "HOST": params.get("host", ""), "PORT": params.get("port", ""),
            "CONN_MAX_AGE": 0, "ATOMIC_REQUESTS": True, "OPTIONS": options}


DATABASES = {"default": _database()}
INSTALLED_APPS = ["django_app"]
ROOT_URLCONF = "django_app.urls"
SECRET_KEY = "an example: not a secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
MIDDLEWARE: list[str] = []
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates",
              "DIRS": [os.path.join(os.path.dirname(__file__), "templates")]}]
