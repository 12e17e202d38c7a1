"""Test databases: Django's PostgreSQL creation, closing pgmux's shared clients of a
database before it is cloned or dropped (a database with connections cannot be)."""

from __future__ import annotations

import sys
from typing import Any

from django.db.backends.base.creation import BaseDatabaseCreation
from django.db.backends.postgresql.creation import (
    DatabaseCreation as PostgresDatabaseCreation,
)

from pgmux.dbapi import close_shared_clients
from pgmux.errors import class_for_sqlstate

DUPLICATE_DATABASE = class_for_sqlstate("42P04")  # psycopg's errors.DuplicateDatabase

class DatabaseCreation(PostgresDatabaseCreation):
    def _execute_create_test_db(self, cursor: Any, parameters: dict[str, Any],
                                keepdb: bool = False) -> None:
        """Django's, knowing pgmux's DuplicateDatabase (42P04) for psycopg's."""
        try:
            if keepdb and self._database_exists(cursor, parameters["dbname"]):
                return  # kept from an earlier run
            BaseDatabaseCreation._execute_create_test_db(self, cursor, parameters, keepdb)
        except Exception as exc:
            if not isinstance(exc.__cause__, DUPLICATE_DATABASE):
                self.log(f"Got an error creating the test database: {exc}")
                sys.exit(2)
            if not keepdb:
                raise

    def _destroy_test_db(self, test_database_name: str, verbosity: int) -> None:
        close_shared_clients(dbname=test_database_name)
        super()._destroy_test_db(test_database_name, verbosity)
