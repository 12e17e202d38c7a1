"""The real OpenTelemetry SDK for the telemetry tests: an in-memory span exporter and metric
reader a client is given (``tracer_provider=``, ``meter_provider=``), no global state."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class Sdk:
    """A tracer provider and a meter provider, and what they recorded."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.tracer = self.tracer_provider.get_tracer("tests")

    @property
    def options(self) -> dict[str, Any]:
        """Client options that send this client's telemetry here."""
        return {"tracer_provider": self.tracer_provider, "meter_provider": self.meter_provider}

    def spans(self, name_prefix: str = "") -> list[Any]:
        """Finished spans pgmux emitted (not the tests' own), oldest first."""
        return [span for span in self.exporter.get_finished_spans()
                if span.instrumentation_scope.name == "pgmux"
                and span.name.startswith(name_prefix)]

    def clear(self) -> None:
        self.exporter.clear()

    def metrics(self) -> dict[str, list[Any]]:
        """Metric name -> its data points, as collected now."""
        data = self.reader.get_metrics_data()
        found: dict[str, list[Any]] = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)
        return found

    def point(self, name: str, **attributes: Any) -> Any:
        """The one data point of ``name`` whose attributes include ``attributes``."""
        matches = [point for point in self.metrics().get(name, [])
                   if all(point.attributes.get(k.replace("__", ".")) == v
                          for k, v in attributes.items())]
        assert len(matches) == 1, (name, attributes, matches)
        return matches[0]

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def all_attribute_values(spans: list[Any]) -> list[str]:
    """Every attribute value of ``spans``, as text (to look for a parameter value)."""
    return [str(value) for span in spans for value in span.attributes.values()]
