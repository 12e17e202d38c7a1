"""SQLAlchemy's dialect compliance suite, as its test/dialect/test_suite.py runs it."""

from sqlalchemy.testing.suite import *  # noqa: F403  (the whole of test/dialect/test_suite.py)
from sqlalchemy.testing.suite.test_results import (
    ServerSideCursorsTest as _ServerSideCursorsTest,
)


class ServerSideCursorsTest(_ServerSideCursorsTest):
    def _is_server_side(self, cursor):
        # The suite recognises the server-side cursors of SQLAlchemy's own drivers only
        # (its own TODO says so); pgmux's are its named cursors, as psycopg's.
        return cursor.name is not None
