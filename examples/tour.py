"""A tour of pgmux: queries, prepared statements, transactions, sessions, COPY, LISTEN/NOTIFY.

    python examples/tour.py [DSN]

The DSN comes from the argument, PGMUX_DSN or DATABASE_URL, else the PG* variables; with
none of those it starts a throwaway PostgreSQL (needs the server binaries installed).
"""

# ruff: noqa: E402  -- gevent must monkey-patch before anything else is imported
from gevent import monkey

monkey.patch_all()

import os
import sys

import gevent

import pgmux
from pgmux.tooling.embedded import EmbeddedPostgres


def tour(db: pgmux.Client) -> None:
    # The multiplexed path: any number of greenlets share the pipelined connections.
    print("server says:", db.fetchval("SELECT 'hello from ' || version()")[:40], "...")
    jobs = [gevent.spawn(db.fetchval, "SELECT $1::int * 2", [n]) for n in range(10)]
    gevent.joinall(jobs, raise_error=True)
    print("10 concurrent queries:", [job.value for job in jobs])
    # ... and one greenlet can hand many independent queries over at once (a fan-out).
    with db.batch() as batch:
        doubled = [batch.fetchval("SELECT $1::int * 2", [n]) for n in range(10)]
    print("10 queries in one batch:", [pending.result() for pending in doubled])

    # Session state (SET, temp tables, LISTEN ...) is refused on the multiplexed path.
    try:
        db.execute("SET search_path = elsewhere")
    except pgmux.UnsafeMultiplexError as exc:
        print("refused on the multiplexed path:", type(exc).__name__)

    # A session: one exclusive connection for the block, reset (DISCARD ALL) afterwards.
    with db.session() as s:
        s.execute("CREATE TEMP TABLE pets (id int PRIMARY KEY, name text, legs int)")
        copied = s.copy_in("COPY pets (id, name, legs) FROM STDIN",
                           [(1, "cat", 4), (2, "parrot", 2), (3, "snake", 0)])
        print("COPY in:", copied, "rows")
        dump = b"".join(s.copy_out("COPY pets TO STDOUT WITH (FORMAT csv)"))
        print("COPY out:", dump.decode().splitlines())

        # A transaction with a savepoint: the inner failure rolls back only the savepoint.
        with s.transaction() as tx:
            tx.execute("UPDATE pets SET legs = legs + 1 WHERE name = $1", ["cat"])
            try:
                with tx.savepoint():
                    tx.execute("INSERT INTO pets VALUES (1, 'duplicate', 2)")
            except pgmux.errors.UniqueViolation as exc:
                print("savepoint rolled back:", exc.sqlstate, exc.message)
        print("after the transaction:", s.query("SELECT name, legs FROM pets ORDER BY id").rows)

        # An explicit pipeline: three statements, one round trip.
        with s.pipeline() as p:
            count = p.query("SELECT count(*) FROM pets")
            legs = p.query("SELECT sum(legs) FROM pets")
            p.sync()
        print("pipelined:", count.result()[0][0], "pets,", legs.result()[0][0], "legs")

        # Streaming a large result in bounded memory.
        total = sum(row[0] for row in s.stream("SELECT generate_series(1, $1)", [100_000]))
        print("streamed sum:", total)

        # LISTEN on this session; NOTIFY from anywhere (here: the multiplexed path).
        s.listen("tour")
        db.execute("SELECT pg_notify($1, $2)", ["tour", "hello, listener"])
        note = s.wait_notify(timeout=5)
        print("notification:", note.channel, repr(note.payload))

    # Prepared statements: registered once, prepared on every pipeline connection.
    square = db.prepare("square", "SELECT $1::int * $1::int")
    print("prepared:", [square.fetchval([n]) for n in range(5)])

    # A transaction of its own (BEGIN ... COMMIT; ROLLBACK on an exception).
    with db.transaction(isolation="repeatable read", readonly=True) as tx:
        print("in a transaction:", tx.fetchval("SHOW transaction_isolation"))

    print("stats:", db.stats()["pipeline"]["live"], "pipeline connections,",
          db.stats()["prepared_statements"], "prepared statement(s)")


def main() -> None:
    dsn = (sys.argv[1] if len(sys.argv) > 1 else None) or os.environ.get("PGMUX_DSN") \
        or os.environ.get("DATABASE_URL")
    if dsn or any(name in os.environ for name in ("PGHOST", "PGPORT", "PGUSER", "PGSERVICE")):
        with pgmux.Client.open(dsn) as db:
            tour(db)
        return
    with EmbeddedPostgres() as server, pgmux.Client.open(server.dsn(user="postgres")) as db:
        tour(db)


if __name__ == "__main__":
    main()
