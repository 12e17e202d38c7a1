"""Queries on a bare server connection, no engine: each column's raw bytes in text or binary.

The codec tests use it to get the same values from a real server in both result formats
(Parse/Bind/Describe/Execute/Sync with the result format asked for), and to run SET.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from pgmux.errors import DatabaseError
from pgmux.io.connect import ServerConnection, connect
from pgmux.io.conninfo import make_conninfo
from pgmux.protocol import backend, frontend
from support.server import PgServer

PATIENCE = 10.0  # seconds to connect


@dataclass(frozen=True)
class RawResult:
    """Column type OIDs and rows of raw column bytes (None for NULL)."""

    type_oids: tuple[int, ...]
    rows: list[list[bytes | None]]

    def decoded(self, decoder_for: Callable[[int], Callable[[bytes], Any]]) -> list[list[Any]]:
        """The rows with each column decoded by ``decoder_for(type_oid)`` (None stays None)."""
        decoders = [decoder_for(oid) for oid in self.type_oids]
        return [[None if value is None else decode(value)
                 for decode, value in zip(decoders, row, strict=True)] for row in self.rows]


class RawConnection:
    """One server connection driven message by message."""

    def __init__(self, conn: ServerConnection):
        self.conn = conn

    def query(self, sql: str, params: Sequence[bytes | None] = (), *, result_format: int = 0,
              param_oids: Sequence[int] = ()) -> RawResult:
        """Run ``sql`` (text parameters) with every result column in ``result_format``."""
        self.conn.transport.sendall(b"".join((
            frontend.parse(b"", sql, param_oids),
            frontend.bind(b"", b"", (), params, (result_format,)),
            frontend.describe_portal(),
            frontend.execute(),
            frontend.SYNC,
        )))
        return self._collect()

    def execute(self, sql: str) -> None:
        """Run ``sql`` with a simple Query (SET and the like); raise its error if any."""
        self.conn.transport.sendall(frontend.query(sql))
        self._collect()

    def parameter(self, name: str) -> str:
        """The latest value the server reported for a setting (ParameterStatus)."""
        return self.conn.parameters[name]

    def _collect(self) -> RawResult:
        type_oids: tuple[int, ...] = ()
        rows: list[list[bytes | None]] = []
        error: DatabaseError | None = None
        for kind, payload in self._messages_until_ready():
            if kind == backend.ROW_DESCRIPTION:
                type_oids = tuple(column.type_oid for column in
                                  backend.parse_row_description(payload))
            elif kind == backend.DATA_ROW:
                rows.append(backend.parse_data_row(payload))
            elif kind == backend.ERROR_RESPONSE:
                error = DatabaseError.from_fields(backend.parse_fields(payload))
            elif kind == backend.PARAMETER_STATUS:
                name, value = backend.parse_parameter_status(payload)
                self.conn.parameters[name] = value
        if error is not None:
            raise error
        return RawResult(type_oids, rows)

    def _messages_until_ready(self) -> Iterator[tuple[int, bytes]]:
        frames = self.conn.frames
        while True:
            message = frames.next_message()
            if message is None:
                frames.feed(self.conn.transport.recv(256 * 1024))
                continue
            yield message
            if message[0] == backend.READY_FOR_QUERY:
                return


@contextmanager
def raw_connection(server: PgServer, **params) -> Iterator[RawConnection]:
    """A RawConnection to ``server`` (the superuser on the test database), closed on exit."""
    conn = connect(make_conninfo(server.dsn, **params), timeout=PATIENCE)
    try:
        yield RawConnection(conn)
    finally:
        conn.close()


def raw_connection_fixture(time_zone: str):
    """A module-scoped fixture: a RawConnection to PostgreSQL 15 and to 18 in turn, in a zone."""

    @pytest.fixture(scope="module", params=["pg", "pg18"])
    def raw(request):
        with raw_connection(request.getfixturevalue(request.param),
                            options=f"-c TimeZone={time_zone}") as conn:
            yield conn

    return raw
