"""A scripted PostgreSQL server for tests: what a real server cannot be made to do.

It completes a trust startup, then answers the extended protocol on its own terms:
every statement returns one text column per parameter (named ``c1``, ``c2`` ...)
holding the parameter's bytes as sent, or one column ``sql`` holding the SQL text
when there are no parameters. A *rule* replaces the answer of the first unit (the
messages up to a Sync) whose SQL or text parameters contain a marker:

    server = FakeServer().start()
    server.on("boom", lambda unit, answer: answer.replace(b"D", b"!", 1))
    server.on("bad-row", rows=[[b"x", b"y"]])      # a DataRow with two columns
    server.hold(); ...; server.release()           # answer a batch with one write
    server.push(fatal("57P01", "terminating"))      # unsolicited bytes to every client

Startup modes: ``"normal"``, ``"silent"`` (never answers the startup), ``"tls-stall"``
(answers SSLRequest with ``S``, then nothing). Loopback only.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

import gevent
from gevent import socket
from gevent.event import Event
from gevent.server import StreamServer

SSL_REQUEST = 80877103
GSS_REQUEST = 80877104
CANCEL_REQUEST = 80877102
TEXT_OID = 25

_i16 = struct.Struct("!h")
_i32 = struct.Struct("!i")
_u16 = struct.Struct("!H")

STARTUP_PARAMETERS = {
    "server_version": "15.0 (pgmux fake)",
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres",
    "integer_datetimes": "on",
    "standard_conforming_strings": "on",
    "TimeZone": "UTC",
}


# -- backend message builders ------------------------------------------------------------

def message(kind: bytes, payload: bytes = b"") -> bytes:
    """A backend message with a correct length."""
    return kind + _i32.pack(len(payload) + 4) + payload


def raw_header(kind: bytes, length: int) -> bytes:
    """A message header declaring any length (malformed on purpose when asked)."""
    return kind + _i32.pack(length)


def row_description(names: list[str], oid: int = TEXT_OID, fmt: int = 0) -> bytes:
    body = _i16.pack(len(names)) + b"".join(
        name.encode() + b"\0" + struct.pack("!ihihih", 0, 0, oid, -1, -1, fmt) for name in names)
    return message(b"T", body)


def data_row(values: list[bytes | None]) -> bytes:
    parts = [_i16.pack(len(values))]
    for value in values:
        parts.append(_i32.pack(-1) if value is None else _i32.pack(len(value)) + value)
    return message(b"D", b"".join(parts))


def command_complete(tag: str) -> bytes:
    return message(b"C", tag.encode() + b"\0")


def ready(status: bytes = b"I") -> bytes:
    return message(b"Z", status)


def error_fields(severity: str, sqlstate: str, text: str) -> bytes:
    fields = {"S": severity, "V": severity, "C": sqlstate, "M": text}
    return b"".join(k.encode() + v.encode() + b"\0" for k, v in fields.items()) + b"\0"


def error(sqlstate: str, text: str) -> bytes:
    return message(b"E", error_fields("ERROR", sqlstate, text))


def fatal(sqlstate: str = "57P01",
          text: str = "terminating connection due to administrator command") -> bytes:
    return message(b"E", error_fields("FATAL", sqlstate, text))


def notice(text: str) -> bytes:
    return message(b"N", error_fields("NOTICE", "00000", text))


def parameter_status(name: str, value: str) -> bytes:
    return message(b"S", name.encode() + b"\0" + value.encode() + b"\0")


# -- frontend parsing ------------------------------------------------------------------------

def _cstr(data: bytes, pos: int) -> tuple[bytes, int]:
    end = data.index(b"\0", pos)
    return data[pos:end], end + 1


@dataclass
class Statement:
    sql: str
    oids: tuple[int, ...]


@dataclass
class Unit:
    """The frontend messages of one Sync-terminated request, and what they asked for."""

    messages: list[tuple[bytes, bytes]] = field(default_factory=list)
    sql: str = ""
    params: list[bytes | None] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The first text parameter (how tests name their callers), else the SQL."""
        texts = self.texts()
        return texts[1] if len(texts) > 1 else texts[0]

    def texts(self) -> list[str]:
        out = [self.sql]
        for value in self.params:
            if value is not None:
                out.append(value.decode("utf-8", "replace"))
        return out


@dataclass
class Rule:
    marker: str
    reply: Callable[[Unit, bytes], bytes]
    then: str | None  # None, "close", "stall" (stop answering, keep the socket open)
    times: int


class FakeConnection:
    """One client connection of the fake server (a greenlet runs ``serve``)."""

    def __init__(self, server: FakeServer, sock: socket.socket, pid: int):
        self.server, self.sock, self.pid = server, sock, pid
        self.statements: dict[bytes, Statement] = {}
        self.portals: dict[bytes, tuple[Statement, list[bytes | None]]] = {}
        self.startup: dict[str, str] = {}
        self.received: list[Unit] = []  # every unit answered (or held), in order
        self.stalled = False
        self.close_after_answer = False
        self.closed = False
        self._buffer = b""
        self._unit = Unit()

    # -- startup ---------------------------------------------------------------------
    def _read_exact(self, count: int) -> bytes:
        while len(self._buffer) < count:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError
            self._buffer += data
        out, self._buffer = self._buffer[:count], self._buffer[count:]
        return out

    def _startup(self) -> bool:
        while True:
            (length,) = _i32.unpack(self._read_exact(4))
            body = self._read_exact(length - 4)
            (code,) = _i32.unpack_from(body)
            if code == CANCEL_REQUEST:
                self.server.cancel_requests.append(body[4:])
                return False
            if code in (SSL_REQUEST, GSS_REQUEST):
                if self.server.mode == "tls-stall" and code == SSL_REQUEST:
                    self.sock.sendall(b"S")
                    self._stall_forever()
                self.sock.sendall(b"N")
                continue
            if self.server.mode == "silent":
                self._stall_forever()
            pairs = body[4:].split(b"\0")
            self.startup = {pairs[i].decode(): pairs[i + 1].decode()
                            for i in range(0, len(pairs) - 2, 2) if pairs[i]}
            out = [message(b"R", _i32.pack(0))]
            out += [parameter_status(k, v) for k, v in STARTUP_PARAMETERS.items()]
            out += [message(b"K", _i32.pack(self.pid) + b"fake"), ready()]
            self.sock.sendall(b"".join(out))
            return True

    def _stall_forever(self) -> None:
        while self.sock.recv(65536):
            pass
        raise EOFError

    # -- the extended protocol ---------------------------------------------------------
    def serve(self) -> None:
        try:
            if not self._startup():
                return
            self.server.connections.append(self)
            self.server.connected.set()
            while True:
                data = self.sock.recv(256 * 1024)
                if not data:
                    return
                self._buffer += data
                answers = self._take_units()
                if answers is None:
                    return
                if answers or self.close_after_answer:
                    self.server._send(self, answers, close=self.close_after_answer)
                    self.close_after_answer = False
        except (EOFError, OSError):
            pass
        finally:
            self.close()

    def _take_units(self) -> bytes | None:
        """Answers to every complete unit in the buffer (None: the client said Terminate)."""
        out = []
        buffer, pos = self._buffer, 0
        while len(buffer) - pos >= 5:
            kind = buffer[pos : pos + 1]
            (length,) = _i32.unpack_from(buffer, pos + 1)
            end = pos + 1 + length
            if end > len(buffer):
                break
            payload = buffer[pos + 5 : end]
            pos = end
            if kind == b"X":
                return None
            self._unit.messages.append((kind, payload))
            if kind in (b"S", b"Q"):
                out.append(self._answer(self._unit))
                self._unit = Unit()
        self._buffer = buffer[pos:]
        return b"".join(part for part in out if part)

    def _answer(self, unit: Unit) -> bytes:
        self.received.append(unit)
        self.server.units_received += 1
        default = b"".join(self._reply_to(kind, payload, unit) for kind, payload in unit.messages)
        rule = self.server._match(unit)
        if self.stalled:
            return b""
        if rule is None:
            return default
        answer = rule.reply(unit, default)
        if rule.then in ("close", "stall"):
            self.stalled = True  # nothing more is answered on this connection
            self.close_after_answer = rule.then == "close"
        return answer

    def _reply_to(self, kind: bytes, payload: bytes, unit: Unit) -> bytes:
        handler = _HANDLERS.get(kind)
        return handler(self, payload, unit) if handler else b""

    def _parse(self, payload: bytes, unit: Unit) -> bytes:
        name, pos = _cstr(payload, 0)
        sql, pos = _cstr(payload, pos)
        (count,) = _u16.unpack_from(payload, pos)
        oids = struct.unpack_from(f"!{count}I", payload, pos + 2)
        self.statements[name] = Statement(sql.decode(), oids)
        unit.sql = sql.decode()
        return message(b"1")

    def _bind(self, payload: bytes, unit: Unit) -> bytes:
        portal, pos = _cstr(payload, 0)
        name, pos = _cstr(payload, pos)
        (formats,) = _u16.unpack_from(payload, pos)
        pos += 2 + 2 * formats
        (count,) = _u16.unpack_from(payload, pos)
        pos += 2
        params: list[bytes | None] = []
        for _ in range(count):
            (size,) = _i32.unpack_from(payload, pos)
            pos += 4
            if size < 0:
                params.append(None)
            else:
                params.append(payload[pos : pos + size])
                pos += size
        statement = self.statements[name]
        self.portals[portal] = (statement, params)
        unit.sql, unit.params = statement.sql, params
        return message(b"2")

    def _describe(self, payload: bytes, unit: Unit) -> bytes:
        what, name = payload[:1], payload[1:-1]
        if what == b"S":
            statement = self.statements[name]
            oids = [oid or TEXT_OID for oid in statement.oids]
            description = message(b"t", _u16.pack(len(oids)) + b"".join(
                _i32.pack(oid) for oid in oids))
            return description + row_description(_column_names(len(statement.oids)))
        statement, params = self.portals[name]
        return row_description(_column_names(len(params)))

    def _execute(self, payload: bytes, unit: Unit) -> bytes:
        portal, _ = _cstr(payload, 0)
        statement, params = self.portals[portal]
        values = params if params else [statement.sql.encode()]
        return data_row(values) + command_complete("SELECT 1")

    def _simple_query(self, payload: bytes, unit: Unit) -> bytes:
        sql = payload[:-1]
        unit.sql = sql.decode()
        return (row_description(["sql"]) + data_row([sql]) + command_complete("SELECT 1")
                + ready())

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


def _column_names(count: int) -> list[str]:
    return [f"c{i + 1}" for i in range(count)] if count else ["sql"]


_HANDLERS: dict[bytes, Callable[[FakeConnection, bytes, Unit], bytes]] = {
    b"P": FakeConnection._parse,
    b"B": FakeConnection._bind,
    b"D": FakeConnection._describe,
    b"E": FakeConnection._execute,
    b"S": lambda conn, payload, unit: ready(),
    b"C": lambda conn, payload, unit: message(b"3"),
    b"Q": FakeConnection._simple_query,
    b"H": lambda conn, payload, unit: b"",
}


class FakeServer:
    """A loopback PostgreSQL look-alike answering according to ``on(...)`` rules."""

    def __init__(self, mode: str = "normal"):
        self.mode = mode
        self.connections: list[FakeConnection] = []
        self.connected = Event()
        self.cancel_requests: list[bytes] = []
        self.units_received = 0
        self.accepted = 0
        self._rules: list[Rule] = []
        self._pids = itertools.count(1000)
        self._held: list[tuple[FakeConnection, bytes, bool]] | None = None
        self._server = StreamServer(("127.0.0.1", 0), self._handle)

    @property
    def port(self) -> int:
        return self._server.address[1]

    def dsn(self, **params: object) -> str:
        query = "&".join(f"{k}={v}" for k, v in {"sslmode": "disable", **params}.items())
        return f"postgresql://fake@127.0.0.1:{self.port}/fake?{query}"

    def start(self) -> FakeServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(timeout=1)
        for conn in list(self.connections):
            conn.close()

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def live(self) -> list[FakeConnection]:
        return [conn for conn in self.connections if not conn.closed]

    # -- scripting ---------------------------------------------------------------------
    def on(self, marker: str, reply: Callable[[Unit, bytes], bytes] | bytes | None = None, *,
           rows: list[list[bytes | None]] | None = None, then: str | None = None,
           times: int = 1) -> None:
        """Answer the next ``times`` units mentioning ``marker`` with ``reply``:
        raw bytes, ``reply(unit, default_answer) -> bytes``, or the default answer with its
        DataRows replaced by ``rows``. ``then``: "close" or "stall" after answering."""
        if rows is not None:
            reply = _with_rows(rows)
        elif isinstance(reply, bytes):
            raw = reply
            reply = lambda unit, default: raw  # noqa: E731
        elif reply is None:
            reply = lambda unit, default: default  # noqa: E731
        self._rules.append(Rule(marker, reply, then, times))

    def _match(self, unit: Unit) -> Rule | None:
        texts = unit.texts()
        for rule in self._rules:
            if rule.times > 0 and any(rule.marker in text for text in texts):
                rule.times -= 1
                return rule
        return None

    def hold(self) -> None:
        """Keep answers back (per connection, in order) until ``release``."""
        if self._held is None:
            self._held = []

    def release(self) -> None:
        """Send every held answer: one write per connection."""
        held, self._held = self._held or [], None
        by_conn: dict[int, tuple[FakeConnection, list[bytes], list[bool]]] = {}
        for conn, data, close in held:
            entry = by_conn.setdefault(id(conn), (conn, [], []))
            entry[1].append(data)
            entry[2].append(close)
        for conn, parts, closes in by_conn.values():
            self._write(conn, b"".join(parts))
            if any(closes):
                conn.close()

    def push(self, data: bytes, *, close: bool = False) -> None:
        """Send ``data`` to every live client now (e.g. a FATAL), then close if asked."""
        for conn in self.live:
            self._write(conn, data)
            if close:
                conn.close()

    def _send(self, conn: FakeConnection, data: bytes, close: bool = False) -> None:
        if self._held is not None:
            self._held.append((conn, data, close))
            return
        if data:
            self._write(conn, data)
        if close:
            conn.close()

    @staticmethod
    def _write(conn: FakeConnection, data: bytes) -> None:
        try:
            conn.sock.sendall(data)
        except OSError:
            conn.close()

    def _handle(self, sock: socket.socket, _address: object) -> None:
        self.accepted += 1
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        FakeConnection(self, sock, next(self._pids)).serve()


def _with_rows(rows: list[list[bytes | None]]) -> Callable[[Unit, bytes], bytes]:
    """The default answer with its DataRow replaced by ``rows`` (kept well framed)."""

    def reply(unit: Unit, default: bytes) -> bytes:
        head, tail = split_at_data_rows(default)
        return head + b"".join(data_row(row) for row in rows) + tail

    return reply


def split_messages(answer: bytes) -> list[bytes]:
    """The messages of a well-framed byte string, each with its header."""
    parts, pos = [], 0
    while pos < len(answer):
        (length,) = _i32.unpack_from(answer, pos + 1)
        parts.append(answer[pos : pos + 1 + length])
        pos += 1 + length
    return parts


def split_at_data_rows(answer: bytes) -> tuple[bytes, bytes]:
    """(messages before the CommandComplete, minus DataRows; the CommandComplete onwards)."""
    parts = split_messages(answer)
    cut = next((i for i, part in enumerate(parts) if part[:1] == b"C"), len(parts))
    head = b"".join(part for part in parts[:cut] if part[:1] != b"D")
    return head, b"".join(parts[cut:])


def wait_for(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    """Yield to the hub until ``predicate()`` holds (test helper)."""
    with gevent.Timeout(timeout, AssertionError(f"timed out waiting for {predicate}")):
        while not predicate():
            gevent.sleep(0.002)
