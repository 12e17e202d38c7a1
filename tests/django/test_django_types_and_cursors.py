"""What Django's PostgreSQL code needs of the driver, through the Django backend: values as it
expects them (jsonb, inet, ranges, naive datetimes without USE_TZ), literals for DDL, the
sizes inspectdb reads, tuple parameters, NUL as DataError, .iterator() through a server-side
cursor that survives other statements, COPY."""

from __future__ import annotations

import datetime as dt
import io
import ipaddress
import json
import re
from decimal import Decimal

import pytest

pytest.importorskip("django")


def _pinned_active() -> int:
    from django.db import connection

    connection.ensure_connection()
    return connection.connection.client.stats()["pinned"]["active"]


def test_json_and_ip_address_fields_round_trip(django_db):
    from pgmux_django_app.models import Item

    Item.objects.create(name="j", data={"a": [1, 2], "b": None}, address="10.1.2.3")
    Item.objects.create(name="k", data=[1, "x"], address="::1")
    item = Item.objects.get(name="j")
    assert item.data == {"a": [1, 2], "b": None} and item.address == "10.1.2.3"
    assert Item.objects.filter(data__a__1=2).get().name == "j"
    assert Item.objects.filter(data__contains={"a": [1, 2]}).get().name == "j"
    assert list(Item.objects.filter(address="::1").values_list("name", flat=True)) == ["k"]
    assert Item.objects.values_list("data__a", flat=True).get(name="j") == [1, 2]


def test_raw_cursor_values_are_what_django_expects(django_db):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::jsonb, %s::inet, '10.0.0.0/8'::cidr, %s::json",
                       ['{"k": 1}', "192.168.0.1", '{"j": 2}'])
        jsonb, inet, cidr, plain_json = cursor.fetchone()
    assert (jsonb, inet, cidr) == ('{"k": 1}', "192.168.0.1", "10.0.0.0/8")  # text
    assert plain_json == {"j": 2}  # json is not jsonb: decoded, as psycopg does


def test_psycopg_style_jsonb_range_and_integer_parameters(django_db):
    from django.db import connection
    from django.db.backends.postgresql.psycopg_any import DateRange, NumericRange
    from psycopg.types.json import Jsonb
    from psycopg.types.numeric import Int2

    with connection.cursor() as cursor:
        cursor.execute("SELECT %s, %s::int4range, %s::daterange, pg_typeof(%s)::text",
                       [Jsonb({"a": 1}), NumericRange(1, 10), DateRange(dt.date(2024, 1, 1),
                                                                         None), Int2(7)])
        jsonb, numbers, dates, int_type = cursor.fetchone()
        cursor.execute("SELECT 'empty'::int4range, '(1,5]'::numrange, "
                       "'[2024-01-01 10:00:00+00,)'::tstzrange")
        empty, decimals, times = cursor.fetchone()
    assert json.loads(jsonb) == {"a": 1}
    assert numbers == NumericRange(1, 10) and dates == DateRange(dt.date(2024, 1, 1), None)
    assert int_type == "smallint"
    assert empty.isempty and decimals == NumericRange(Decimal(1), Decimal(5), "(]")
    assert times.lower == dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone.utc)
    assert times.upper is None


def test_a_nul_character_in_text_is_a_data_error(django_db):
    from django.db import DataError, connection
    from pgmux_django_app.models import Item

    feature, message = connection.features.prohibits_null_characters_in_text_exception
    with pytest.raises(feature, match=re.escape(message)):
        Item.objects.create(name="nul\x00here")
    with pytest.raises(DataError), connection.cursor() as cursor:
        cursor.execute("SELECT %s", [["fine", "not\x00fine"]])
    assert Item.objects.count() == 0


def test_tuple_parameters_fill_in_lists(django_db):
    from django.db import connection
    from pgmux_django_app.models import Item

    Item.objects.bulk_create([Item(name=n) for n in "abcd"])
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM pgmux_django_app_item WHERE name IN %s ORDER BY 1",
                       [("b", "d")])
        assert cursor.fetchall() == [("b",), ("d",)]
        cursor.execute("SELECT count(*) FROM pgmux_django_app_item WHERE name = ANY(%s)",
                       [["a", "c", "zz"]])
        assert cursor.fetchone() == (2,)


def test_ddl_literals_and_db_default(django_db):
    from django.db import connection, models

    class Dated(models.Model):
        label = models.CharField(max_length=20, db_default="it's \\ new")
        born = models.DateField(db_default=dt.date(2024, 2, 29))
        ratio = models.DecimalField(max_digits=5, decimal_places=2, db_default=Decimal("-1.5"))

        class Meta:
            app_label = "pgmux_django_app"

    assert connection.ops.compose_sql("SELECT %s, %s", ["a'b", None]) == "SELECT 'a''b', NULL"
    with connection.schema_editor() as editor:
        assert editor.quote_value(dt.date(2024, 1, 2)) == "'2024-01-02'::date"
        editor.create_model(Dated)
    try:
        row = Dated.objects.create()
        row.refresh_from_db()
        assert (row.label, row.born, row.ratio) == ("it's \\ new", dt.date(2024, 2, 29),
                                                    Decimal("-1.50"))
    finally:
        with connection.schema_editor() as editor:
            editor.delete_model(Dated)


def test_introspection_reads_sizes_as_inspectdb_does(django_db):
    from django.db import connection

    with connection.cursor() as cursor:
        description = {d.name: d for d in connection.introspection.get_table_description(
            cursor, "pgmux_django_app_item")}
    assert description["name"].display_size == 30  # CharField(max_length=30)
    assert (description["amount"].precision, description["amount"].scale) == (8, 2)
    assert description["count"].internal_size == 4
    assert connection.introspection.get_field_type(
        description["name"].type_code, description["name"]) == "CharField"


ROWS = 2100  # more than a named cursor's first batch (itersize, 2000)


@pytest.mark.parametrize("in_transaction", [False, True], ids=["autocommit", "atomic"])
def test_iterator_survives_other_statements_on_the_connection(django_db, in_transaction):
    from django.db import connection, transaction
    from pgmux_django_app.models import Item

    Item.objects.bulk_create([Item(name=f"i{n:04d}", count=n) for n in range(ROWS)])

    def walk() -> list[str]:
        seen = []
        for item in Item.objects.order_by("count").iterator(chunk_size=500):
            if item.count % 300 == 0:  # other statements between two FETCHes
                Item.objects.filter(pk=item.pk).update(count=-item.count)
                with connection.cursor() as cursor:
                    cursor.execute("SELECT is_holdable FROM pg_cursors "
                                   "WHERE name LIKE '_django_curs%%'")
                    assert cursor.fetchall() == [(not in_transaction,)]
            seen.append(item.name)
        return seen

    if in_transaction:
        with transaction.atomic():
            seen = walk()
    else:
        seen = walk()
    assert seen == [f"i{n:04d}" for n in range(ROWS)]
    assert Item.objects.filter(count__lt=0).count() == len(range(300, ROWS, 300))
    assert _pinned_active() == 0  # the cursor's server connection went back


def test_an_iterator_abandoned_inside_atomic_is_closed(django_db):
    from django.db import connection, transaction
    from pgmux_django_app.models import Item

    Item.objects.bulk_create([Item(name=str(n)) for n in range(10)])
    with transaction.atomic():
        rows = Item.objects.iterator(chunk_size=2)
        next(rows)
        rows.close()
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_cursors WHERE is_holdable OR name <> ''")
            assert cursor.fetchone() == (0,)
        assert Item.objects.count() == 10  # the transaction is fine


def test_naive_datetimes_in_the_time_zone_without_use_tz(django_db):
    from django.db import connection
    from django.test.utils import override_settings
    from pgmux_django_app.models import Item

    moment = dt.datetime(2024, 6, 1, 12, 30, tzinfo=dt.timezone.utc)
    Item.objects.create(name="t", at=moment)
    assert Item.objects.get(name="t").at == moment
    with override_settings(USE_TZ=False, TIME_ZONE="Asia/Bangkok"):  # UTC+7
        assert Item.objects.get(name="t").at == dt.datetime(2024, 6, 1, 19, 30)
        with connection.cursor() as cursor:
            cursor.execute("SELECT at, tstzrange(at, NULL) FROM pgmux_django_app_item "
                           "WHERE at = %s", [dt.datetime(2024, 6, 1, 19, 30)])  # the session's
            at, span = cursor.fetchone()  # zone
            assert at == span.lower == dt.datetime(2024, 6, 1, 19, 30) and span.upper is None


def test_copy_through_the_cursor(django_db):
    from django.db import connection
    from pgmux_django_app.models import Item

    with connection.cursor() as cursor:
        with cursor.copy("COPY pgmux_django_app_item (name, count) FROM STDIN") as copy:
            copy.write_row(("copied", 5))
            copy.write("tabbed\t6\n")
        cursor.copy_expert("COPY pgmux_django_app_item (name, count) FROM STDIN WITH CSV",
                           io.StringIO("csv,7\n"))
        out = io.StringIO()
        cursor.copy_expert("COPY (SELECT name, count FROM pgmux_django_app_item ORDER BY count)"
                           " TO STDOUT WITH CSV", out)
        with cursor.copy("COPY (SELECT count FROM pgmux_django_app_item ORDER BY 1) "
                         "TO STDOUT") as copy:
            data = b"".join(copy)
    assert out.getvalue() == "copied,5\ntabbed,6\ncsv,7\n"
    assert data == b"5\n6\n7\n"
    assert Item.objects.count() == 3 and _pinned_active() == 0


def test_connection_info_tells_what_psycopg_does(django_db):
    from django.db import connection, transaction

    connection.ensure_connection()
    info = connection.connection.info
    assert info.server_version >= 140000 and connection.pg_version == info.server_version
    assert info.parameter_status("TimeZone") == "UTC"
    assert info.parameter_status("no_such_setting") is None
    assert info.backend_pid is None and info.transaction_status.name == "IDLE"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT 1")  # a plain read: the transaction has not pinned yet
        assert info.backend_pid is None and info.transaction_status.name == "INTRANS"
        cursor.execute("SELECT pg_backend_pid(), txid_current()")  # needs the transaction
        assert info.backend_pid == cursor.fetchone()[0]
        assert info.transaction_status.name == "INTRANS"


def test_ip_address_values_reach_the_server_typed(django_db):
    from pgmux_django_app.models import Item

    Item.objects.create(name="v6", address="2001:db8::1")
    found = Item.objects.extra(select={"family": "family(address)"}).get(name="v6")
    assert found.family == 6
    assert ipaddress.ip_address(found.address).version == 6


def test_contrib_postgres_fields_hstore_ranges_arrays(django_db):
    from django.db import connection
    from django.db.backends.postgresql.psycopg_any import NumericRange
    from pgmux_django_app.models import Tagged

    Tagged.objects.create(tags={"colour": "red", "size": None}, span=NumericRange(1, 5),
                          words=["a", "b"])
    Tagged.objects.create(tags={"colour": "blue"}, span=NumericRange(10, 20), words=["c"])
    row = Tagged.objects.get(tags__colour="red")
    assert row.tags == {"colour": "red", "size": None}
    assert row.span == NumericRange(1, 5) and row.words == ["a", "b"]
    assert Tagged.objects.filter(span__contains=3).get() == row
    assert Tagged.objects.filter(tags__has_key="size", words__contains=["b"]).get() == row
    assert list(Tagged.objects.filter(span__overlap=NumericRange(4, 11)).order_by("id")
                .values_list("tags__colour", flat=True)) == ["red", "blue"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::hstore -> 'k'", [{"k": 'quo"te'}])
        assert cursor.fetchone() == ('quo"te',)
