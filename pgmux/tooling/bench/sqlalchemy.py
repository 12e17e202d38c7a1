"""SQLAlchemy clients for the benchmark: Core statements through an Engine, per query
``engine.connect()`` (a pool checkout) and ``execute``, as a web app does.

``sqlalchemy-pgmux`` is ``postgresql+pgmux`` under the AUTOCOMMIT isolation level:
statements are multiplexed on ``connections`` pipelined server connections.
``sqlalchemy-psycopg2`` is ``postgresql+psycopg2`` with psycogreen and a QueuePool of
``connections`` (AUTOCOMMIT too): one query per server connection at a time. Both run
monkey-patched (SQLAlchemy's pool locks must be gevent's). ``SELECT $1::int`` becomes a
Core ``select()`` of an integer bind parameter; other SQL becomes ``text()``.
"""

from __future__ import annotations

import re
from typing import Any

from pgmux.tooling.bench.clients import Adapter, Params, PgmuxMultiplexed

_DOLLAR = re.compile(r"\$(\d+)")
_SELECT_INT = "SELECT $1::int"


class SqlAlchemyEngine(Adapter):
    """An Engine; subclasses give the URL scheme and the engine's keyword arguments."""

    drivername = ""
    modules: tuple[str, ...] = ("sqlalchemy",)
    monkey_patch = True

    def __init__(self, dsn: str | None, connections: int, params: dict[str, Any],
                 pinned: bool = False):
        super().__init__(dsn, connections, params, pinned)
        import sqlalchemy as sa

        self.sa = sa
        self.engine = sa.create_engine(f"postgresql+{self.drivername}://",
                                       creator=self.connect, **self.engine_args())
        self.auto = self.engine.execution_options(isolation_level="AUTOCOMMIT")

    def connect(self) -> Any:
        """A new DB-API connection."""
        raise NotImplementedError

    def engine_args(self) -> dict[str, Any]:
        return {}

    def native(self, sql: str) -> Any:
        sa = self.sa
        if sql == _SELECT_INT:
            return sa.select(sa.bindparam("p1", type_=sa.Integer))
        return sa.text(_DOLLAR.sub(r":p\1", sql))

    def start(self) -> None:
        import gevent

        def connect() -> None:
            with self.auto.connect() as conn:
                conn.execute(self.sa.text("SELECT 1"))

        jobs = [gevent.spawn(connect) for _ in range(self.connections)]
        gevent.joinall(jobs, raise_error=True)

    def _execute(self, statement: Any, params: Params) -> Any:
        with self.auto.connect() as conn:
            return conn.execute(statement, {f"p{i}": v for i, v in enumerate(params, 1)})

    def fetchval(self, sql: Any, params: Params) -> Any:
        return self._execute(sql, params).scalar()

    def fetchone(self, sql: Any, params: Params) -> Any:
        return self._execute(sql, params).first()

    def fetchall(self, sql: Any, params: Params) -> Any:
        return self._execute(sql, params).all()

    def close(self) -> None:
        self.engine.dispose()


class SqlAlchemyPgmux(SqlAlchemyEngine):
    name = "sqlalchemy-pgmux"
    description = "SQLAlchemy Core, postgresql+pgmux (AUTOCOMMIT: multiplexed)"
    drivername = "pgmux"
    multiplexed = True

    def connect(self) -> Any:
        import pgmux.dbapi

        return pgmux.dbapi.connect(self.dsn, pipeline_size=self.connections, pinned_size=1,
                                   acquire_timeout=120.0, **self.params)

    def start(self) -> None:
        super().start()
        with self.auto.connect() as conn:
            dbapi_connection = conn.connection.dbapi_connection
            assert dbapi_connection is not None  # (a checked-out connection has one)
            self.db = dbapi_connection.client

    fill = PgmuxMultiplexed.fill

    def close(self) -> None:
        super().close()
        self.db.close(timeout=2.0)


class Psycopg2Driver(Adapter):
    """An Engine's driver: psycopg2 waiting through psycogreen, a QueuePool of
    ``connections`` (put before the Engine class among the bases)."""

    drivername = "psycopg2"
    modules: tuple[str, ...] = ("sqlalchemy", "psycopg2", "psycogreen")

    def __init__(self, dsn: str | None, connections: int, params: dict[str, Any],
                 pinned: bool = False):
        from psycogreen.gevent import patch_psycopg

        patch_psycopg()
        super().__init__(dsn, connections, params, pinned)

    def connect(self) -> Any:
        import psycopg2

        return psycopg2.connect(self.dsn or "", **self.params)

    def engine_args(self) -> dict[str, Any]:
        return queue_pool(self.connections)


def queue_pool(connections: int) -> dict[str, Any]:
    """create_engine()'s arguments for a QueuePool of ``connections``, none more."""
    return {"pool_size": connections, "max_overflow": 0, "pool_timeout": 120}


class SqlAlchemyPsycopg2(Psycopg2Driver, SqlAlchemyEngine):
    name = "sqlalchemy-psycopg2"
    description = "SQLAlchemy Core, postgresql+psycopg2 + psycogreen, QueuePool"


SQLALCHEMY_CLIENTS: dict[str, type[Adapter]] = {
    c.name: c for c in (SqlAlchemyPgmux, SqlAlchemyPsycopg2)}
