"""Process-wide settings of the drop-in that several of its modules read."""

from __future__ import annotations

from typing import Any

# The cursor class a connection makes by default (pgmux.psycopg2._cursor.cursor, set when
# that module is loaded): a list, so modules below it can read it.
DEFAULT_CURSOR: list[Any] = [None]
