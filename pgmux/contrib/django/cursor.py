"""The debug cursor (DEBUG=True, connection.queries): Django's, with COPY logged too."""

from __future__ import annotations

from typing import Any

from django.db.backends.utils import CursorDebugWrapper as BaseCursorDebugWrapper


class CursorDebugWrapper(BaseCursorDebugWrapper):
    def copy(self, statement: str) -> Any:
        with self.debug_sql(statement):
            return self.cursor.copy(statement)

    def copy_expert(self, sql: str, file: Any, *args: Any) -> None:
        with self.debug_sql(sql):
            return self.cursor.copy_expert(sql, file, *args)
