"""Transport micro-benchmarks: the reader and decoders over identical backend byte streams.

Each stream is built once from encoded backend messages (what a server sends for
the query), then consumed the way the pipeline driver consumes it: a
``FrameBuffer`` frames the bytes and the query engine (``pgmux.engine``, the same
one both connection kinds run) routes every message to an exchange as a real
connection does (rows decoded with the registry's decoders, the command tag, the
error, COPY chunks). Ways of delivering the same bytes:

* fed from memory in chunks: one byte at a time, cut inside every message header,
  1448 B (an Ethernet TCP segment), 16 KiB (a TLS record), 256 KiB (one recv);
* through a socket pair, plain and TLS: result streams are read by a real
  ``PipelineDriver`` (its writer sends an 8-byte stand-in unit, a server greenlet
  answers with the recorded stream, the driver's reader frames, routes and
  decodes it); COPY, which the pipeline path does not carry, is read by the same
  kind of loop (``recv`` into the buffer, ``recv_into`` straight into a large
  message's own buffer). The serving side runs in the same process, so its cost
  is included.

Per case: time per operation (one whole result), the tracemalloc peak above the
baseline while producing it, the bytes the ``FrameBuffer`` still holds afterwards
(``capacity``), and for the 1 MiB field the peak as a multiple of the payload:
its whole part counts the copies of the payload alive at once (receive buffer,
decoded value, any intermediate); the fraction is smaller buffers (a recv chunk).
"""

from __future__ import annotations

import gc
import os
import ssl
import struct
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent
from gevent import socket
from gevent import ssl as gevent_ssl

from pgmux.engine import CopyExchange, Engine, Exchange, QueryExchange
from pgmux.io.pipeline import PipelineDriver, wait_for
from pgmux.io.transport import Transport
from pgmux.io.wire import RECV_SIZE, Wire
from pgmux.protocol.framing import FrameBuffer
from pgmux.types import TypeRegistry, default_registry, oids

FIELD_SIZE = 1024 * 1024
COPY_FRAMES, COPY_FRAME_SIZE = 128, 8192
ROW_COUNT = 256
MSS, TLS_RECORD = 1448, 16384

# -- backend messages ---------------------------------------------------------------------------


def message(kind: bytes, payload: bytes) -> bytes:
    return kind + struct.pack("!i", len(payload) + 4) + payload


def row_description(columns: list[tuple[str, int, int]]) -> bytes:
    """'T' for (name, type oid, format) columns."""
    parts = [struct.pack("!h", len(columns))]
    for name, type_oid, fmt in columns:
        parts.append(name.encode() + b"\x00" + struct.pack("!ihihih", 0, 0, type_oid, -1, -1, fmt))
    return message(b"T", b"".join(parts))


def data_row(values: list[bytes | None]) -> bytes:
    parts = [struct.pack("!h", len(values))]
    for value in values:
        parts.append(struct.pack("!i", -1) if value is None
                     else struct.pack("!i", len(value)) + value)
    return message(b"D", b"".join(parts))


def command_complete(tag: str) -> bytes:
    return message(b"C", tag.encode() + b"\x00")


BIND_COMPLETE = message(b"2", b"")
READY = message(b"Z", b"I")


def error_response(fields: dict[str, str]) -> bytes:
    body = b"".join(code.encode() + value.encode() + b"\x00" for code, value in fields.items())
    return message(b"E", body + b"\x00")


def _rows_stream() -> bytes:
    columns = [("id", oids.INT4, 0), ("name", oids.TEXT, 0), ("email", oids.TEXT, 0),
               ("balance", oids.INT8, 0), ("created_at", oids.TIMESTAMPTZ, 0)]
    rows = [data_row([str(i).encode(), f"account {i}".encode(), f"user{i}@example.com".encode(),
                      str(i * 100).encode(), b"2024-01-01 00:%02d:00+00" % (i % 60)])
            for i in range(1, ROW_COUNT + 1)]
    return b"".join([BIND_COMPLETE, row_description(columns), *rows,
                     command_complete(f"SELECT {ROW_COUNT}"), READY])


def _field_stream(type_oid: int, fmt: int) -> bytes:
    value = (b"0123456789abcdef" * (FIELD_SIZE // 16))[:FIELD_SIZE]
    return b"".join([BIND_COMPLETE, row_description([("big", type_oid, fmt)]),
                     data_row([value]), command_complete("SELECT 1"), READY])


def _copy_stream() -> bytes:
    chunk = message(b"d", (b"x" * (COPY_FRAME_SIZE - 1)) + b"\n")
    head = message(b"H", struct.pack("!bh", 0, 1) + struct.pack("!h", 0))
    return b"".join([head, chunk * COPY_FRAMES, message(b"c", b""),
                     command_complete(f"COPY {COPY_FRAMES}"), READY])


def _error_stream() -> bytes:
    fields = {"S": "ERROR", "V": "ERROR", "C": "22012", "M": "division by zero",
              "F": "int.c", "L": "841", "R": "int4div"}
    return error_response(fields) + READY


@dataclass(frozen=True)
class Stream:
    name: str
    description: str
    data: bytes
    payload: int = 0  # bytes of the big value, for the copy estimate
    modes: tuple[str, ...] = ()
    pipeline: bool = True  # a unit's answer: the socket modes go through a PipelineDriver


def build_streams(quick: bool = False) -> list[Stream]:
    memory_all = ("bytes-1", "header-split", "1448", "16k", "256k")
    sockets = ("socketpair", "socketpair-tls")
    if quick:
        return [
            Stream("rows256", f"{ROW_COUNT} rows x 5 columns", _rows_stream(),
                   modes=("bytes-1", "256k", "socketpair")),
            Stream("field_1mib_text", "one 1 MiB text field", _field_stream(oids.TEXT, 0),
                   FIELD_SIZE, modes=("256k", "socketpair")),
            Stream("copy_128x8k", f"{COPY_FRAMES} CopyData of 8 KiB", _copy_stream(),
                   modes=("256k", "socketpair"), pipeline=False),
            Stream("error_drain", "ErrorResponse + ReadyForQuery", _error_stream(),
                   modes=("256k", "socketpair")),
        ]
    return [
        Stream("rows256", f"{ROW_COUNT} rows x 5 columns", _rows_stream(),
               modes=memory_all + sockets),
        Stream("field_1mib_text", "one 1 MiB text field", _field_stream(oids.TEXT, 0),
               FIELD_SIZE, modes=("1448", "16k", "256k", *sockets)),
        Stream("field_1mib_bytea", "one 1 MiB bytea field (binary)",
               _field_stream(oids.BYTEA, 1), FIELD_SIZE, modes=("16k", "256k", *sockets)),
        Stream("copy_128x8k", f"{COPY_FRAMES} CopyData of 8 KiB", _copy_stream(),
               modes=("header-split", "16k", "256k", *sockets), pipeline=False),
        Stream("error_drain", "ErrorResponse + ReadyForQuery", _error_stream(),
               modes=("bytes-1", "256k", *sockets)),
    ]


# -- consuming as a connection does -------------------------------------------------------------


class Sink:
    """An engine with one exchange in flight, as a connection has for one query (or COPY)."""

    __slots__ = ("engine", "exchange")

    def __init__(self, registry: TypeRegistry, copy: bool):
        self.engine = Engine({}, registry, shared=False)
        self.exchange: Exchange = CopyExchange(b"", 72) if copy else QueryExchange(b"")
        self.engine.fifo.append(self.exchange)

    @property
    def done(self) -> bool:
        return self.exchange.done


def chunks_of(data: bytes, mode: str) -> list[bytes]:
    """The stream cut the way ``mode`` says (made before timing starts)."""
    if mode == "header-split":
        return _cut_in_headers(data)
    size = {"bytes-1": 1, "1448": MSS, "16k": TLS_RECORD, "256k": RECV_SIZE}[mode]
    return [data[i:i + size] for i in range(0, len(data), size)]


def _cut_in_headers(data: bytes) -> list[bytes]:
    """Cut three bytes into every message header (the type byte and two length bytes)."""
    cuts, pos = [], 0
    while pos < len(data):
        cuts.append(pos + 3)
        pos += 1 + struct.unpack_from("!i", data, pos + 1)[0]
    edges = [0, *[c for c in cuts if c < len(data)], len(data)]
    return [data[a:b] for a, b in zip(edges, edges[1:], strict=False) if b > a]


def feed_all(chunks: list[bytes], registry: TypeRegistry,
             copy: bool) -> tuple[Sink, FrameBuffer]:
    frames = FrameBuffer()
    sink = Sink(registry, copy)
    for chunk in chunks:
        frames.feed(chunk)
        messages = frames.read_messages()
        if messages:
            sink.engine.receive(messages)
    if not sink.done:
        raise RuntimeError("the stream did not end with ReadyForQuery")
    return sink, frames


class SocketLink:
    """A connected socket pair (optionally TLS); the server end sends, we read like the driver."""

    def __init__(self, tls: bool, cert_files: tuple[str, str] | None = None):
        self.server, self.client = socket.socketpair()
        if tls:
            assert cert_files is not None
            self.server, self.client = _tls_pair(self.server, self.client, cert_files)
        self.frames = FrameBuffer()

    def roundtrip(self, data: bytes, registry: TypeRegistry) -> tuple[Sink, FrameBuffer]:
        sender = gevent.spawn(self.server.sendall, data)
        sink = Sink(registry, copy=True)
        frames = self.frames
        receive = Wire(self.client, frames).receive
        while not sink.done:
            messages = receive()
            if messages:
                sink.engine.receive(messages)
        sender.get()
        return sink, frames

    def close(self) -> None:
        for sock in (self.client, self.server):
            sock.close()


class _Connection:
    """What a PipelineDriver needs of a connection (``io.wire.Link``), over a socket pair."""

    def __init__(self, sock: Any, tls: bool):
        self.transport = Transport(sock, "socketpair", 0, is_unix=not tls)
        self.transport.is_tls = tls
        self.frames = FrameBuffer()
        self.parameters: dict[str, str] = {}
        self.pid = 0
        self.endpoint: Any = None

    def close(self, terminate: bool = True) -> None:
        self.transport.close()


UNIT_BYTES = 8  # what the driver writes for one stand-in unit


class DriverLink:
    """A real PipelineDriver on one end of a socket pair; a greenlet serves the other end."""

    def __init__(self, tls: bool, cert_files: tuple[str, str] | None, registry: TypeRegistry):
        server, client = socket.socketpair()
        if tls:
            assert cert_files is not None
            server, client = _tls_pair(server, client, cert_files)
        self.server = server
        self.answer = b""
        self.connection = _Connection(client, tls)
        self.driver = PipelineDriver(self.connection, registry)
        self.driver.start()
        self._serving = gevent.spawn(self._serve)

    def _serve(self) -> None:
        while True:
            need = UNIT_BYTES
            while need:
                got = self.server.recv(need)
                if not got:
                    return
                need -= len(got)
            self.server.sendall(self.answer)

    def roundtrip(self, data: bytes) -> tuple[Exchange, FrameBuffer]:
        self.answer = data
        exchange = QueryExchange(b"\x00" * UNIT_BYTES)
        self.driver.submit(exchange)
        wait_for(exchange, None)
        if exchange.failure is not None:
            raise exchange.failure
        return exchange, self.connection.frames

    def close(self) -> None:
        self.driver.close(timeout=1.0)
        self._serving.kill()
        self.server.close()


def _tls_pair(server: Any, client: Any, cert_files: tuple[str, str]) -> tuple[Any, Any]:
    server_context = gevent_ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(*cert_files)
    client_context = gevent_ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_context.check_hostname = False
    client_context.verify_mode = ssl.CERT_NONE
    accept = gevent.spawn(server_context.wrap_socket, server, server_side=True)
    tls_client = client_context.wrap_socket(client)
    return accept.get(timeout=10), tls_client


def _write_cert(directory: str) -> tuple[str, str]:
    from pgmux.tooling.certs import make_ca, make_cert, write_pem

    ca, ca_key = make_ca("pgmux bench CA", key_type="ec256")
    cert, key = make_cert(ca, ca_key, "localhost", ["localhost"], key_type="ec256")
    return (write_pem(os.path.join(directory, "server.crt"), cert),
            write_pem(os.path.join(directory, "server.key"), key))


# -- measuring ----------------------------------------------------------------------------------


def time_per_op(op: Callable[[], Any], min_time: float, min_reps: int = 3) -> float:
    """Microseconds per call of ``op`` (after one warm-up call)."""
    op()
    reps, started = 0, time.perf_counter()
    while True:
        op()
        reps += 1
        elapsed = time.perf_counter() - started
        if elapsed >= min_time and reps >= min_reps:
            return elapsed / reps * 1e6


def allocation(op: Callable[[], tuple[Any, FrameBuffer]]) -> tuple[int, int]:
    """(tracemalloc peak above the baseline, FrameBuffer capacity after) of one call."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        sink, frames = op()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    retained = frames.capacity
    del sink
    return peak, retained


def measure(stream: Stream, mode: str, op: Callable[[], tuple[Any, FrameBuffer]],
            min_time: float, reader: str) -> dict[str, Any]:
    micros = time_per_op(op, min_time)
    peak, retained = allocation(op)
    result = {"stream": stream.name, "description": stream.description, "mode": mode,
              "reader": reader,
              "bytes": len(stream.data), "time_us": round(micros, 2),
              "mib_per_s": round(len(stream.data) / micros / 1.048576, 1),
              "peak_alloc_bytes": peak, "retained_buffer_bytes": retained}
    if stream.payload:
        # Whole payloads alive at the peak; the rest of the peak is buffers smaller than one.
        result["peak_over_payload"] = round(peak / stream.payload, 2)
        result["payload_copies"] = int(peak / stream.payload + 0.01)
    return result


def run_micro(quick: bool = False, progress: Callable[[float, str], None] | None = None
              ) -> list[dict[str, Any]]:
    """Run every stream in every mode; one result dict per (stream, mode).

    ``progress(fraction_done, label)`` is called before each case.
    """
    registry = default_registry.copy()
    min_time = 0.05 if quick else 0.3
    results: list[dict[str, Any]] = []
    streams = build_streams(quick)
    total = sum(len(stream.modes) for stream in streams)
    with tempfile.TemporaryDirectory(prefix="pgmux-micro-") as directory:
        links = _Links(directory, registry)
        try:
            for stream in streams:
                for mode in stream.modes:
                    if progress is not None:
                        progress(len(results) / total, f"{stream.name} {mode}")
                    op, reader = links.operation(stream, mode)
                    results.append(measure(stream, mode, op, min_time, reader))
        finally:
            links.close()
    return results


class _Links:
    """The socket pairs (plain, TLS; driver, frame loop), made on first use and reused."""

    def __init__(self, directory: str, registry: TypeRegistry):
        self.directory = directory
        self.registry = registry
        self.cert_files: tuple[str, str] | None = None
        self.links: dict[tuple[str, bool], Any] = {}

    def operation(self, stream: Stream, mode: str) -> tuple[Callable[[], Any], str]:
        """The callable consuming ``stream`` once in ``mode``, and what reads it."""
        if not mode.startswith("socketpair"):
            return (_bind(feed_all, chunks_of(stream.data, mode), self.registry,
                          not stream.pipeline), "FrameBuffer")
        tls = mode.endswith("tls")
        if tls and self.cert_files is None:
            self.cert_files = _write_cert(self.directory)
        link = self.links.get((mode, stream.pipeline))
        if link is None:
            link = (DriverLink(tls, self.cert_files, self.registry) if stream.pipeline
                    else SocketLink(tls, self.cert_files))
            self.links[(mode, stream.pipeline)] = link
        if stream.pipeline:
            return _bind(link.roundtrip, stream.data), "PipelineDriver"
        return _bind(link.roundtrip, stream.data, self.registry), "recv loop"

    def close(self) -> None:
        for link in self.links.values():
            link.close()


def _bind(function: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    return lambda: function(*args)
