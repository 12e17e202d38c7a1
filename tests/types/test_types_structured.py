"""Byte-level tests of ranges, multiranges, composites and hstore, and of learning them.

Every server string below was printed by PostgreSQL 15 (text under pgmux's settings;
binary fixtures are ``encode(range_send(...), 'hex')`` and the like), no server needed.
"""

from __future__ import annotations

import datetime as dt
import pickle
from collections import namedtuple
from dataclasses import dataclass
from decimal import Decimal

import pytest

from pgmux.errors import InterfaceError
from pgmux.types import Hstore, Multirange, Range, TypeRegistry, oids
from pgmux.types.composites import split_record_text
from pgmux.types.hstore import decode_hstore_binary, decode_hstore_text
from pgmux.types.introspect import TypeInfo
from pgmux.types.ranges import parse_range_text

UTC = dt.timezone.utc


@pytest.fixture
def reg() -> TypeRegistry:
    return TypeRegistry()


# -- Range ---------------------------------------------------------------------------------


def test_range_parts_and_predicates():
    r = Range(1, 5, "[)")
    assert (r.lower, r.upper, r.bounds) == (1, 5, "[)")
    assert r.lower_inc and not r.upper_inc and not r.lower_inf and not r.upper_inf
    assert not r.isempty and bool(r)
    assert [x in r for x in (0, 1, 4, 5)] == [False, True, True, False]
    closed = Range(1, 5, "[]")
    assert 5 in closed and 1 in closed
    opened = Range(1, 5, "()")
    assert 1 not in opened and 2 in opened and 5 not in opened


def test_unbounded_sides_have_exclusive_brackets():
    r = Range(None, 5, "[]")
    assert r.bounds == "(]" and r.lower_inf and not r.lower_inc and r.upper_inc
    assert -(10**9) in r and 5 in r and 6 not in r
    assert Range(3, None, "[]").bounds == "[)"
    everything = Range()
    assert everything.bounds == "()" and everything.lower_inf and everything.upper_inf
    assert 0 in everything


def test_empty_range():
    e = Range(empty=True)
    assert e.isempty and not e and e.bounds == ""
    assert e.lower is None and e.upper is None
    assert not e.lower_inf and not e.upper_inf and not e.lower_inc and not e.upper_inc
    assert 1 not in e
    assert repr(e) == "Range(empty=True)"
    assert e == Range(1, 2, "[]", empty=True)


def test_range_equality_hash_repr_pickle():
    assert Range(1, 3) == Range(1, 3, "[)")
    assert Range(1, 3) != Range(1, 3, "[]")
    assert Range(1, 3) != (1, 3)
    assert len({Range(1, 3), Range(1, 3), Range(empty=True)}) == 2
    assert repr(Range(1, None, "[)")) == "Range(1, None, '[)')"
    assert pickle.loads(pickle.dumps(Range(Decimal("1.5"), 2))) == Range(Decimal("1.5"), 2)


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="bounds"):
        Range(1, 2, "[[")


# -- range codecs on server output ------------------------------------------------------------

RANGE_TEXT = [
    (oids.INT4RANGE, b"[1,3)", Range(1, 3)),
    (oids.INT4RANGE, b"empty", Range(empty=True)),
    (oids.INT4RANGE, b"(,5)", Range(None, 5, "()")),
    (oids.INT4RANGE, b"[3,)", Range(3, None)),
    (oids.INT8RANGE, b"[-9223372036854775808,0)", Range(-(2**63), 0)),
    (oids.NUMRANGE, b"[1.5,2.25]", Range(Decimal("1.5"), Decimal("2.25"), "[]")),
    (oids.DATERANGE, b"[2020-01-01,2020-02-01)", Range(dt.date(2020, 1, 1), dt.date(2020, 2, 1))),
    (oids.TSRANGE, b'["2020-01-01 00:00:00","2020-01-02 03:04:05.5")',
     Range(dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 2, 3, 4, 5, 500000))),
    (oids.TSTZRANGE, b'["2019-12-31 22:00:00+00",)',
     Range(dt.datetime(2019, 12, 31, 22, tzinfo=UTC), None)),
]


@pytest.mark.parametrize(("oid", "data", "expected"), RANGE_TEXT)
def test_range_text_on_server_output(reg, oid, data, expected):
    assert reg.text_decoder(oid)(data) == expected


def test_range_text_quoting_of_text_bounds():
    # textrange('a b', 'c"d\e'), textrange('', 'z'), textrange('(', ']') as range_out prints
    decode = parse_range_text
    assert decode(b'["a b","c""d\\\\e")', bytes.decode) == Range("a b", 'c"d\\e')
    assert decode(b'["",z)', bytes.decode) == Range("", "z")
    assert decode(b'["(","]")', bytes.decode) == Range("(", "]")
    assert decode(b"[a\\,b,c)", bytes.decode) == Range("a,b", "c")  # range_in's escapes


RANGE_BINARY = [
    (oids.INT4RANGE, "0200000004000000010000000400000003", Range(1, 3)),
    (oids.INT4RANGE, "01", Range(empty=True)),
    (oids.INT4RANGE, "080000000400000005", Range(None, 5, "()")),
    (oids.NUMRANGE, "120000000c000200000000000100011388", Range(Decimal("1.5"), None)),
]


@pytest.mark.parametrize(("oid", "hex_data", "expected"), RANGE_BINARY)
def test_range_binary_on_server_output(reg, oid, hex_data, expected):
    assert reg.binary_decoder(oid)(bytes.fromhex(hex_data)) == expected


def test_multiranges_on_server_output(reg):
    two = Multirange([Range(1, 3), Range(5, 7)])
    assert reg.text_decoder(oids.INT4MULTIRANGE)(b"{[1,3),[5,7)}") == two
    assert reg.text_decoder(oids.INT4MULTIRANGE)(b"{}") == Multirange()
    binary = ("00000002000000110200000004000000010000000400000003"
              "000000110200000004000000050000000400000007")
    found = reg.binary_decoder(oids.INT4MULTIRANGE)(bytes.fromhex(binary))
    assert found == two and type(found) is Multirange
    assert repr(two) == "Multirange([Range(1, 3, '[)'), Range(5, 7, '[)')])"
    ts = reg.text_decoder(oids.TSMULTIRANGE)(b'{["2020-01-01 00:00:00",)}')
    assert ts == [Range(dt.datetime(2020, 1, 1), None)]


def test_arrays_of_ranges_and_multiranges(reg):
    assert reg.text_decoder(oids.INT4RANGE_ARRAY)(b'{"[1,3)",empty,"(,)",NULL}') == [
        Range(1, 3), Range(empty=True), Range(), None]
    assert reg.text_decoder(oids.INT4MULTIRANGE_ARRAY)(b'{"{[1,2)}"}') == [[Range(1, 2)]]


def test_range_result_formats_follow_their_subtypes(reg):
    for oid in (oids.INT4RANGE, oids.INT8RANGE, oids.DATERANGE, oids.TSRANGE, oids.TSTZRANGE,
                oids.INT4MULTIRANGE, oids.TSTZMULTIRANGE, oids.INT4RANGE_ARRAY):
        assert reg.result_format(oid) == 1, oid
    # numeric is read as text (exact, cheaper), and so are its ranges
    assert reg.result_format(oids.NUMRANGE) == reg.result_format(oids.NUMERIC) == 0
    assert reg.binary_decoder(oids.NUMRANGE) is not None


def test_range_text_in_other_datestyles(reg):
    styled = reg.text_decoders_for_styles("SQL, DMY", "postgres")
    value = styled[oids.TSRANGE](b'["02/01/2020 03:04:05",)')
    assert value == Range(dt.datetime(2020, 1, 2, 3, 4, 5), None)
    assert styled[oids.DATERANGE_ARRAY](b'{"[02/01/2020,03/01/2020)"}') == [
        Range(dt.date(2020, 1, 2), dt.date(2020, 1, 3))]


# -- range parameters -------------------------------------------------------------------------

RANGE_PARAMS = [
    (Range(1, 3), 0, b"[1,3)"),  # int: untyped (int4range and int8range do not cast)
    (Range(None, 2**40, "(]"), 0, b"(,1099511627776]"),
    (Range(Decimal("1.5"), None), oids.NUMRANGE, b"[1.5,)"),
    (Range(dt.date(2020, 1, 1), dt.date(2020, 2, 1)), oids.DATERANGE,
     b"[2020-01-01,2020-02-01)"),
    (Range(dt.datetime(2020, 1, 1), None), oids.TSRANGE, b'["2020-01-01 00:00:00",)'),
    (Range(None, dt.datetime(2020, 1, 1, tzinfo=UTC)), oids.TSTZRANGE,
     b'(,"2020-01-01 00:00:00+00:00")'),
    (Range("a b", 'q"\\'), 0, b'["a b","q\\"\\\\")'),
    (Range(empty=True), 0, b"empty"),
    (Multirange([Range(1, 3), Range(5, 7)]), 0, b"{[1,3),[5,7)}"),
    (Multirange([Range(Decimal(1), Decimal(2))]), oids.NUMMULTIRANGE, b"{[1,2)}"),
    (Multirange(), 0, b"{}"),
    ([Range(dt.date(2020, 1, 1), None), None], oids.DATERANGE_ARRAY, b'{"[2020-01-01,)",NULL}'),
]


@pytest.mark.parametrize(("value", "oid", "data"), RANGE_PARAMS)
def test_range_parameters(reg, value, oid, data):
    assert reg.encode(value) == (oid, 0, data)


def test_range_parameter_text_reads_back(reg):
    for value in (Range("a b", 'q"\\'), Range("", "z"), Range("(", "]")):
        data = reg.encode(value)[2]
        assert parse_range_text(data, bytes.decode) == value


def test_range_parameter_with_nul_is_refused(reg):
    with pytest.raises(InterfaceError, match="NUL"):
        reg.encode(Range("a\x00", "b"))


# -- composites -----------------------------------------------------------------------------

PAIR, NEST, PAIR_ARRAY = 34477, 34480, 34479


def composite_infos() -> list[TypeInfo]:
    """pg_type rows of CREATE TYPE pair AS (n int, s text); nest AS (p pair, ps pair[], d date)."""
    return [
        TypeInfo(PAIR, "pair", "c", "C", array=PAIR_ARRAY,
                 fields=(("n", oids.INT4), ("s", oids.TEXT))),
        TypeInfo(PAIR_ARRAY, "_pair", "b", "A", element=PAIR),
        TypeInfo(NEST, "nest", "c", "C", array=NEST + 1,
                 fields=(("p", PAIR), ("ps", PAIR_ARRAY), ("d", oids.DATE))),
    ]


def test_split_record_text():
    assert split_record_text(b'(1,"a b")') == [b"1", b"a b"]
    assert split_record_text(b'(,"")') == [None, b""]
    assert split_record_text(b'(2,"x""y\\\\z,()")') == [b"2", b'x"y\\z,()']
    assert split_record_text(b"(3,)") == [b"3", None]
    assert split_record_text(b"(a\\,b,c)") == [b"a,b", b"c"]  # record_in's escapes
    with pytest.raises(ValueError, match="record"):
        split_record_text(b"1,2")


def test_composites_decode_to_tuples(reg):
    reg.learn(composite_infos())
    pair = reg.text_decoder(PAIR)
    assert pair(b'(1,"a b")') == (1, "a b")
    assert pair(b'(,"")') == (None, "")
    assert pair(b'(2,"x""y\\\\z,()")') == (2, 'x"y\\z,()')
    nested = b'("(1,a)","{""(2,\\\\""b c\\\\"")"",NULL}",2020-01-02)'
    assert reg.text_decoder(NEST)(nested) == ((1, "a"), [(2, "b c"), None], dt.date(2020, 1, 2))
    assert reg.text_decoder(PAIR_ARRAY)(b'{"(1,\\"a b\\")","(,)",NULL}') == [
        (1, "a b"), (None, None), None]


def test_learning_a_type_teaches_its_array_type(reg):
    reg.learn([TypeInfo(PAIR, "pair", "c", "C", array=PAIR_ARRAY,
                        fields=(("n", oids.INT4), ("s", oids.TEXT)))], [PAIR])
    assert reg.knows(PAIR_ARRAY) and reg.result_format(PAIR_ARRAY) == 1
    assert reg.text_decoder(PAIR_ARRAY)(b'{"(1,a)"}') == [(1, "a")]


def test_composites_in_binary(reg):
    reg.learn(composite_infos())
    assert reg.result_format(PAIR) == 1 and reg.result_format(NEST) == 1
    assert reg.result_format(PAIR_ARRAY) == 1
    decode = reg.binary_decoder(PAIR)
    one_ab = bytes.fromhex("0000000200000017000000040000000100000019000000026162")
    assert decode(one_ab) == (1, "ab")
    assert decode(bytes.fromhex("0000000200000017ffffffff00000019ffffffff")) == (None, None)


def test_composite_with_a_field_pgmux_reads_as_text_only_is_text(reg):
    point = oids.TYPES["point"][0]
    reg.learn([TypeInfo(40000, "spot", "c", "C", fields=(("at", point), ("n", oids.INT4)))])
    assert reg.result_format(40000) == 0 and reg.binary_decoder(40000) is None
    assert reg.text_decoder(40000)(b'("(1,2)",3)') == ("(1,2)", 3)


def test_registered_composite_factory(reg):
    Pair = namedtuple("Pair", "n s")
    reg.register_composite("pair", Pair)
    reg.learn(composite_infos())
    value = reg.text_decoder(PAIR)(b'(1,"a b")')
    assert type(value) is Pair and value == Pair(1, "a b")
    assert type(reg.text_decoder(NEST)(b'("(1,a)",{},2020-01-02)')[0]) is Pair
    assert reg.encode(Pair(1, "a b")) == (0, 0, b'(1,"a b")')
    assert reg.encode([Pair(1, None)]) == (0, 0, b'{"(1,)"}')


def test_composite_factory_registered_after_learning_and_by_oid(reg):
    reg.learn(composite_infos())
    version = reg.version
    reg.register_composite(PAIR, lambda n, s: {"n": n, "s": s})
    assert reg.version > version
    assert reg.text_decoder(PAIR)(b"(1,a)") == {"n": 1, "s": "a"}
    binary = bytes.fromhex("0000000200000017000000040000000100000019000000026162")
    assert reg.binary_decoder(PAIR)(binary) == {"n": 1, "s": "ab"}


def test_dataclass_composites_as_parameters(reg):
    @dataclass
    class Item:
        name: str
        price: Decimal | None

    reg.register_composite("item", Item)
    assert reg.encode(Item("big (red)", Decimal("1.50"))) == (0, 0, b'("big (red)",1.50)')
    assert reg.encode(Item("", None)) == (0, 0, b'("",)')


def test_copies_keep_composite_registrations(reg):
    Pair = namedtuple("Pair", "n s")
    reg.register_composite("pair", Pair)
    copy = reg.copy()
    copy.learn(composite_infos())
    assert type(copy.text_decoder(PAIR)(b"(1,a)")) is Pair
    assert reg.text_decoder(PAIR)(b"(1,a)") == "(1,a)"  # the original learned nothing
    assert copy.encode(Pair(1, "x")) == (0, 0, b"(1,x)")


# -- hstore ---------------------------------------------------------------------------------

HSTORE = 16388


def test_hstore_text_on_server_output():
    assert decode_hstore_text(b'"a"=>"1", "b c"=>NULL, "q\\"x"=>"\\\\"') == {
        "a": "1", "b c": None, 'q"x': "\\"}
    assert decode_hstore_text(b"") == {}
    assert decode_hstore_text('"é"=>"ü"'.encode()) == {"é": "ü"}
    with pytest.raises(ValueError, match="hstore"):
        decode_hstore_text(b'"a"=>"1",, "b"=>"2"')


def test_hstore_binary_on_server_output():
    data = bytes.fromhex("00000002000000016100000001310000000162ffffffff")
    assert decode_hstore_binary(data) == {"a": "1", "b": None}
    assert decode_hstore_binary(bytes.fromhex("00000000")) == {}


def test_hstore_is_learned_by_name_with_its_arrays(reg):
    assert reg.text_decoder(HSTORE)(b'"a"=>"1"') == '"a"=>"1"'  # not known yet: text
    reg.learn([TypeInfo(HSTORE, "hstore", "b", "U", array=HSTORE + 5),
               TypeInfo(HSTORE + 5, "_hstore", "b", "A", element=HSTORE)])
    assert reg.result_format(HSTORE) == 1 and reg.result_format(HSTORE + 5) == 1
    assert reg.text_decoder(HSTORE)(b'"a"=>"1"') == {"a": "1"}
    # the hstore[]: SELECT ARRAY['a=>1'::hstore, 'b=>NULL, c=>"x y"', NULL]
    array_text = b'{"\\"a\\"=>\\"1\\"","\\"b\\"=>NULL, \\"c\\"=>\\"x y\\"",NULL}'
    assert reg.text_decoder(HSTORE + 5)(array_text) == [{"a": "1"}, {"b": None, "c": "x y"},
                                                        None]


def test_hstore_parameters(reg):
    assert reg.encode(Hstore({"a": "1", 'q"\\': None})) == (0, 0, b'"a"=>"1", "q\\"\\\\"=>NULL')
    assert reg.encode(Hstore({})) == (0, 0, b"")
    assert reg.encode([Hstore({"a": "b c"})]) == (0, 0, b'{"\\"a\\"=>\\"b c\\""}')
    with pytest.raises(InterfaceError, match="hstore value must be a str"):
        reg.encode(Hstore({"a": 1}))
    with pytest.raises(InterfaceError, match="NUL"):
        reg.encode(Hstore({"a": "\x00"}))
    with pytest.raises(InterfaceError, match="Hstore"):
        reg.encode({"a": "1"})  # a bare dict is not guessed at: Json or Hstore


# -- learning ranges and domains --------------------------------------------------------------


def test_user_range_and_multirange_are_learned(reg):
    floatrange, floatmulti = 40100, 40101
    reg.learn([TypeInfo(floatrange, "floatrange", "r", "R", subtype=oids.FLOAT8, array=40102),
               TypeInfo(floatmulti, "floatmultirange", "m", "R", subtype=floatrange),
               TypeInfo(40102, "_floatrange", "b", "A", element=floatrange)])
    assert reg.text_decoder(floatrange)(b"[1.5,2.5)") == Range(1.5, 2.5)
    assert reg.text_decoder(floatmulti)(b"{[1,2),[3,4)}") == [Range(1.0, 2.0), Range(3.0, 4.0)]
    assert reg.result_format(floatrange) == 1 and reg.result_format(floatmulti) == 1
    binary = bytes.fromhex("02" "00000008" "3ff8000000000000" "00000008" "4004000000000000")
    assert reg.binary_decoder(floatrange)(binary) == Range(1.5, 2.5)
    assert reg.text_decoder(40102)(b'{"[1.5,2.5)"}') == [Range(1.5, 2.5)]


def test_domain_over_a_composite_learned_in_the_same_lookup(reg):
    domain = 40200
    reg.learn([*composite_infos(),
               TypeInfo(domain, "pair_d", "d", "C", base=PAIR)])  # the domain comes first
    assert reg.text_decoder(domain)(b"(1,a)") == (1, "a")
    assert reg.result_format(domain) == 1


def test_a_codec_registered_for_a_range_wins(reg):
    reg.register(oids.INT4RANGE, text_decoder=lambda data: ("mine", bytes(data)))
    assert reg.text_decoder(oids.INT4RANGE)(b"[1,2)") == ("mine", b"[1,2)")
    assert reg.result_format(oids.INT4RANGE) == 0
    assert reg.text_decoder(oids.INT4RANGE_ARRAY)(b'{"[1,2)"}') == [("mine", b"[1,2)")]
