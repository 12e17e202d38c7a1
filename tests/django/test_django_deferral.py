"""Django's atomic() on pgmux: reads stay multiplexed until a statement needs the transaction
(a write, select_for_update(), a savepoint), OPTIONS["deferred_pinning"] = False pins at the
first statement, and no session state of one Django connection reaches another."""

from __future__ import annotations

import pytest
from support.djangotest import DATABASE, PINNED_SIZE, database_settings
from support.session_states import STATES, session_objects

pytest.importorskip("django")


def _pinned_active() -> int:
    from django.db import connection

    connection.ensure_connection()
    return connection.connection.client.stats()["pinned"]["active"]


@pytest.fixture
def strict(django_db, pg):
    """A second alias on the same client whose handles pin at the first statement."""
    from django.db import connections

    settings = database_settings(pg, deferred_pinning=False)
    configured = connections.configure_settings({"default": settings, "strict": settings})
    connections.settings["strict"] = configured["strict"]
    yield connections["strict"]
    connections["strict"].close()
    del connections["strict"]
    del connections.settings["strict"]


def test_atomic_reads_take_no_pinned_connection(django_db):
    from django.db import connection, transaction
    from pgmux_django_app.models import Item

    Item.objects.bulk_create([Item(name=str(i)) for i in range(5)])
    with transaction.atomic():
        assert Item.objects.count() == 5
        assert Item.objects.get(name="3").name == "3"
        assert list(Item.objects.filter(name__in=["1", "2"]).values_list("name", flat=True))
        assert _pinned_active() == 0
        assert connection.connection.info.transaction_status.name == "INTRANS"
    assert _pinned_active() == 0


def test_atomic_pins_at_its_first_write_or_locking_read(django_db):
    from django.db import transaction
    from pgmux_django_app.models import Item

    Item.objects.create(name="locked")
    with transaction.atomic():
        Item.objects.count()
        assert _pinned_active() == 0
        assert Item.objects.select_for_update().get(name="locked").name == "locked"
        assert _pinned_active() == 1
    with transaction.atomic():
        Item.objects.count()
        Item.objects.create(name="written")
        assert _pinned_active() == 1
        assert Item.objects.filter(name="written").exists()  # its own write, pinned
    assert _pinned_active() == 0 and Item.objects.filter(name="written").exists()


def test_a_nested_atomic_block_pins_with_its_savepoint(django_db):
    from django.db import transaction
    from pgmux_django_app.models import Item

    with transaction.atomic():
        Item.objects.count()
        assert _pinned_active() == 0
        with transaction.atomic():  # Django's SAVEPOINT needs the transaction
            assert _pinned_active() == 1
            Item.objects.count()
    assert _pinned_active() == 0


def test_an_error_in_an_unpinned_read_fails_the_block_and_leaves_nothing(django_db):
    from django.db import DatabaseError, connection, transaction
    from pgmux_django_app.models import Item

    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT * FROM no_such_table")
    assert _pinned_active() == 0
    assert connection.connection.info.transaction_status.name == "IDLE"
    assert Item.objects.count() == 0  # usable at once


def test_a_pinned_connection_lost_mid_atomic_applies_nothing(django_db, pg):
    from django.db import DatabaseError, connection, transaction
    from pgmux_django_app.models import Item

    with pytest.raises(DatabaseError), transaction.atomic():
        assert Item.objects.count() == 0  # unpinned
        Item.objects.create(name="first")  # pins
        pid = connection.connection.info.backend_pid
        pg.admin(f"SELECT pg_terminate_backend({pid})")
        Item.objects.create(name="second")
    assert pg.admin("SELECT count(*) FROM pgmux_django_app_item", dbname=DATABASE) == "0"
    assert _pinned_active() == 0
    with transaction.atomic():  # the connection goes on, on another server connection
        Item.objects.create(name="after")
    assert list(Item.objects.values_list("name", flat=True)) == ["after"]


def test_a_greenlet_killed_while_unpinned_leaks_nothing(django_db, pg):
    import gevent
    from django.db import connection, transaction
    from pgmux_django_app.models import Item
    from support.mux import SLOW_READ, wait_for_slow_read

    def request() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(SLOW_READ)  # unpinned

    job = gevent.spawn(request)
    wait_for_slow_read(pg)
    job.kill()
    assert _pinned_active() == 0
    assert not connection.in_atomic_block
    assert connection.connection.info.transaction_status.name == "IDLE"
    with transaction.atomic():  # the connection and its pipeline go on
        Item.objects.create(name="after")
    assert Item.objects.count() == 1
    name = connection.connection.client.conninfo.application_name
    assert pg.admin(f"SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                    f"'{name}' AND state LIKE 'idle in transaction%'") == "0"  # none open


def test_deferred_pinning_false_in_options_pins_at_the_first_statement(strict):
    from django.db import transaction
    from pgmux_django_app.models import Item

    with transaction.atomic(using="strict"):
        Item.objects.using("strict").count()
        assert strict.connection.info.backend_pid is not None


def test_atomic_request_style_reads_in_many_greenlets_share_the_pipeline(django_db):
    import gevent.local
    from django.db import connection, connections, transaction
    from pgmux_django_app.models import Item

    Item.objects.bulk_create([Item(name=str(i)) for i in range(10)])
    saved = connections._connections
    connections._connections = gevent.local.local()  # per greenlet, as under gunicorn
    pinned: list[int] = []

    def request(i: int) -> str:
        try:
            with transaction.atomic():  # ATOMIC_REQUESTS wraps each view this way
                name = Item.objects.get(name=str(i % 10)).name
                pinned.append(connection.connection.client.stats()["pinned"]["active"])
                return name
        finally:
            connection.close()

    try:
        jobs = [gevent.spawn(request, i) for i in range(100)]
        gevent.joinall(jobs, timeout=30, raise_error=True)
    finally:
        connections._connections = saved
    assert [job.value for job in jobs] == [str(i % 10) for i in range(100)]
    assert set(pinned) == {0}


@pytest.fixture(scope="module")
def role(pg, django_setup):
    yield from session_objects(pg, DATABASE)


@pytest.mark.parametrize("kind", list(STATES))
def test_session_state_of_one_django_connection_never_reaches_another(strict, role, kind):
    from django.db import connection, transaction

    leave, check, clean = STATES[kind]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(leave)  # pins: this Django connection now holds a server connection
        dirty = connection.connection.info.backend_pid
    connection.close()  # its end of request: the server connection is reset and goes back
    handles = [pgmux_handle(strict) for _ in range(PINNED_SIZE)]  # every pinned connection
    seen = {}
    for handle in handles:
        cursor = handle.cursor()
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
        cursor.execute(check)
        seen[pid] = cursor.fetchone()[0]
    for handle in handles:
        handle.close()
    assert dirty in seen and set(seen.values()) == {clean}


def pgmux_handle(alias):
    """A new DB-API handle of ``alias``'s settings (pins at its first statement)."""
    return alias.get_new_connection(alias.get_connection_params())


def test_a_serializable_isolation_option_pins_at_the_first_statement(django_db, pg):
    from django.db import connections, transaction
    from django.db.backends.postgresql.psycopg_any import IsolationLevel
    from pgmux_django_app.models import Item

    settings = database_settings(pg, isolation_level=IsolationLevel.SERIALIZABLE)
    configured = connections.configure_settings({"default": settings, "serial": settings})
    connections.settings["serial"] = configured["serial"]
    try:
        with transaction.atomic(using="serial"):
            assert Item.objects.using("serial").count() == 0
            assert connections["serial"].connection.info.backend_pid is not None
    finally:
        connections["serial"].close()
        del connections["serial"]
        del connections.settings["serial"]
