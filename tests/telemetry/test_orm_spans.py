"""The SQLAlchemy dialect and the Django backend: a span per statement with the ORM's SQL;
with SQLAlchemy's own instrumentation on as well, still one span per statement (its span,
with pgmux's attributes)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the test extra's opentelemetry-sdk")
sqlalchemy = pytest.importorskip("sqlalchemy")

from pgmux.dbapi.connection import close_shared_clients  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def engine(pg, sdk):
    url = pg.dsn.replace("postgresql://", "postgresql+pgmux://", 1)
    made = sqlalchemy.create_engine(url, connect_args=sdk.options)
    yield made
    made.dispose()
    close_shared_clients()


def test_sqlalchemy_statements_carry_the_orm_sql(engine, sdk):
    with engine.begin() as conn:
        assert conn.execute(sqlalchemy.text("SELECT :n + 1"), {"n": 41}).scalar() == 42
    sdk.clear()  # (the dialect's set-up queries on first connect)
    with engine.begin() as conn:
        conn.execute(sqlalchemy.text("SELECT :n + 1"), {"n": 1}).scalar()
    spans = [s for s in sdk.spans() if s.attributes["db.query.text"] != "COMMIT"]
    (span,) = [s for s in spans if "SELECT" in s.attributes["db.query.text"]]
    assert span.attributes["db.query.text"] == "SELECT %(n)s + 1"
    assert span.name == f"SELECT {engine.url.database}"
    assert "41" not in [str(v) for v in span.attributes.values()]


def test_with_sqlalchemys_instrumentation_each_statement_is_one_span(engine, sdk):
    instrumentation = pytest.importorskip("opentelemetry.instrumentation.sqlalchemy")
    instrumentor = instrumentation.SQLAlchemyInstrumentor()
    # (it declares SQLAlchemy < 2.1; its event hooks are the same on 2.1)
    instrumentor.instrument(engine=engine, tracer_provider=sdk.tracer_provider,
                            skip_dep_check=True)
    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT 1")).scalar()
            sdk.exporter.clear()
            before = _select_count(sdk)
            for i in range(3):
                conn.execute(sqlalchemy.text("SELECT :i"), {"i": i}).scalar()
            after = _select_count(sdk)
            conn.rollback()
    finally:
        instrumentor.uninstrument()
    finished = sdk.exporter.get_finished_spans()
    theirs = [s for s in finished if s.instrumentation_scope.name != "pgmux"
              and "SELECT" in s.name]
    assert len(theirs) == 3
    assert not [s for s in sdk.spans() if "SELECT" in s.attributes.get("db.query.text", "")]
    for span in theirs:  # pgmux's attributes on SQLAlchemy's span
        assert span.attributes["pgmux.connection.kind"] in ("pipelined", "pinned")
    assert after - before == 3  # the duration metric: once per statement (pgmux's)


def _select_count(sdk) -> int:
    return sum(point.count for point in sdk.metrics().get("db.client.operation.duration", [])
               if point.attributes.get("db.operation.name") == "SELECT")


DJANGO_SCRIPT = textwrap.dedent("""
    import sys
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    import django
    from django.conf import settings
    host, port, user, name = sys.argv[1:5]
    settings.configure(
        DATABASES={"default": {"ENGINE": "pgmux.contrib.django", "NAME": name, "USER": user,
                               "PASSWORD": "", "HOST": host, "PORT": port}},
        INSTALLED_APPS=["pgmux_django_app"], USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.AutoField")
    django.setup()
    from django.db import connection
    from pgmux_django_app.models import Item
    with connection.schema_editor() as editor:
        editor.create_model(Item)
    exporter.clear()
    Item.objects.create(name="a", count=1)
    assert Item.objects.filter(count__gte=1).count() == 1
    for span in exporter.get_finished_spans():
        print(span.name, "|", span.attributes["pgmux.connection.kind"], "|",
              span.attributes["db.query.text"])
""")


def test_django_statements_carry_the_orm_sql(pg):
    pytest.importorskip("django")
    database = "pgmux_django_otel"
    pg.admin(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)", dbname="postgres")
    pg.admin(f"CREATE DATABASE {database}", dbname="postgres")
    params = pg.params_for(dbname=database)
    env = {**os.environ, "PYTHONPATH": os.path.join(REPO, "tests", "django")}
    done = subprocess.run([sys.executable, "-c", DJANGO_SCRIPT, params["host"],
                           str(params["port"]), params["user"], database],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line.split(" | ") for line in done.stdout.strip().splitlines()]
    inserts = [line for line in lines if line[2].startswith('INSERT INTO "pgmux_django_app_item"')]
    counts = [line for line in lines if line[2].startswith("SELECT COUNT(*)")]
    assert len(inserts) == 1 and len(counts) == 1, lines
    assert inserts[0][0] == f"INSERT {database}"
    assert "%s" in inserts[0][2]  # Django's SQL, its placeholders: never the values
    assert counts[0][0] == f"SELECT {database}"
