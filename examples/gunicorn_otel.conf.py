"""gunicorn settings for examples/wsgi_app.py with OpenTelemetry: the SDK set up in each
worker, a SERVER span per request (examples/wsgi_otel.py) and pgmux's spans under it.

    PGMUX_DSN=postgresql://user:pw@localhost/db gunicorn -c examples/gunicorn_otel.conf.py
    OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 PGMUX_DSN=... \\
        gunicorn -c examples/gunicorn_otel.conf.py

Spans and metrics go to the console (stdout), or over OTLP/HTTP when
OTEL_EXPORTER_OTLP_ENDPOINT is set (``pip install opentelemetry-exporter-otlp-proto-http``:
the example's own dependency, not pgmux's). pgmux needs nothing but the API
(``pip install 'pgmux[otel]'``) and notices the providers by itself. Everything else is
examples/gunicorn.conf.py's: one Client per worker, made after the fork.
"""

import os
import runpy

_base = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "gunicorn.conf.py"))
globals().update({k: v for k, v in _base.items() if not k.startswith("__")})
wsgi_app = "wsgi_otel:application"
_warm_up = _base["post_worker_init"]


def _exporters():
    """(span exporter, metric exporter): OTLP when its endpoint is set, else the console."""
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(), OTLPMetricExporter()
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    return ConsoleSpanExporter(), ConsoleMetricExporter()


def configure_sdk(worker):
    """The application's SDK, in the worker: after the fork (the SDK's exporting threads do
    not survive one), before the app makes its Client."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME",
                                                               "pgmux-example")})
    spans, measurements = _exporters()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(
        spans, schedule_delay_millis=int(os.environ.get("OTEL_BSP_SCHEDULE_DELAY", "1000"))))
    trace.set_tracer_provider(tracer_provider)
    reader = PeriodicExportingMetricReader(measurements, export_interval_millis=int(
        os.environ.get("OTEL_METRIC_EXPORT_INTERVAL", "60000")))
    metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
    worker.log.info("OpenTelemetry SDK configured (%s)", type(spans).__name__)


def post_worker_init(worker):
    configure_sdk(worker)
    _warm_up(worker)


def worker_exit(server, worker):
    _base["worker_exit"](server, worker)
    from opentelemetry import metrics, trace

    for provider in (trace.get_tracer_provider(), metrics.get_meter_provider()):
        shutdown = getattr(provider, "shutdown", None)
        if shutdown is not None:
            shutdown()  # flush what is still buffered
