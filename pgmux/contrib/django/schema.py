"""The schema editor: Django's PostgreSQL one, with pgmux's client-side literals."""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql.schema import (
    DatabaseSchemaEditor as PostgresDatabaseSchemaEditor,
)

from pgmux.dbapi.quoting import quote


class DatabaseSchemaEditor(PostgresDatabaseSchemaEditor):
    def quote_value(self, value: Any) -> str:
        """``value`` as a SQL literal (DDL takes no parameters: DEFAULT clauses, ...)."""
        return quote(value, self.connection.ops.registry)
