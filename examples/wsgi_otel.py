"""examples/wsgi_app.py with a SERVER span around each request, for gunicorn_otel.conf.py.

What an OpenTelemetry WSGI middleware (opentelemetry-instrumentation-wsgi) does, in a few
lines: the request's span is the current span of the greenlet serving it, so the spans pgmux
starts for the request's queries are its children. A greenlet the request spawns starts
with an empty context: spawn it as ``gevent.spawn(contextvars.copy_context().run, f, ...)``
to keep its queries under the request (``/queries`` here does).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable
from typing import Any

import gevent
import wsgi_app
from opentelemetry import trace
from wsgi_app import close_client, get_client  # noqa: F401  (gunicorn's hooks call them)

tracer = trace.get_tracer("pgmux-example")


def multiple_queries(environ: dict) -> Any:
    """/queries with each lookup's greenlet in the request's context (its spans under it)."""
    statement = get_client().prepare("world_by_id", wsgi_app.WORLD_SQL)
    jobs = [gevent.spawn(contextvars.copy_context().run, statement.fetchone,
                         [wsgi_app.random_id()])
            for _ in range(wsgi_app.query_count(environ))]
    gevent.joinall(jobs, raise_error=True)
    return [wsgi_app.row_dict(job.value) for job in jobs]


_serve = wsgi_app.make_application({**wsgi_app.ROUTES, "/queries": multiple_queries})


def application(environ: dict, start_response: Callable) -> Iterable[bytes]:
    method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "/")
    with tracer.start_as_current_span(
            f"{method} {path}", kind=trace.SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": path}) as span:
        status: list[str] = []

        def start(line: str, headers: list, *args: Any) -> Any:
            status.append(line)
            return start_response(line, headers, *args)

        body = list(_serve(environ, start))
        if status:
            span.set_attribute("http.response.status_code", int(status[0].split()[0]))
        return body
