"""The Django backend's connection model: a Django connection is a handle on the shared client;
autocommit ORM statements are multiplexed, atomic() pins a server connection from its first
statement to its COMMIT/ROLLBACK, set-up never pins, and SET in a connection_created receiver
is refused with a message saying where settings belong."""

from __future__ import annotations

import gevent
import gevent.local
import pytest
from support.djangotest import APPLICATION_NAME, PINNED_SIZE, PIPELINE_SIZE, database_settings

pytest.importorskip("django")


@pytest.fixture
def per_greenlet_connections(django_db):
    """Django connections per greenlet, as under gevent.monkey.patch_all() (gunicorn's gevent
    worker): Django keeps them in a threading.local, which the patching makes per greenlet;
    this unpatched test process gets that by giving the handler gevent's local instead."""
    from django.db import connections

    saved = connections._connections
    connections._connections = gevent.local.local()
    yield
    connections._connections = saved


def spawn_request(work, *args) -> gevent.Greenlet:
    return gevent.spawn(work, *args)  # (under per_greenlet_connections: its own connection)


def _client():
    from django.db import connection

    connection.ensure_connection()
    return connection.connection.client


def _pinned_active() -> int:
    return _client().stats()["pinned"]["active"]


def _backends(pg) -> int:
    return int(pg.admin("SELECT count(*) FROM pg_stat_activity "
                        f"WHERE application_name = '{APPLICATION_NAME}'"))


def test_the_engine_is_django_postgresql_on_a_shared_pgmux_client(per_greenlet_connections):
    from django.db import connection, connections

    connection.ensure_connection()
    assert connection.vendor == "postgresql"
    assert type(connections["default"]).__module__ == "pgmux.contrib.django.base"
    client = connection.connection.client
    assert (client.pipeline_size, client.pinned_size) == (PIPELINE_SIZE, PINNED_SIZE)
    other = spawn_request(_client).get(timeout=10)  # another greenlet's Django connection
    assert other is client


def test_autocommit_orm_statements_are_multiplexed(django_db):
    from django.db import connection
    from pgmux_django_app.models import Item

    def statements() -> None:
        assert Item.objects.get(name="a").name == "a"
        Item.objects.filter(name="a").update(count=1)

    Item.objects.create(name="a")
    statements()  # described and prepared on first use: now count
    before = sum(d["units"] for d in _client().stats()["pipeline"]["drivers"])
    statements()
    after = sum(d["units"] for d in _client().stats()["pipeline"]["drivers"])
    assert after - before == 2  # one multiplexed unit each
    assert _pinned_active() == 0
    assert connection.connection.info.backend_pid is None


def test_atomic_pins_at_its_first_statement_and_returns_at_commit(django_db):
    from django.db import connection, transaction
    from pgmux_django_app.models import Item

    with transaction.atomic():
        assert _pinned_active() == 0  # nothing ran yet: nothing taken
        Item.objects.create(name="in tx")
        assert _pinned_active() == 1
        pid = connection.connection.info.backend_pid
        assert isinstance(pid, int)
        assert connection.connection.info.transaction_status.name == "INTRANS"
    assert _pinned_active() == 0
    assert Item.objects.filter(name="in tx").exists()  # committed


def test_atomic_rolls_back_on_exception_and_savepoints_nest(django_db):
    from django.db import IntegrityError, transaction
    from pgmux_django_app.models import Item

    with pytest.raises(ValueError), transaction.atomic():
        Item.objects.create(name="gone")
        raise ValueError
    assert not Item.objects.filter(name="gone").exists()
    assert _pinned_active() == 0

    with transaction.atomic():
        Item.objects.create(name="outer")
        with pytest.raises(IntegrityError), transaction.atomic():  # a savepoint
            Item.objects.create(name="inner")
            Item.objects.create(id=Item.objects.get(name="outer").id, name="duplicate")
        Item.objects.create(name="after")
    names = sorted(Item.objects.values_list("name", flat=True))
    assert names == ["after", "outer"]
    assert _pinned_active() == 0


def test_many_greenlets_share_the_pipeline_connections(per_greenlet_connections, pg):
    from django.db import connection
    from pgmux_django_app.models import Item

    Item.objects.bulk_create([Item(name=str(i)) for i in range(20)])

    def read(i: int) -> str:
        try:
            return Item.objects.get(name=str(i % 20)).name
        finally:
            connection.close()  # a greenlet's Django connection, closed as a request's is

    opened = _backends(pg)
    pinned = []
    jobs = [spawn_request(read, i) for i in range(200)]
    while not all(job.ready() for job in jobs):
        pinned.append(_pinned_active())
        gevent.sleep(0.001)
    gevent.joinall(jobs, timeout=30, raise_error=True)
    assert [job.value for job in jobs] == [str(i % 20) for i in range(200)]
    assert set(pinned) == {0}  # not one read took a pinned connection
    assert _backends(pg) == opened <= PIPELINE_SIZE + PINNED_SIZE  # nothing more opened


def test_atomic_requests_style_blocks_in_greenlets_share_the_pinned_pool(
        per_greenlet_connections):
    from django.db import connection, transaction
    from pgmux_django_app.models import Item

    def write(i: int) -> None:
        try:
            with transaction.atomic():
                Item.objects.create(name=f"w{i}")
                gevent.sleep(0)
                Item.objects.filter(name=f"w{i}").update(count=i)
        finally:
            connection.close()

    jobs = [spawn_request(write, i) for i in range(3 * PINNED_SIZE)]
    gevent.joinall(jobs, timeout=30, raise_error=True)
    assert sorted(Item.objects.values_list("count", flat=True)) == list(range(3 * PINNED_SIZE))
    assert _client().stats()["pinned"]["size"] == PINNED_SIZE
    assert _pinned_active() == 0


def test_connection_setup_pins_nothing_and_time_zone_is_a_startup_parameter(django_db):
    from django.db import connection
    from django.test.utils import override_settings

    connection.ensure_connection()
    handle = connection.connection
    assert handle.pinned is None and handle.info.backend_pid is None
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('TimeZone')")
        assert cursor.fetchone() == ("UTC",)
    with override_settings(TIME_ZONE="Asia/Bangkok", USE_TZ=False):
        assert connection.connection is not handle  # moved to the client for that zone
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('TimeZone')")
            assert cursor.fetchone() == ("Asia/Bangkok",)
        assert connection.connection.pinned is None
        assert connection.connection.client.conninfo.server_settings["TimeZone"] == (
            "Asia/Bangkok")


def test_a_connection_created_receiver_running_set_is_refused_clearly(django_db):
    from django.db import NotSupportedError, connection
    from django.db.backends.signals import connection_created

    def setup(sender, connection, **kwargs):
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")  # fine: multiplexed
            cursor.execute("SET search_path TO public")

    connection.close()
    connection_created.connect(setup)
    try:
        with pytest.raises(NotSupportedError, match=r"SET outlives the transaction.*"
                           r"connection_created.*'options': '-c search_path=app'"):
            connection.ensure_connection()
    finally:
        connection_created.disconnect(setup)
        connection.close()
    assert _pinned_active() == 0
    with connection.cursor() as cursor:  # later in a request the same SQL just pins
        cursor.execute("SET search_path TO public")
        assert connection.connection.pinned == "SET outlives the transaction"
    connection.close()
    assert _pinned_active() == 0


def test_assume_role_and_isolation_level_need_no_set(django_db, pg):
    from django.db import connections, transaction
    from django.db.backends.postgresql.psycopg_any import IsolationLevel

    pg.admin("DO $$ BEGIN CREATE ROLE pgmux_django_owner; EXCEPTION WHEN duplicate_object "
             "THEN NULL; END $$")
    settings = database_settings(pg, assume_role="pgmux_django_owner",
                                 isolation_level=IsolationLevel.SERIALIZABLE)
    configured = connections.configure_settings({"default": settings, "other": settings})
    connections.settings["other"] = configured["other"]
    other = connections["other"]
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT current_user, current_setting('transaction_isolation')")
            assert cursor.fetchone() == ("pgmux_django_owner", "read committed")
        assert other.connection.pinned is None
        with transaction.atomic(using="other"), other.cursor() as cursor:
            cursor.execute("SELECT current_setting('transaction_isolation')")
            assert cursor.fetchone() == ("serializable",)
    finally:
        other.close()
        del connections["other"]
        del connections.settings["other"]
