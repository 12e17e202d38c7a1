"""Client-side literals (pgmux.dbapi.quoting): the text, and that the server reads each back as
the value it came from, whatever standard_conforming_strings says."""

from __future__ import annotations

import datetime as dt
import ipaddress
import uuid
from decimal import Decimal

import pytest

import pgmux
import pgmux.dbapi
from pgmux.dbapi.quoting import mogrify, quote
from pgmux.types import Json

VALUES = [
    None, True, False, 0, 42, -42, 2**40, -(2**63), 1.5, -0.25, float("inf"), float("-inf"),
    Decimal("12.50"), Decimal("-3"), Decimal("Infinity"), "plain", "it's", "back\\slash",
    "o'k\\", "", "ünïcode ✓", b"\x00\xffraw", bytearray(b"ba"),
    dt.date(2024, 2, 29), dt.datetime(2024, 5, 1, 13, 4, 5, 123456),
    dt.datetime(2024, 5, 1, 13, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=-3))),
    dt.time(23, 59, 58), dt.timedelta(days=-2, seconds=7), uuid.UUID(int=7),
    ipaddress.ip_address("10.0.0.1"), ipaddress.ip_interface("10.0.0.1/8"),
    ipaddress.ip_network("2001:db8::/32"), [1, 2, 3], ["a", "b'c", None], [[1, 2], [3, 4]],
]


@pytest.mark.parametrize(("value", "text"), [
    (None, "NULL"), (True, "true"), (42, "42"), (-42, " -42"), (float("nan"), "'NaN'::float8"),
    (Decimal("NaN"), "'NaN'::numeric"), ("it's", "'it''s'"), ("a\\b", " E'a\\\\b'"),
    (b"\x01", " E'\\\\x01'::bytea"), (dt.date(2024, 1, 2), "'2024-01-02'::date"),
    (Json({"k": 1}), "'{\"k\": 1}'::jsonb"), ([1, 2], "'{1,2}'::int4[]"),
])
def test_literal_text(value, text):
    assert quote(value) == text


def test_mogrify_fills_placeholders_with_literals():
    assert mogrify("SELECT %s + %s, '%%s'", (1, -2)) == "SELECT 1 +  -2, '%s'"
    assert mogrify("SELECT %(a)s, %(a)s", {"a": "x"}) == "SELECT 'x', 'x'"
    assert mogrify("WHERE id IN %s", [(1, 2)]) == "WHERE id IN (1, 2)"
    assert mogrify("SELECT %s", None) == "SELECT %s"


def test_a_nul_character_cannot_be_quoted():
    with pytest.raises(pgmux.DataError, match="NUL"):
        quote("a\x00b")


@pytest.mark.parametrize("standard_strings", ["on", "off"])
def test_the_server_reads_each_literal_back_as_its_value(pg, standard_strings):
    conn = pgmux.dbapi.connect(pg.dsn, autocommit=True, pipeline_size=0, pinned_size=1,
                               application_name=f"quoting-{standard_strings}")
    try:
        cur = conn.cursor()
        cur.execute(f"SET standard_conforming_strings = {standard_strings}")
        for value in VALUES:
            cur.execute(f"SELECT {quote(value)}")
            got = cur.fetchone()[0]
            if isinstance(value, bytearray):
                value = bytes(value)
            assert got == value, (value, quote(value))
    finally:
        conn.close()
        conn.client.close()
