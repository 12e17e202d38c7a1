"""The Django settings tests/django's tests run with (conftest configures Django once)."""

from __future__ import annotations

DATABASE = "pgmux_django"
APPLICATION_NAME = "pgmux-django-tests"
PIPELINE_SIZE, PINNED_SIZE = 2, 4


def database_settings(pg, **options) -> dict:
    """DATABASES["default"] for the test server's database pgmux_django, with OPTIONS."""
    params = pg.params_for(dbname=DATABASE)
    return {"ENGINE": "pgmux.contrib.django", "NAME": DATABASE, "USER": params["user"],
            "PASSWORD": "", "HOST": params["host"], "PORT": str(params["port"]),
            "OPTIONS": {"pipeline_size": PIPELINE_SIZE, "pinned_size": PINNED_SIZE,
                        "application_name": APPLICATION_NAME, **options}}
