"""The names pgmux emits: OpenTelemetry's database conventions (stable since v1.33, with
PostgreSQL's page), spelled exactly as they are, and pgmux's own under ``pgmux.``."""

from __future__ import annotations

import functools
from importlib import metadata

INSTRUMENTATION_NAME = "pgmux"  # the tracer's and the meter's name (their version: pgmux's)
DB_SYSTEM = "postgresql"  # db.system.name's value, and the span name when nothing better is known
DEFAULT_PORT = 5432  # server.port is set only when it differs

# -- attributes (the conventions) ----------------------------------------------------------------
DB_SYSTEM_NAME = "db.system.name"
DB_NAMESPACE = "db.namespace"
DB_OPERATION_NAME = "db.operation.name"
DB_OPERATION_BATCH_SIZE = "db.operation.batch.size"
DB_QUERY_TEXT = "db.query.text"
DB_QUERY_SUMMARY = "db.query.summary"
DB_QUERY_PARAMETER = "db.query.parameter."  # + the parameter's name, or 0-based index (opt-in)
DB_RESPONSE_STATUS_CODE = "db.response.status_code"
DB_RESPONSE_RETURNED_ROWS = "db.response.returned_rows"
ERROR_TYPE = "error.type"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
POOL_NAME = "db.client.connection.pool.name"
CONNECTION_STATE = "db.client.connection.state"

# -- attributes (pgmux's own) ----------------------------------------------------------------------
CONNECTION_KIND = "pgmux.connection.kind"  # "pipelined" | "pinned"
CONNECTION_INDEX = "pgmux.connection.index"  # the pipelined connection (driver) it rode
SLOT_WAIT = "pgmux.slot_wait"  # seconds waited for a pipeline slot
CONNECTION_WAIT = "pgmux.connection_wait"  # seconds waited for a pinned connection
DESCRIBED = "pgmux.described"  # the statement was described first (a round trip more)
RETRIED = "pgmux.retried"  # sent again on another connection (never sent on the last one)
REPREPARED = "pgmux.reprepared"  # prepared again: a stale or clashing statement
REPLAYS = "pgmux.replays"  # an atomic unit sent again after 40001/40P01 (retries=)
OUTCOME = "pgmux.outcome"  # "not_dispatched" (safe to retry) | "indeterminate"
POOL_KIND = "pgmux.pool.kind"  # "pipelined" | "pinned"
HOST = "pgmux.host"
RYW_ANSWERED_BY = "pgmux.read_your_writes.answered_by"

PIPELINED, PINNED = "pipelined", "pinned"

# -- metrics (the conventions): name, unit, description ---------------------------------------------
OPERATION_DURATION = ("db.client.operation.duration", "s",
                      "Duration of database client operations.")
RETURNED_ROWS = ("db.client.response.returned_rows", "{row}",
                 "The actual number of records returned by the database operation.")
CONNECTION_COUNT = ("db.client.connection.count", "{connection}",
                    "The number of connections that are currently in the state described by "
                    "db.client.connection.state.")
CONNECTION_MAX = ("db.client.connection.max", "{connection}",
                  "The maximum number of open connections allowed.")
PENDING_REQUESTS = ("db.client.connection.pending_requests", "{request}",
                    "The number of current pending requests for an open connection.")
CONNECTION_TIMEOUTS = ("db.client.connection.timeouts", "{timeout}",
                       "The number of connection timeouts that have occurred trying to obtain "
                       "a connection from the pool.")
CREATE_TIME = ("db.client.connection.create_time", "s",
               "The time it took to create a new connection.")
WAIT_TIME = ("db.client.connection.wait_time", "s",
             "The time it took to obtain an open connection from the pool.")
USE_TIME = ("db.client.connection.use_time", "s",
            "The time between borrowing a connection and returning it to the pool.")

# -- metrics (pgmux's own) ----------------------------------------------------------------------------
IN_FLIGHT = ("pgmux.connection.in_flight", "{request}",
             "Requests written to a pipelined connection and not answered yet.")
UNITS_PER_READABLE = ("pgmux.connection.units_per_readable", "{request}",
                      "Requests answered per socket read on a pipelined connection, sampled "
                      "once a second per connection.")
RECONNECTS = ("pgmux.connection.reconnects", "{connection}",
              "Connections reopened after one was lost.")
ROTATIONS = ("pgmux.connection.rotations", "{connection}",
             "Pipelined connections replaced without failing work (max_lifetime, rebalancing).")
HOST_UP = ("pgmux.host.up", "1", "1 while a host is believed up, 0 while it is marked down.")
RYW_READS = ("pgmux.read_your_writes.reads", "{request}",
             "Reads of a read_your_writes view, by who answered (standby or primary).")

# Advisory bucket boundaries: the conventions' for durations and for returned rows.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10)
ROWS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
UNITS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


@functools.cache
def version() -> str:
    """pgmux's installed version (the instrumentation scope's version)."""
    try:
        return metadata.version("pgmux")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a bare checkout
        return "0"
