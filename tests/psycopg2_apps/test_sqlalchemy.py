"""SQLAlchemy's ``postgresql+psycopg2`` dialect and its ORM: reads and writes from 200 greenlets,
books that balance, and the server connections they took."""

from __future__ import annotations

import pytest

from psycopg2_apps import books
from psycopg2_apps.kit import (
    DROP_IN,
    DROP_IN_BOUND,
    MODULE,
    ConnectionSampler,
    fresh_database,
    need_connections,
    run_script,
    with_application_name,
)

pytest.importorskip("sqlalchemy")

GREENLETS = 200
OPERATIONS = 8  # per greenlet: 2 lookups, 2 totals, 2 notes, 2 transfers


def test_sqlalchemy_orm_from_200_greenlets_keeps_the_books(apps_pg, driver):
    need_connections(apps_pg, driver, GREENLETS + 1)
    dbname = f"sqla_books_{driver}"
    dsn = fresh_database(apps_pg, dbname)
    app_name = f"sqla-books-{driver}"
    with ConnectionSampler(apps_pg.dsn, app_name) as sampler:
        result = run_script("sqla_books", driver, with_application_name(dsn, app_name),
                            str(GREENLETS), str(OPERATIONS))
    assert result["module"] == MODULE[driver]
    books.check(apps_pg, dbname, result, GREENLETS, OPERATIONS)
    peak = sampler.peak()
    print(f"{driver}: {result['operations']} ORM operations from {GREENLETS} greenlets in "
          f"{result['seconds']}s, at most {peak} server connections in {sampler.samples} "
          "samples")
    assert sampler.samples > 0 and peak > 0
    if driver == DROP_IN:
        assert peak <= DROP_IN_BOUND, (peak, DROP_IN_BOUND)
