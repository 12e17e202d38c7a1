"""Django configured once for the session on the test server (`pg`), database pgmux_django,
with the models of pgmux_django_app created; each test starts with an empty table."""

from __future__ import annotations

import pytest
from support.djangotest import DATABASE, database_settings


@pytest.fixture(scope="session")
def django_setup(pg):
    """Django's settings and app registry, once per session; the tables, created once."""
    pytest.importorskip("django")
    import django
    from django.conf import settings

    pg.admin(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)", dbname="postgres")
    pg.admin(f"CREATE DATABASE {DATABASE}", dbname="postgres")
    pg.admin("CREATE EXTENSION hstore", dbname=DATABASE)
    if not settings.configured:
        settings.configure(
            DATABASES={"default": database_settings(pg)},
            INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.postgres",
                            "pgmux_django_app"],
            USE_TZ=True, TIME_ZONE="UTC", DEFAULT_AUTO_FIELD="django.db.models.AutoField",
            SECRET_KEY="pgmux-tests",
            # django.test brings staticfiles' lazy storage: with STATIC_URL it can be set up
            # by whoever touches it (the memory tests walk every object in the process).
            STATIC_URL="static/")
        django.setup()
    from django.db import connection
    from pgmux_django_app.models import Item, Tagged

    with connection.schema_editor() as editor:
        editor.create_model(Item)
        editor.create_model(Tagged)
    yield settings
    from django.db import connections

    import pgmux.dbapi

    connections.close_all()
    pgmux.dbapi.close_shared_clients(dbname=DATABASE)


@pytest.fixture
def django_db(django_setup):
    """An empty Item table; every connection this test opened is closed after it."""
    from django.db import connections
    from pgmux_django_app.models import Item, Tagged

    Item.objects.all().delete()
    Tagged.objects.all().delete()
    yield django_setup
    connections.close_all()
