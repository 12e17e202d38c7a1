"""Text decoders for any DateStyle / IntervalStyle (TypeRegistry.text_decoders_for_styles),
and TypeRegistry.version.

Against real servers: the text a session prints after SET DateStyle / SET IntervalStyle
must decode to what the binary form of the same value decodes to (binary does not depend
on either setting), or, where the text cannot tell (timestamptz in a non-ISO DateStyle),
raise ValueError naming the setting.
"""

from __future__ import annotations

import datetime as dt

import pytest
from support.rawquery import raw_connection_fixture
from support.values import SERVER_VALUES, assert_same, same

from pgmux.types import Interval, TypeRegistry, default_registry, oids

REG = default_registry
UTC = dt.timezone.utc
STYLED = [oids.DATE, oids.TIME, oids.TIMETZ, oids.TIMESTAMP, oids.TIMESTAMPTZ, oids.INTERVAL,
          oids.DATE_ARRAY, oids.TIME_ARRAY, oids.TIMETZ_ARRAY, oids.TIMESTAMP_ARRAY,
          oids.TIMESTAMPTZ_ARRAY, oids.INTERVAL_ARRAY,
          oids.DATERANGE, oids.TSRANGE, oids.TSTZRANGE, oids.DATEMULTIRANGE, oids.TSMULTIRANGE,
          oids.TSTZMULTIRANGE, oids.DATERANGE_ARRAY, oids.TSRANGE_ARRAY, oids.TSTZRANGE_ARRAY,
          oids.DATEMULTIRANGE_ARRAY, oids.TSMULTIRANGE_ARRAY, oids.TSTZMULTIRANGE_ARRAY]


# -- without a server --------------------------------------------------------------------------


@pytest.mark.parametrize("datestyle", ["ISO, MDY", "ISO, DMY", "ISO, YMD", "iso"])
def test_iso_and_postgres_are_the_registry_decoders_themselves(datestyle):
    found = REG.text_decoders_for_styles(datestyle, "postgres")
    assert sorted(found) == sorted(STYLED)
    for oid, decoder in found.items():
        assert decoder is REG.text_decoder(oid), oid


@pytest.mark.parametrize(("datestyle", "intervalstyle"), [
    ("XSD, MDY", "postgres"), ("SQL, DMY, MDY", "postgres"), ("", "postgres"),
    ("ISO, MDY", "verbose"), ("SQL, MDY", ""),
])  # fmt: skip
def test_unknown_styles_are_refused(datestyle, intervalstyle):
    with pytest.raises(ValueError, match="DateStyle|IntervalStyle"):
        REG.text_decoders_for_styles(datestyle, intervalstyle)


# Server output (PostgreSQL 15) -> value, per style.
STYLE_TEXTS = [
    ("SQL, MDY", oids.DATE, b"07/01/2024", dt.date(2024, 7, 1)),
    ("SQL, DMY", oids.DATE, b"01/07/2024", dt.date(2024, 7, 1)),
    ("SQL, YMD", oids.DATE, b"07/01/2024", dt.date(2024, 7, 1)),  # YMD prints month first
    ("SQL, DMY", oids.DATE, b"15/03/0044 BC", "0044-03-15 BC"),
    ("German, DMY", oids.DATE, b"01.07.2024", dt.date(2024, 7, 1)),
    ("German, MDY", oids.DATE, b"01.07.2024", dt.date(2024, 7, 1)),  # always day first
    ("Postgres, MDY", oids.DATE, b"07-01-2024", dt.date(2024, 7, 1)),
    ("Postgres, DMY", oids.DATE, b"01-07-2024", dt.date(2024, 7, 1)),
    ("Postgres, MDY", oids.DATE, b"01-01-10000", "10000-01-01"),
    ("SQL, MDY", oids.DATE, b"infinity", dt.date.max),
    ("SQL, DMY", oids.TIMESTAMP, b"01/07/2024 12:00:00.5", dt.datetime(2024, 7, 1, 12, 0, 0, 500000)),
    ("German, DMY", oids.TIMESTAMP, b"01.07.2024 12:00:00", dt.datetime(2024, 7, 1, 12)),
    ("Postgres, MDY", oids.TIMESTAMP, b"Mon Jul 01 12:00:00 2024", dt.datetime(2024, 7, 1, 12)),
    ("Postgres, DMY", oids.TIMESTAMP, b"Mon 01 Jul 12:00:00.000001 2024",
     dt.datetime(2024, 7, 1, 12, 0, 0, 1)),
    ("Postgres, MDY", oids.TIMESTAMP, b"Fri Mar 15 12:00:00 0044 BC", "0044-03-15 12:00:00 BC"),
    ("SQL, MDY", oids.TIMESTAMP, b"-infinity", dt.datetime.min),
    ("SQL, MDY", oids.TIMESTAMPTZ, b"infinity", dt.datetime.max.replace(tzinfo=UTC)),
    ("SQL, MDY", oids.TIMETZ, b"12:00:00+05", dt.time(12, tzinfo=dt.timezone(dt.timedelta(hours=5)))),
    ("German, DMY", oids.TIME, b"24:00:00", "24:00:00"),
]  # fmt: skip


@pytest.mark.parametrize(("datestyle", "oid", "data", "expected"), STYLE_TEXTS)
def test_date_styles_on_server_output(datestyle, oid, data, expected):
    assert_same(REG.text_decoders_for_styles(datestyle, "postgres")[oid](data), expected)


@pytest.mark.parametrize("datestyle", ["SQL, MDY", "Postgres, DMY", "German, DMY"])
@pytest.mark.parametrize("data", [b"07/01/2024 14:00:00.5 CEST", b"01.07.2024 06:30:00.5 ",
                                  b"Mon Jul 01 12:00:00 2024 GMT", b"07/01/2024 12:00:00 UTC"])
def test_timestamptz_outside_iso_is_refused_with_the_setting_named(datestyle, data):
    decode = REG.text_decoders_for_styles(datestyle, "postgres")[oids.TIMESTAMPTZ]
    with pytest.raises(ValueError, match=f"DateStyle '{datestyle}'.*use DateStyle ISO"):
        decode(data)


INTERVAL_TEXTS = [
    ("postgres_verbose", b"@ 1 year 2 mons -3 days 4 hours 5 mins 6.789 secs",
     Interval(14, -3, 14_706_789_000)),
    ("postgres_verbose", b"@ 1 year 2 mons ago", Interval(-14, 0, 0)),
    ("postgres_verbose", b"@ 0", dt.timedelta(0)),
    ("postgres_verbose", b"@ 1.5 secs ago", dt.timedelta(microseconds=-1_500_000)),
    ("postgres_verbose", b"@ 1 day -1 sec ago", dt.timedelta(days=-1, seconds=1)),
    ("postgres_verbose", b"@ 1 sec", dt.timedelta(seconds=1)),
    ("sql_standard", b"+1-2 -3 +4:05:06.789", Interval(14, -3, 14_706_789_000)),
    ("sql_standard", b"-1-2", Interval(-14, 0, 0)),
    ("sql_standard", b"0", dt.timedelta(0)),
    ("sql_standard", b"-0:00:01.5", dt.timedelta(microseconds=-1_500_000)),
    ("sql_standard", b"+0-0 -1 +0:00:01", dt.timedelta(days=-1, seconds=1)),
    ("sql_standard", b"-3 4:00:00", dt.timedelta(days=-3, hours=-4)),
    ("sql_standard", b"3 0:00:00", dt.timedelta(days=3)),
    ("iso_8601", b"P1Y2M-3DT4H5M6.789S", Interval(14, -3, 14_706_789_000)),
    ("iso_8601", b"P-1Y-2M", Interval(-14, 0, 0)),
    ("iso_8601", b"PT0S", dt.timedelta(0)),
    ("iso_8601", b"PT-1.5S", dt.timedelta(microseconds=-1_500_000)),
    ("iso_8601", b"P-1DT1S", dt.timedelta(days=-1, seconds=1)),
    ("iso_8601", b"infinity", "infinity"),
]


@pytest.mark.parametrize(("intervalstyle", "data", "expected"), INTERVAL_TEXTS)
def test_interval_styles_on_server_output(intervalstyle, data, expected):
    decode = REG.text_decoders_for_styles("ISO, MDY", intervalstyle)[oids.INTERVAL]
    assert_same(decode(data), expected)


def test_arrays_use_the_styled_element_decoder():
    found = REG.text_decoders_for_styles("SQL, DMY", "iso_8601")
    assert found[oids.DATE_ARRAY](b"{01/07/2024,NULL}") == [dt.date(2024, 7, 1), None]
    assert found[oids.TIMESTAMP_ARRAY](b'{"01/07/2024 12:00:00"}') == [dt.datetime(2024, 7, 1, 12)]
    assert found[oids.INTERVAL_ARRAY](b"{P1D,PT1S}") == [dt.timedelta(1), dt.timedelta(seconds=1)]
    assert found[oids.TIME_ARRAY] is REG.text_decoder(oids.TIME_ARRAY)  # time prints the same


def test_registered_decoders_win_over_the_styled_ones():
    registry = TypeRegistry()
    registry.register(oids.DATE, text_decoder=lambda data: ("date", bytes(data)))
    registry.register(oids.TIMESTAMP_ARRAY, text_decoder=lambda data: "my array")
    registry.register_array(990_001, oids.INTERVAL)  # a domain's array, say
    found = registry.text_decoders_for_styles("SQL, DMY", "iso_8601")
    assert found[oids.DATE](b"01/07/2024") == ("date", b"01/07/2024")
    assert found[oids.DATE_ARRAY](b"{x}") == [("date", b"x")]
    assert found[oids.TIMESTAMP_ARRAY](b"{}") == "my array"
    assert found[990_001](b"{P1D}") == [dt.timedelta(1)]
    assert found[oids.TIMESTAMP](b"01/07/2024 12:00:00") == dt.datetime(2024, 7, 1, 12)


# -- TypeRegistry.version ----------------------------------------------------------------------


def test_version_counts_every_registration():
    registry = TypeRegistry()
    start = registry.version
    registry.register(990_002, text_decoder=str)
    registry.register(990_003, binary_decoder=bytes)
    registry.register(990_004, python_type=complex, encoder=str)
    registry.register_array(990_005, oids.INT4)
    assert registry.version == start + 4
    assert default_registry.version != registry.version or default_registry is not registry


def test_copy_keeps_the_codecs_and_the_version_then_counts_on_its_own():
    registry = TypeRegistry()
    registry.register(990_006, text_decoder=lambda data: "six")
    copied = registry.copy()
    assert copied.version == registry.version
    assert copied.text_decoder(990_006)(b"") == "six"
    assert copied.text_decoders_for_styles("SQL, MDY", "postgres")[oids.DATE](b"07/01/2024") == \
        dt.date(2024, 7, 1)
    copied.register(oids.DATE, text_decoder=lambda data: "copy's")
    assert copied.version == registry.version + 1
    assert registry.text_decoder(oids.DATE)(b"2024-07-01") == dt.date(2024, 7, 1)
    assert copied.text_decoders_for_styles("SQL, MDY", "postgres")[oids.DATE](b"x") == "copy's"
    assert registry.text_decoders_for_styles("SQL, MDY", "postgres")[oids.DATE](
        b"07/01/2024") == dt.date(2024, 7, 1)


# -- real servers ------------------------------------------------------------------------------

DATE_STYLES = ["SQL, MDY", "SQL, DMY", "SQL, YMD", "Postgres, MDY", "Postgres, DMY",
               "German, DMY", "ISO, DMY"]
INTERVAL_STYLES = ["postgres", "postgres_verbose", "sql_standard", "iso_8601"]
DATE_TIME_TYPES = ["date", "time", "timetz", "timestamp", "interval"]


raw = raw_connection_fixture("Europe/Paris")


def styled_query(raw, datestyle: str, intervalstyle: str, sql: str) -> tuple[list, list, dict]:
    """(text rows, binary rows decoded, styled decoders) of ``sql`` under these styles."""
    raw.execute(f"SET DateStyle = '{datestyle}'; SET IntervalStyle = '{intervalstyle}'")
    try:
        decoders = REG.text_decoders_for_styles(raw.parameter("DateStyle"),
                                                raw.parameter("IntervalStyle"))
        text_result = raw.query(sql, result_format=0)
        binary_rows = raw.query(sql, result_format=1).decoded(REG.binary_decoder)
    finally:
        raw.execute("RESET DateStyle; RESET IntervalStyle")
    return text_result, binary_rows, decoders


@pytest.mark.parametrize("intervalstyle", INTERVAL_STYLES)
@pytest.mark.parametrize("datestyle", DATE_STYLES)
def test_styled_text_decodes_to_the_binary_value(raw, datestyle, intervalstyle):
    columns = [f"({value})::{name}" for name in DATE_TIME_TYPES for value in SERVER_VALUES[name]]
    arrays = [f"ARRAY[{', '.join(SERVER_VALUES[name])}, NULL]::{name}[]"
              for name in DATE_TIME_TYPES]
    text_result, binary_rows, decoders = styled_query(
        raw, datestyle, intervalstyle, "SELECT " + ", ".join(columns + arrays))
    [from_text] = text_result.decoded(lambda oid: decoders[oid])
    for text_value, binary_value in zip(from_text, binary_rows[0], strict=True):
        assert same(text_value, binary_value), (datestyle, intervalstyle, text_value, binary_value)


@pytest.mark.parametrize("datestyle", ["SQL, MDY", "Postgres, DMY", "German, DMY"])
def test_timestamptz_text_outside_iso_raises(raw, datestyle):
    text_result, _, decoders = styled_query(
        raw, datestyle, "postgres",
        "SELECT '2024-07-01 12:00:00+00'::timestamptz, 'infinity'::timestamptz")
    (finite, infinite), = text_result.rows
    with pytest.raises(ValueError, match="DateStyle.*ISO"):
        decoders[oids.TIMESTAMPTZ](finite)
    assert decoders[oids.TIMESTAMPTZ](infinite) == dt.datetime.max.replace(tzinfo=UTC)
    assert decoders[oids.TIMESTAMPTZ_ARRAY](b"{infinity}") == [dt.datetime.max.replace(tzinfo=UTC)]


def test_iso_timestamptz_in_a_session_zone_is_utc(raw):
    text_result, binary_rows, decoders = styled_query(
        raw, "ISO, DMY", "postgres", "SELECT " + ", ".join(SERVER_VALUES["timestamptz"]))
    [from_text] = text_result.decoded(lambda oid: decoders[oid])
    for text_value, binary_value in zip(from_text, binary_rows[0], strict=True):
        assert_same(text_value, binary_value)
