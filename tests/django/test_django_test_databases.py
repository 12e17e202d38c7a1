"""Test databases through the Django backend: create, clone and drop work while the backend's
shared clients hold connections to them (they are closed first: a database with connections
can be neither a template nor dropped)."""

from __future__ import annotations

import pytest
from support.djangotest import database_settings

pytest.importorskip("django")

ALIAS = "creation"
SOURCE = "pgmux_django_creation"


def _databases(pg) -> set[str]:
    out = pg.admin(f"SELECT datname FROM pg_database WHERE datname LIKE '%{SOURCE}%'",
                   dbname="postgres")
    return set(out.split())


def _connections_to(pg, name: str) -> int:
    return int(pg.admin(f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{name}'",
                        dbname="postgres"))


@pytest.fixture
def creation_alias(django_db, pg):
    from django.db import connections

    settings = {**database_settings(pg), "NAME": SOURCE}
    configured = connections.configure_settings({"default": settings, ALIAS: settings})
    connections.settings[ALIAS] = configured[ALIAS]
    yield connections[ALIAS]
    connections[ALIAS].close()
    del connections[ALIAS]
    del connections.settings[ALIAS]
    for name in _databases(pg):
        pg.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", dbname="postgres")


def test_create_clone_and_destroy_test_databases(creation_alias, pg):
    from django.db.models.signals import pre_migrate

    def with_hstore(using, **kwargs):  # the test models use an hstore column
        if using == ALIAS:
            with connection.cursor() as cursor:
                cursor.execute("CREATE EXTENSION IF NOT EXISTS hstore")

    connection = creation_alias
    pre_migrate.connect(with_hstore)
    try:
        test_name = connection.creation.create_test_db(verbosity=0, autoclobber=True,
                                                       serialize=False)
    finally:
        pre_migrate.disconnect(with_hstore)
    assert test_name == f"test_{SOURCE}" and connection.settings_dict["NAME"] == test_name
    with connection.cursor() as cursor:  # the shared client now holds connections to it
        cursor.execute("CREATE TABLE kept (id int)")
        cursor.execute("SELECT current_database()")
        assert cursor.fetchone() == (test_name,)
    assert _connections_to(pg, test_name) > 0

    connection.creation.clone_test_db(suffix="1", verbosity=0, keepdb=False)
    clone = f"{test_name}_1"
    assert clone in _databases(pg)
    assert "kept" in pg.admin("SELECT tablename FROM pg_tables", dbname=clone).split()

    with connection.cursor() as cursor:  # usable again after the clone
        cursor.execute("SELECT count(*) FROM kept")
        assert cursor.fetchone() == (0,)
    connection.creation.destroy_test_db(verbosity=0, suffix="1")
    connection.creation.destroy_test_db(SOURCE, verbosity=0)
    assert _databases(pg) == set()
    assert connection.settings_dict["NAME"] == SOURCE
