"""The TechEmpower-style endpoints of wsgi_app.py on Flask-SQLAlchemy over postgresql+pgmux.

    PGMUX_DSN=postgresql://user:pw@localhost/db gunicorn -c examples/gunicorn_flask.conf.py

Plain Flask-SQLAlchemy, as its documentation teaches: models on ``db.Model``, every read
and write through ``db.session`` (one session per request, at the default isolation
level, removed when the request ends). pgmux keeps a session's transaction unpinned
while it only reads: its reads are multiplexed on the worker's ``pipeline_size``
pipelined connections with every other request's, and ending a session that only read
sends nothing. The first write takes one of the ``pinned_size`` pinned connections
(BEGIN goes with it) until the commit. Each gunicorn worker thus holds at most
pipeline_size + pinned_size connections, whatever its worker_connections. Endpoints: /db,
/queries?n=20 (n lookups), /updates?n=20 (n lookups, then their new numbers in one
commit), /stats (the worker's pgmux stats), /health.
"""

from __future__ import annotations

import os
import random
from typing import Any

import sqlalchemy as sa
from flask import Flask, jsonify, request
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

WORLD_ROWS = 10_000
MAX_QUERIES = 500
SEED_LOCK = 4242  # advisory lock key: one worker seeds, the others wait for it
APP_NAME = "pgmux-flask-"
PIPELINE_SIZE = 2
PINNED_SIZE = 2


def database_url() -> str:
    """PGMUX_DSN (or DATABASE_URL) as a postgresql+pgmux URL with the pool sizes."""
    dsn = os.environ.get("PGMUX_DSN") or os.environ.get("DATABASE_URL") or "postgresql://"
    url = sa.make_url(dsn).set(drivername="postgresql+pgmux")
    return url.update_query_dict({"pipeline_size": str(PIPELINE_SIZE),
                                  "pinned_size": str(PINNED_SIZE)}).render_as_string(False)


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)


class World(db.Model):
    __tablename__ = "world"
    id: Mapped[int] = mapped_column(primary_key=True)
    randomnumber: Mapped[int]


def create_app() -> Flask:
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = database_url()
    db.init_app(app)
    with app.app_context():
        sa.event.listen(db.engine, "do_connect", _name_the_worker)
    return app


def _name_the_worker(dialect: Any, record: Any, cargs: Any, cparams: dict) -> None:
    """application_name says which process a server connection belongs to (after fork)."""
    cparams["application_name"] = f"{APP_NAME}{os.getpid()}"


def seed() -> None:
    """Create and fill `world` unless it exists."""
    with db.engine.begin() as conn:
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": SEED_LOCK})
        World.__table__.create(conn, checkfirst=True)
        if conn.scalar(sa.select(sa.func.count()).select_from(World)) == 0:
            conn.execute(sa.text(
                "INSERT INTO world (id, randomnumber) SELECT i, 1 + floor(random() * :n)::int "
                "FROM generate_series(1, :n) i"), {"n": WORLD_ROWS})


def worker_client() -> Any:
    """This process's pgmux Client (every DB-API handle of the engine is one on it)."""
    with db.engine.connect() as conn:
        return conn.connection.dbapi_connection.client


def warm_up() -> None:
    """Seed, and open this worker's pipelined connections now (the pinned ones open when
    first needed)."""
    seed()
    worker_client().start()


def shutdown() -> None:
    """Close this worker's connections (gunicorn's worker_exit hook calls this)."""
    import pgmux.dbapi

    db.engine.dispose()
    pgmux.dbapi.close_shared_clients()


def random_id() -> int:
    return random.randint(1, WORLD_ROWS)


def query_count() -> int:
    try:
        n = int(request.args.get("n", "1"))
    except ValueError:
        n = 1
    return min(max(n, 1), MAX_QUERIES)


def world_dict(world: World) -> dict[str, int]:
    return {"id": world.id, "randomNumber": world.randomnumber}


def fetch_worlds(ids: list[int]) -> list[World]:
    """The worlds of ``ids``, in order, through the request's session: one lookup after
    another, each a round trip multiplexed with the other requests' (the place for a
    fan-out that sends them all at once)."""
    return [db.session.get(World, world_id) for world_id in ids]


app = create_app()


@app.route("/db")
def single_query() -> Any:
    return jsonify(world_dict(db.session.get(World, random_id())))


@app.route("/queries")
def multiple_queries() -> Any:
    worlds = fetch_worlds([random_id() for _ in range(query_count())])
    return jsonify([world_dict(world) for world in worlds])


@app.route("/updates")
def updates() -> Any:
    """n lookups (as /queries), then a new number for each, committed at once: the flush
    sends the n UPDATEs in primary-key order (concurrent requests take the row locks in
    the same order), on the pinned connection the first of them takes."""
    ids = sorted(random.sample(range(1, WORLD_ROWS + 1), query_count()))
    worlds = fetch_worlds(ids)
    for world in worlds:
        world.randomnumber = random_id()
    answer = [world_dict(world) for world in worlds]  # before commit() expires them
    db.session.commit()
    return jsonify(answer)


@app.route("/stats")
def stats() -> Any:
    return jsonify({"pid": os.getpid(), **worker_client().stats()})


@app.route("/health")
def health() -> Any:
    return jsonify({"status": "ok", "database": db.session.scalar(sa.select(1)) == 1})
