"""SQLAlchemy's ``postgresql+psycopg2`` dialect and its ORM: reads and writes from 200 greenlets,
books that balance, and the server connections they took."""

from __future__ import annotations

import pytest

from psycopg2_apps.kit import run_orm_books

pytest.importorskip("sqlalchemy")

GREENLETS = 200
OPERATIONS = 8  # per greenlet: 2 lookups, 2 totals, 2 notes, 2 transfers


def test_sqlalchemy_orm_from_200_greenlets_keeps_the_books(apps_pg, driver):
    run_orm_books(apps_pg, driver, "sqla", GREENLETS, OPERATIONS)
