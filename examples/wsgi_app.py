"""A gevent WSGI app on pgmux, in the spirit of the TechEmpower benchmarks.

    PGMUX_DSN=postgresql://user:pw@localhost/db python examples/wsgi_app.py   # port 8000
    gunicorn -c examples/gunicorn.conf.py                                      # 2 gevent workers

Endpoints: /db (one random row), /queries?n=20 (n lookups sent together from the request's
greenlet with db.gather: one fan-out on the pipeline, no greenlet spawned), /updates?n=20
(n lookups the same way, then the n UPDATEs as one atomic unit), /stats (pgmux stats),
/health. The DSN comes from PGMUX_DSN or DATABASE_URL
(else the PG* variables).
One Client per process, created lazily on the first request (so after gunicorn's fork,
also with --preload); it seeds the `world` table (10,000 rows) if missing.
"""

# ruff: noqa: E402  -- run as a script, gevent must monkey-patch before anything else loads
if __name__ == "__main__":
    from gevent import monkey

    monkey.patch_all()

import json
import os
import random
import socket
import sys
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from gevent.lock import Semaphore
from gevent.pywsgi import WSGIServer

import pgmux

WORLD_ROWS = 10_000
MAX_QUERIES = 500
SEED_LOCK = 4242  # advisory lock key: one process seeds, the others wait for it
APP_NAME = "pgmux-example"
WORLD_SQL = "SELECT id, randomnumber FROM world WHERE id = $1"
UPDATE_SQL = "UPDATE world SET randomnumber = $2 WHERE id = $1"

_client: pgmux.Client | None = None
_client_lock = Semaphore()


def dsn_from_env() -> str | None:
    return os.environ.get("PGMUX_DSN") or os.environ.get("DATABASE_URL") or None


def get_client() -> pgmux.Client:
    """This process's Client: created, seeded and prepared on first use (after fork)."""
    global _client
    if _client is not None and not _client.closed:
        return _client
    with _client_lock:
        if _client is None or _client.closed:
            db = pgmux.Client(dsn_from_env(), pipeline_size=2, pinned_size=4,
                        fallback_application_name=f"{APP_NAME}-{os.getpid()}")
            try:
                seed(db)
                db.prepare("world_by_id", WORLD_SQL)
                db.prepare("world_update", UPDATE_SQL)
            except BaseException:
                db.close()
                raise
            _client = db
    return _client


def close_client() -> None:
    """Close this process's Client, if any (gunicorn's worker_exit hook calls this)."""
    global _client
    db, _client = _client, None
    if db is not None:
        db.close()


def seed(db: pgmux.Client) -> None:
    """Create and fill `world` unless it exists (DDL goes through a transaction: the
    multiplexed path refuses it)."""
    with db.transaction() as tx:
        tx.execute("SELECT pg_advisory_xact_lock($1)", [SEED_LOCK])
        tx.execute("CREATE TABLE IF NOT EXISTS world "
                   "(id integer PRIMARY KEY, randomnumber integer NOT NULL)")
        if tx.fetchval("SELECT count(*) FROM world") == 0:
            tx.execute("INSERT INTO world (id, randomnumber) "
                       "SELECT i, 1 + floor(random() * $1)::int FROM generate_series(1, $1) i",
                       [WORLD_ROWS])


def random_id() -> int:
    return random.randint(1, WORLD_ROWS)


def row_dict(row: Any) -> dict[str, int]:
    return {"id": row[0], "randomNumber": row[1]}


def query_count(environ: dict) -> int:
    """The `n` query parameter, clamped to 1..500 like the TechEmpower rules."""
    values = parse_qs(environ.get("QUERY_STRING", "")).get("n", ["1"])
    try:
        n = int(values[0])
    except ValueError:
        n = 1
    return min(max(n, 1), MAX_QUERIES)


# endpoints ----------------------------------------------------------------------------------

def single_query(environ: dict) -> Any:
    row = get_client().fetchone("SELECT id, randomnumber FROM world WHERE id = $1", [random_id()])
    return row_dict(row)


def multiple_queries(environ: dict) -> Any:
    """n lookups, each its own query, handed to the multiplexer at once from this greenlet
    (the TechEmpower rules allow that, not one query for all): spread over the pipelined
    connections, written together, answered in one wait."""
    db = get_client()
    by_id = db.prepare("world_by_id", WORLD_SQL)
    results = db.gather([(by_id, [random_id()]) for _ in range(query_count(environ))])
    return [row_dict(result[0]) for result in results]


def updates(environ: dict) -> Any:
    """Read n rows, each its own query, handed over at once (as /queries); then write them
    all as one atomic unit: one Sync on a pipelined connection, one round trip, all or
    nothing, no pinned connection (the TechEmpower rules allow batched updates, not
    batched reads)."""
    db = get_client()
    by_id = db.prepare("world_by_id", WORLD_SQL)
    ids = sorted(random.sample(range(1, WORLD_ROWS + 1), query_count(environ)))  # lock order
    worlds = [row_dict(result[0]) for result in db.gather([(by_id, [i]) for i in ids])]
    update = db.prepare("world_update", UPDATE_SQL)
    with db.atomic() as unit:
        for world in worlds:
            world["randomNumber"] = random_id()
            unit.execute(update, [world["id"], world["randomNumber"]])
    return worlds


def stats(environ: dict) -> Any:
    return {"pid": os.getpid(), **get_client().stats()}


def health(environ: dict) -> Any:
    return {"status": "ok", "database": get_client().fetchval("SELECT 1") == 1}


ROUTES: dict[str, Callable[[dict], Any]] = {
    "/db": single_query,
    "/queries": multiple_queries,
    "/updates": updates,
    "/stats": stats,
    "/health": health,
}


def make_application(routes: dict[str, Callable[[dict], Any]],
                     errors: type[Exception] = pgmux.Error) -> Callable:
    """A WSGI entry point serving ``routes``; ``errors`` (the driver's) answer 503."""

    def application(environ: dict, start_response: Callable) -> Iterable[bytes]:
        handler = routes.get(environ.get("PATH_INFO", ""))
        if handler is None:
            return respond(start_response, "404 Not Found", {"error": "not found"})
        try:
            body = handler(environ)
        except errors as exc:  # database down, timeout, ...: tell the client, keep serving
            return respond(start_response, "503 Service Unavailable",
                           {"error": type(exc).__name__, "message": str(exc)})
        return respond(start_response, "200 OK", body)

    return application


application = make_application(ROUTES)  # the WSGI entry point


def respond(start_response: Callable, status: str, body: Any) -> list[bytes]:
    data = json.dumps(body, default=str).encode()
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(data)))])
    return [data]


class NoDelayWSGIServer(WSGIServer):
    """gevent's WSGI server with TCP_NODELAY on each connection: without it, Nagle's
    algorithm stalls keep-alive responses by ~40 ms (gunicorn sets it by itself)."""

    def handle(self, sock: socket.socket, address: Any) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().handle(sock, address)


def make_server(host: str = "127.0.0.1", port: int = 8000) -> WSGIServer:
    return NoDelayWSGIServer((host, port), application, log=None)


def serve(host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until interrupted (port 0: any free port); close the Client on the way out."""
    server = make_server(host, port)
    server.start()
    print(f"serving on http://{host}:{server.address[1]}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        close_client()


if __name__ == "__main__":
    serve(port=int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
