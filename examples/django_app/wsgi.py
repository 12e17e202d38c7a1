"""The WSGI entry point (pgmux.contrib.django unless DJANGO_APP_BACKEND says otherwise), and the
hooks gunicorn's config calls: get_client() warms a worker up, close_client() closes it."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_app.settings")

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()


def get_client():
    """Seed the tables if needed (one worker at a time); the worker's pgmux client, if any,
    with its pipelined connections open (its pinned ones open when first needed)."""
    from django.db import connection

    from django_app.seed import seed

    seed()
    connection.ensure_connection()
    client = getattr(connection.connection, "client", None)
    connection.close()
    return client.start() if client is not None else None


def close_client() -> None:
    """Close this worker's connections: Django's, then pgmux's shared clients (in-flight
    queries finish, each server connection gets a Terminate)."""
    from django.db import connections

    connections.close_all()
    if os.environ.get("DJANGO_APP_BACKEND", "pgmux") == "pgmux":
        import pgmux.dbapi

        pgmux.dbapi.close_shared_clients()
