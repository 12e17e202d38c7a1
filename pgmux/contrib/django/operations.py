"""Operations: Django's PostgreSQL ones; SQL literals and JSON parameters through pgmux."""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql.operations import (
    DatabaseOperations as PostgresDatabaseOperations,
)
from django.db.backends.postgresql.operations import get_json_dumps

from pgmux.contrib.django.types import registry
from pgmux.dbapi.quoting import mogrify
from pgmux.errors import DataError, ProgrammingError
from pgmux.types import Json


class DatabaseOperations(PostgresDatabaseOperations):
    registry = registry  # how parameters are encoded (and so quoted)

    def compose_sql(self, sql: str, params: Any) -> str:
        """``sql`` with its parameters as literals, without a connection (the schema
        editor's DDL, SET ROLE, the queries logged)."""
        return mogrify(sql, params, self.registry)

    def last_executed_query(self, cursor: Any, sql: str, params: Any) -> str | None:
        """The statement as it would read with its parameters in place (they were sent
        apart from it); None when they cannot be written as literals."""
        try:
            return self.compose_sql(sql, params)
        except (DataError, ProgrammingError):
            return None

    def adapt_json_value(self, value: Any, encoder: Any) -> Json:
        return Json(value, dumps=get_json_dumps(encoder))

    def adapt_ipaddressfield_value(self, value: Any) -> str | None:
        """The address as text (typed inet by the server from the column or lookup)."""
        return value or None
