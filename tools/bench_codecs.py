"""Micro-benchmark of pgmux's type codecs: ns per value, text vs binary, and µs per row.

Usage: python tools/bench_codecs.py [--quick]

Per type, the server's text of a typical value (ISO DateStyle, IntervalStyle postgres)
and its binary form (*_send output) are decoded with the registry's text and binary
decoders; both must give the same value. Then the 1,000 rows x 8 columns workload
(int4, text, timestamptz, numeric(12,2), float8, bool, uuid, jsonb): today's path (text
decoders + the checked row loop, as result.decode_row did) against the new one (the registry's result formats:
binary but numeric, + types.rows.make_row_decoder), with the mixes in between.

Timings are the best of many short rounds, taken in turn, so a shared machine's noise
mostly falls out; compare the ratios.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import struct
import sys
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pgmux.types import default_registry, oids  # noqa: E402
from pgmux.types.rows import decode_row_checked, make_row_decoder  # noqa: E402
from pgmux.types.temporal import EPOCH_UTC  # noqa: E402

REG = default_registry
UTC = dt.timezone.utc


def array_send(element_oid: int, elements: list[bytes | None]) -> bytes:
    """array_send output of a one-dimensional array."""
    head = struct.pack("!iiIii", 1, None in elements, element_oid, len(elements), 1)
    return head + b"".join(b"\xff\xff\xff\xff" if e is None else struct.pack("!i", len(e)) + e
                           for e in elements)


def micros(value: dt.datetime) -> int:
    return (value - EPOCH_UTC) // dt.timedelta(microseconds=1)


INSTANT = dt.datetime(2024, 7, 15, 12, 34, 56, 123456, tzinfo=UTC)
DOC = {"id": 12345, "name": "widget", "tags": ["a", "b"], "price": 12.5}
UUID = uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")

# (label, oid, server text, binary form)
SAMPLES: list[tuple[str, int, bytes, bytes]] = [
    ("bool", oids.BOOL, b"t", b"\x01"),
    ("int2", oids.INT2, b"-1234", struct.pack("!h", -1234)),
    ("int4", oids.INT4, b"123456", struct.pack("!i", 123456)),
    ("int8", oids.INT8, b"-9007199254740993", struct.pack("!q", -9007199254740993)),
    ("oid", oids.OID, b"4294967295", struct.pack("!I", 4294967295)),
    ("xid8", oids.XID8, b"123456789", struct.pack("!Q", 123456789)),
    ("float4 0.1", oids.FLOAT4, b"0.1", struct.pack("!f", 0.1)),
    ("float4 3.1415927", oids.FLOAT4, b"3.1415927", struct.pack("!f", 3.1415927)),
    ("float8", oids.FLOAT8, b"3.141592653589793", struct.pack("!d", 3.141592653589793)),
    ("numeric(12,2)", oids.NUMERIC, b"12345.67", bytes.fromhex("0003000100000002000109291a2c")),
    ("numeric 30 digits", oids.NUMERIC, b"-1234567890123456.78901234567890",
     bytes.fromhex("000800034000000e04d2162e23340d801ed204d2162e2328")),
    ("bytea 32 B", oids.BYTEA, b"\\x" + bytes(range(32)).hex().encode(), bytes(range(32))),
    ("text", oids.TEXT, "héllo wörld".encode(), "héllo wörld".encode()),
    ('"char"', oids.CHAR, b"a", b"a"),
    ("json", oids.JSON, json.dumps(DOC).encode(), json.dumps(DOC).encode()),
    ("jsonb", oids.JSONB, json.dumps(DOC).encode(), b"\x01" + json.dumps(DOC).encode()),
    ("uuid", oids.UUID, str(UUID).encode(), UUID.bytes),
    ("date", oids.DATE, b"2024-07-15", struct.pack("!i", 8962)),
    ("time", oids.TIME, b"12:34:56.123456", struct.pack("!q", 45296123456)),
    ("timetz", oids.TIMETZ, b"12:34:56.123456+05:30", struct.pack("!qi", 45296123456, -19800)),
    ("timestamp", oids.TIMESTAMP, b"2024-07-15 12:34:56.123456",
     struct.pack("!q", micros(INSTANT))),
    ("timestamptz UTC", oids.TIMESTAMPTZ, b"2024-07-15 12:34:56.123456+00",
     struct.pack("!q", micros(INSTANT))),
    ("timestamptz +05:30", oids.TIMESTAMPTZ, b"2024-07-15 18:04:56.123456+05:30",
     struct.pack("!q", micros(INSTANT))),
    ("interval 1 day 02:03:04", oids.INTERVAL, b"1 day 02:03:04",
     struct.pack("!qii", 7384000000, 1, 0)),
    ("interval 1 year 2 mons", oids.INTERVAL, b"1 year 2 mons", struct.pack("!qii", 0, 0, 14)),
    ("inet", oids.INET, b"192.168.0.1", bytes([2, 32, 0, 4, 192, 168, 0, 1])),
    ("inet/24", oids.INET, b"192.168.0.1/24", bytes([2, 24, 0, 4, 192, 168, 0, 1])),
    ("cidr", oids.CIDR, b"10.0.0.0/8", bytes([2, 8, 1, 4, 10, 0, 0, 0])),
    ("int4[10]", oids.INT4_ARRAY, b"{" + b",".join(b"%d" % i for i in range(10)) + b"}",
     array_send(oids.INT4, [struct.pack("!i", i) for i in range(10)])),
    ("int4[1000]", oids.INT4_ARRAY, b"{" + b",".join(b"%d" % i for i in range(1000)) + b"}",
     array_send(oids.INT4, [struct.pack("!i", i) for i in range(1000)])),
    ("text[5]", oids.TEXT_ARRAY, b'{alpha,"b c",NULL,"d\\"e",f}',
     array_send(oids.TEXT, [b"alpha", b"b c", None, b'd"e', b"f"])),
    ("jsonb[3]", oids.JSONB_ARRAY, b'{"{\\"a\\": 1}","{\\"b\\": [2]}",null}',
     array_send(oids.JSONB, [b'\x01{"a": 1}', b'\x01{"b": [2]}', b"\x01null"])),
    ("timestamptz[5]", oids.TIMESTAMPTZ_ARRAY,
     b'{"2024-07-15 12:34:56.123456+00"' + b',"2024-07-15 12:34:56.123456+00"' * 4 + b"}",
     array_send(oids.TIMESTAMPTZ, [struct.pack("!q", micros(INSTANT))] * 5)),
]


def best_ns(calls: list[Callable[[], object]], rounds: int, number: int) -> list[float]:
    """Best time per call (ns) of each function, the rounds taken in turn."""
    best = [float("inf")] * len(calls)
    for _ in range(rounds):
        for index, call in enumerate(calls):
            start = time.perf_counter_ns()
            for _ in range(number):
                call()
            best[index] = min(best[index], (time.perf_counter_ns() - start) / number)
    return best


def per_value(rounds: int) -> None:
    print("ns per value (best of rounds)                text    binary   binary/text  format")
    for label, oid, text_data, binary_data in SAMPLES:
        text_decode, binary_decode = REG.text_decoder(oid), REG.binary_decoder(oid)
        from_text, from_binary = text_decode(text_data), binary_decode(binary_data)
        assert repr(from_text) == repr(from_binary) or from_text == from_binary, (
            label, from_text, from_binary)
        text_ns, binary_ns = best_ns([partial(text_decode, text_data),
                                      partial(binary_decode, binary_data)], rounds, 2000)
        chosen = "binary" if REG.result_format(oid) else "text"
        print(f"  {label:40s} {text_ns:7.0f} {binary_ns:9.0f} {binary_ns / text_ns:10.2f}x"
              f"  {chosen}")


WIDE_TYPES = [oids.INT4, oids.TEXT, oids.TIMESTAMPTZ, oids.NUMERIC, oids.FLOAT8, oids.BOOL,
              oids.UUID, oids.JSONB]


def wide_rows(result_format: Callable[[int], int]) -> list[bytes]:
    """1,000 DataRow payloads of the 8-column workload, each column in the given format."""
    rows = []
    for i in range(1000):
        instant = INSTANT + dt.timedelta(seconds=37 * i, microseconds=i)
        doc = json.dumps({"id": i, "name": f"item {i}", "tags": ["x", "y"]}).encode()
        key = uuid.UUID(int=i * 7919 + 12345)
        price = f"{i * 3}.{i % 100:02d}".encode()
        text = [b"%d" % i, f"name {i}".encode(), instant.isoformat(" ").encode()[:-6] + b"+00",
                price, repr(i * 0.1).encode(), b"t", str(key).encode(), doc]
        binary = [struct.pack("!i", i), f"name {i}".encode(), struct.pack("!q", micros(instant)),
                  price, struct.pack("!d", i * 0.1), b"\x01", key.bytes, b"\x01" + doc]
        columns = [binary[n] if result_format(oid) else text[n] for n, oid in enumerate(WIDE_TYPES)]
        rows.append(struct.pack("!h", 8) + b"".join(struct.pack("!i", len(c)) + c for c in columns))
    return rows


def decoders_for(result_format: Callable[[int], int]) -> list:
    return [REG.binary_decoder(oid) if result_format(oid) else REG.text_decoder(oid)
            for oid in WIDE_TYPES]


def per_row(rounds: int) -> None:
    text_rows, text_decoders = wide_rows(lambda oid: 0), decoders_for(lambda oid: 0)
    new_rows, new_decoders = wide_rows(REG.result_format), decoders_for(REG.result_format)
    compiled_text, compiled_new = make_row_decoder(text_decoders), make_row_decoder(new_decoders)
    expected = [decode_row_checked(p, text_decoders) for p in text_rows]
    assert [compiled_new(p) for p in new_rows] == expected
    cases = [
        ("text decoders + the checked loop (before)", lambda: [decode_row_checked(p, text_decoders)
                                                         for p in text_rows]),
        ("text decoders + make_row_decoder", lambda: [compiled_text(p) for p in text_rows]),
        ("registry formats + the checked loop", lambda: [decode_row_checked(p, new_decoders) for p in new_rows]),
        ("registry formats + make_row_decoder (new)", lambda: [compiled_new(p) for p in new_rows]),
    ]
    timings = best_ns([call for _, call in cases], rounds, 1)
    formats = ", ".join(f"{oids_name(oid)} {'bin' if REG.result_format(oid) else 'text'}"
                        for oid in WIDE_TYPES)
    print(f"\n1,000 rows x 8 columns ({formats})")
    for (label, _), ns in zip(cases, timings, strict=True):
        print(f"  {label:44s} {ns / 1000 / 1000:6.2f} µs/row  {timings[0] / ns:5.2f}x today")


def oids_name(oid: int) -> str:
    return next(name for name, (type_oid, _, _) in oids.TYPES.items() if type_oid == oid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = parser.parse_args()
    per_value(rounds=3 if args.quick else 25)
    per_row(rounds=2 if args.quick else 15)


if __name__ == "__main__":
    main()
