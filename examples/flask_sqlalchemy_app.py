"""The TechEmpower-style endpoints of wsgi_app.py on Flask-SQLAlchemy over postgresql+pgmux.

    PGMUX_DSN=postgresql://user:pw@localhost/db gunicorn -c examples/gunicorn_flask.conf.py

Reads run on an AUTOCOMMIT engine view, so they are multiplexed on the pipeline: any
number of greenlets share each worker's ``pipeline_size`` server connections. /updates
reads the same way, then writes with one ORM bulk UPDATE on that view: an executemany,
which pgmux sends as one atomic unit on the pipeline (all or nothing). Transactions
(``db.session`` with its default isolation; the seeding) are pinned to one of the
``pinned_size`` connections until commit. Each gunicorn worker thus holds at most
pipeline_size + pinned_size connections, whatever its worker_connections. Endpoints: /db,
/queries?n=20 (n lookups fired concurrently), /updates?n=20, /stats (the worker's pgmux
stats), /health.
"""

from __future__ import annotations

import os
import random
from typing import Any

import gevent
import sqlalchemy as sa
from flask import Flask, jsonify, request
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

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
    global autocommit
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = database_url()
    db.init_app(app)
    with app.app_context():
        sa.event.listen(db.engine, "do_connect", _name_the_worker)
        autocommit = db.engine.execution_options(isolation_level="AUTOCOMMIT")
    return app


autocommit: sa.Engine  # db.engine with AUTOCOMMIT: usable outside the app context too


def _name_the_worker(dialect: Any, record: Any, cargs: Any, cparams: dict) -> None:
    """application_name says which process a server connection belongs to (after fork)."""
    cparams["application_name"] = f"{APP_NAME}{os.getpid()}"


def multiplexed() -> Session:
    """A session whose statements autocommit: multiplexed, no pinned connection (usable
    from greenlets the request spawns, which have no Flask app context)."""
    return Session(autocommit)


def seed() -> None:
    """Create and fill `world` unless it exists."""
    with db.engine.begin() as conn:
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": SEED_LOCK})
        World.__table__.create(conn, checkfirst=True)
        if conn.scalar(sa.select(sa.func.count()).select_from(World)) == 0:
            conn.execute(sa.text(
                "INSERT INTO world (id, randomnumber) SELECT i, 1 + floor(random() * :n)::int "
                "FROM generate_series(1, :n) i"), {"n": WORLD_ROWS})


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


def fetch_world(world_id: int) -> dict[str, int]:
    with multiplexed() as session:
        return world_dict(session.get(World, world_id))


app = create_app()


@app.route("/db")
def single_query() -> Any:
    return jsonify(fetch_world(random_id()))


@app.route("/queries")
def multiple_queries() -> Any:
    jobs = [gevent.spawn(fetch_world, random_id()) for _ in range(query_count())]
    gevent.joinall(jobs, raise_error=True)
    return jsonify([job.value for job in jobs])


@app.route("/updates")
def updates() -> Any:
    """n lookups fired concurrently (as /queries), then one ORM bulk UPDATE by primary key
    under AUTOCOMMIT: SQLAlchemy's executemany, which pgmux sends as one atomic unit (one
    round trip, all or nothing, no pinned connection)."""
    ids = sorted(random.sample(range(1, WORLD_ROWS + 1), query_count()))  # lock order
    jobs = [gevent.spawn(fetch_world, world_id) for world_id in ids]
    gevent.joinall(jobs, raise_error=True)
    worlds = [job.value for job in jobs]
    for world in worlds:
        world["randomNumber"] = random_id()
    with multiplexed() as session:
        session.execute(sa.update(World), [
            {"id": world["id"], "randomnumber": world["randomNumber"]} for world in worlds])
    return jsonify(worlds)


@app.route("/stats")
def stats() -> Any:
    with db.engine.connect() as conn:
        client = conn.connection.dbapi_connection.client
        return jsonify({"pid": os.getpid(), **client.stats()})


@app.route("/health")
def health() -> Any:
    with multiplexed() as session:
        return jsonify({"status": "ok", "database": session.scalar(sa.select(1)) == 1})
