"""Requirements for SQLAlchemy's dialect compliance suite against postgresql+pgmux.

SQLAlchemy's own requirements for PostgreSQL (test/requirements.py of its source
distribution). Nothing is turned off: the multiplexing driver provides everything the
suite asks of a PostgreSQL driver (session state sticks to one server connection).
"""

from sqlalchemy.testing import exclusions
from test.requirements import DefaultRequirements


class Requirements(DefaultRequirements):
    @property
    def infinity_floats(self):
        # SQLAlchemy expects a failure from drivers it does not know; pgmux returns inf.
        return exclusions.open()
