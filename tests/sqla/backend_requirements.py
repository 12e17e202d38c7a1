"""Requirements for SQLAlchemy's backend suite against postgresql+pgmux (backend_suite.py).

SQLAlchemy's own requirements for PostgreSQL (test/requirements.py of its source
distribution) enable several groups of tests by driver name, for psycopg, psycopg2,
asyncpg or pg8000 only. Each group below is enabled for pgmux where pgmux does what the
group tests; the groups left off, and why, are listed at the end (``TURNED_OFF``).
``backend_plugin`` names the single tests (those SQLAlchemy names psycopg for that pgmux
runs too, those it skips, and the psycopg-only ones that stay so), each with its reason.
"""

from sqlalchemy.testing import exclusions
from test.requirements import DefaultRequirements


class Requirements(DefaultRequirements):
    @property
    def range_types(self):
        """int4/int8/num/ts/tstz/date ranges: pgmux decodes them to pgmux.types.Range,
        which the dialect hands to SQLAlchemy as its Range."""
        return exclusions.open()

    @property
    def multirange_types(self):
        return exclusions.only_on("postgresql >= 14")

    @property
    def native_hstore(self):
        """hstore values arrive as dicts (text and binary, arrays too) and are sent from
        dicts, as psycopg does once hstore is registered."""
        return exclusions.open()

    @property
    def psycopg_or_pg8000_compatibility(self):
        """Range values given as text, AUTOCOMMIT running COMMIT PREPARED outside a
        transaction block, a Numeric result of a type it cannot convert raising: all
        driver behaviour pgmux shares (test_client_encoding is skipped: see
        backend_plugin)."""
        return exclusions.open()

    @property
    def pyformat_paramstyle(self):
        """pgmux.dbapi's paramstyle is pyformat, with psycopg2's rules."""
        return exclusions.open()

    @property
    def format_paramstyle(self):
        """pgmux.dbapi's pyformat also takes %s with a sequence (format style), as
        psycopg2's does (SQLAlchemy names pg8000 only)."""
        return exclusions.open()

    @property
    def infinity_floats(self):
        """float('inf') and NaN round-trip (SQLAlchemy expects a failure from drivers it
        does not know)."""
        return exclusions.open()


# Requirements SQLAlchemy enables for psycopg by driver name that stay off for pgmux, and why.
TURNED_OFF = {
    "any_psycopg_compatibility": (
        "its tests import psycopg's own modules (psycopg.errors.TransactionRollback, "
        "psycopg2.extensions), read notices through psycopg's API, or parse arrays of enums "
        "from their text (_ArrayOfEnum), which pgmux returns as lists of str"),
    "psycopg_only_compatibility": "psycopg 3's own API (its adapters, connection attributes)",
}
