"""Load-test PostgreSQL with Locust: a ``User`` whose client is a shared pgmux ``Client``.

    from locust import task
    from pgmux.contrib.locust import PgmuxUser

    class Reader(PgmuxUser):
        dsn = "postgresql://app@db/app"      # or `locust --host postgresql://...`

        @task
        def lookup(self):
            self.client.fetchone("SELECT * FROM users WHERE id = $1", [42], name="user by id")

Every query fires Locust's ``request`` event (request type ``SQL``, the ``name=`` given or
the SQL's first 60 characters, the time in ms, the number of rows, the exception), so the
web UI, ``--csv`` and distributed mode work as for HTTP; a ``self.client.transaction()``
block is one request of type ``TX``, a ``self.client.atomic()`` block one of type
``UNIT``. All users of one Locust process share one pgmux ``Client`` (its pipeline
multiplexes their queries). A failed query is reported, then re-raised: Locust logs it
and moves to the next task.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

from gevent.lock import Semaphore
from locust import User

from pgmux.client import Client, PreparedStatement

NAME_LENGTH = 60
REQUEST_TYPE = "SQL"
TRANSACTION_TYPE = "TX"
UNIT_TYPE = "UNIT"

_clients: dict[tuple, Client] = {}
_clients_lock = Semaphore()
_environments_closing: set[int] = set()


def shared_client(dsn: str | None, options: dict[str, Any] | None = None) -> Client:
    """This process's pgmux Client for ``dsn`` and ``options`` (created on first use)."""
    key = (dsn, tuple(sorted((options or {}).items())))
    client = _clients.get(key)
    if client is None or client.closed:
        with _clients_lock:
            client = _clients.get(key)
            if client is None or client.closed:
                client = _clients[key] = Client(dsn, **(options or {}))
    return client


def close_shared_clients(**_kwargs: Any) -> None:
    """Close every shared client (runs on Locust's ``quitting`` event)."""
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


def request_name(sql: str) -> str:
    """The default request name: the SQL with whitespace collapsed, cut to 60 characters."""
    return " ".join(sql.split())[:NAME_LENGTH]


def _first_row(result: Any) -> Any:
    return result[0] if len(result) else None


def _first_value(result: Any) -> Any:
    return result[0][0] if len(result) else None


def _rows(result: Any) -> int:
    return len(result)


def _affected(rowcount: int) -> int:
    return max(rowcount, 0)  # -1: the command's tag carries no row count


class _Reporter:
    """Runs a call, timing it, and fires Locust's request event for it."""

    def __init__(self, environment: Any):
        self._fire = environment.events.request.fire

    def report(self, request_type: str, name: str, call: Callable[[], Any],
               length: Callable[[Any], int]) -> Any:
        started = time.perf_counter()
        try:
            result = call()
        except Exception as exc:
            self._fire(request_type=request_type, name=name,
                       response_time=(time.perf_counter() - started) * 1000,
                       response_length=0, exception=exc, context={})
            raise
        self._fire(request_type=request_type, name=name,
                   response_time=(time.perf_counter() - started) * 1000,
                   response_length=length(result), response=result, exception=None, context={})
        return result

    @contextmanager
    def block(self, request_type: str, name: str) -> Iterator[None]:
        """Time the ``with`` block and report it as one request (its exception, if any).

        A block cut short by a BaseException (the GreenletExit of Locust's stop) is not
        a finished request and is not reported, as ``report`` reports no killed call."""
        started = time.perf_counter()
        try:
            yield
        except Exception as exc:
            self._fire(request_type=request_type, name=name,
                       response_time=(time.perf_counter() - started) * 1000,
                       response_length=0, exception=exc, context={})
            raise
        self._fire(request_type=request_type, name=name,
                   response_time=(time.perf_counter() - started) * 1000,
                   response_length=0, exception=None, context={})


class LocustClient:
    """A pgmux Client front that reports every call to Locust; ``.db`` is the Client itself.

    ``response_length`` is the number of rows returned (``execute``: rows affected).
    """

    def __init__(self, db: Client, environment: Any):
        self.db = db
        self._reporter = _Reporter(environment)

    def _rows(self, sql: str, params: Sequence[Any], name: str | None,
              timeout: float | None) -> Any:
        return self._reporter.report(REQUEST_TYPE, name or request_name(sql),
                                     lambda: self.db.query(sql, params, timeout=timeout), _rows)

    def query(self, sql: str, params: Sequence[Any] = (), *, name: str | None = None,
              timeout: float | None = None) -> Any:
        """Run ``sql`` with ``params`` as ``Client.query`` does, reported to Locust
        (``name``: the request's name there, by default ``request_name(sql)``)."""
        return self._rows(sql, params, name, timeout)

    def fetchone(self, sql: str, params: Sequence[Any] = (), *, name: str | None = None,
                 timeout: float | None = None) -> Any:
        """The first row, or None, reported to Locust as ``query`` is."""
        return _first_row(self._rows(sql, params, name, timeout))

    def fetchval(self, sql: str, params: Sequence[Any] = (), *, name: str | None = None,
                 timeout: float | None = None) -> Any:
        """The first column of the first row, or None, reported to Locust as ``query`` is."""
        return _first_value(self._rows(sql, params, name, timeout))

    def execute(self, sql: str, params: Sequence[Any] = (), *, name: str | None = None,
                timeout: float | None = None) -> int:
        """Run a command and return its row count, reported to Locust as ``query`` is."""
        return self._reporter.report(REQUEST_TYPE, name or request_name(sql),
                                     lambda: self.db.execute(sql, params, timeout=timeout),
                                     _affected)

    def prepare(self, name: str, sql: str, types: Sequence[int | str] | None = None
                ) -> LocustStatement:
        """A prepared statement whose calls are reported under its name."""
        return LocustStatement(self._reporter, self.db.prepare(name, sql, types))

    @contextmanager
    def transaction(self, *, name: str = "transaction", **options: Any) -> Iterator[Any]:
        """``db.transaction(**options)``, reported as one request of type ``TX``."""
        with self._reporter.block(TRANSACTION_TYPE, name), self.db.transaction(**options) as tx:
            yield tx

    @contextmanager
    def atomic(self, *, name: str = "atomic unit", **options: Any) -> Iterator[Any]:
        """``db.atomic(**options)``, reported as one request of type ``UNIT`` when the unit
        has run (its statements are sent as the block ends)."""
        with self._reporter.block(UNIT_TYPE, name), self.db.atomic(**options) as unit:
            yield unit


class LocustStatement:
    """A ``PreparedStatement`` whose calls fire Locust request events (named after it)."""

    def __init__(self, reporter: _Reporter, statement: PreparedStatement):
        self._reporter = reporter
        self.statement = statement

    def _rows(self, params: Sequence[Any], name: str | None, timeout: float | None) -> Any:
        return self._reporter.report(
            REQUEST_TYPE, name or self.statement.name,
            lambda: self.statement.query(params, timeout=timeout), _rows)

    def query(self, params: Sequence[Any] = (), *, name: str | None = None,
              timeout: float | None = None) -> Any:
        """Run the statement with ``params`` and return its rows, reported to Locust
        (``name``: the request's name there, by default the statement's)."""
        return self._rows(params, name, timeout)

    def fetchone(self, params: Sequence[Any] = (), *, name: str | None = None,
                 timeout: float | None = None) -> Any:
        """The first row, or None, reported to Locust as ``query`` is."""
        return _first_row(self._rows(params, name, timeout))

    def fetchval(self, params: Sequence[Any] = (), *, name: str | None = None,
                 timeout: float | None = None) -> Any:
        """The first column of the first row, or None, reported to Locust as ``query`` is."""
        return _first_value(self._rows(params, name, timeout))

    def execute(self, params: Sequence[Any] = (), *, name: str | None = None,
                timeout: float | None = None) -> int:
        """Run the statement as a command and return its row count, reported to Locust as
        ``query`` is."""
        return self._reporter.report(
            REQUEST_TYPE, name or self.statement.name,
            lambda: self.statement.execute(params, timeout=timeout), _affected)


class PgmuxUser(User):
    """An abstract Locust user with ``self.client``: a reporting front of a shared Client.

    Set ``dsn`` (else Locust's ``--host``, else the PG* environment variables) and
    optionally ``client_options`` (keyword arguments of ``pgmux.Client``).
    """

    abstract = True
    dsn: ClassVar[str | None] = None
    client_options: ClassVar[dict[str, Any]] = {}

    def __init__(self, environment: Any):
        super().__init__(environment)
        if id(environment) not in _environments_closing:
            _environments_closing.add(id(environment))
            environment.events.quitting.add_listener(close_shared_clients)
        db = shared_client(self.dsn or self.host or None, dict(self.client_options))
        self.client = LocustClient(db, environment)
