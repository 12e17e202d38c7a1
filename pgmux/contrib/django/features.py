"""Features: Django's PostgreSQL ones, with pgmux's server-side parameter binding."""

from __future__ import annotations

from django.db import DataError
from django.db.backends.postgresql.features import (
    DatabaseFeatures as PostgresDatabaseFeatures,
)

from pgmux.dbapi.quoting import NUL_MESSAGE


class DatabaseFeatures(PostgresDatabaseFeatures):
    # Parameters always travel apart from the SQL ($1, $2 ...), as with psycopg 3's
    # server_side_binding=True: Django skips and expects what it knows fails that way.
    uses_server_side_binding = True
    prohibits_null_characters_in_text_exception = (DataError, NUL_MESSAGE)
