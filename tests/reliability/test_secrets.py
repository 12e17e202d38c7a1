"""Secrets stay secret: no password or sslpassword in any repr, exception, log line, stderr
or stats output, across failing and succeeding connections; and a SCRAM iteration count
over the cap is refused before any costly key derivation."""

from __future__ import annotations

import base64
import logging
import os
import struct
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import gevent
import pytest
from cryptography.hazmat.primitives import serialization
from gevent import socket
from gevent.server import StreamServer
from support.connect import isolate_environment, tls
from support.mux import drivers, wait_until
from support.server import PgServer, Role, hba_lines, tls_server_bin

from pgmux.client import Client
from pgmux.errors import Error, OperationalError
from pgmux.io.connect import connect
from pgmux.io.conninfo import make_conninfo
from pgmux.protocol import backend, frontend
from pgmux.protocol.startup import StartupHandshake
from pgmux.tooling.embedded import EmbeddedPostgres

PATIENCE = 10.0
SECRET = "Zq7-S3cr3t-pa55w0rd-é-4f1c"  # the role's real password
WRONG_SECRET = "Xk9-Wr0ng-pa55w0rd-ü-77e2"  # a wrong one, as distinctive
SSL_SECRET = "Pk3-Key-pa55phrase-b9d0"  # passphrase of the encrypted client key
WRONG_SSL_SECRET = "Wk5-Bad-pa55phrase-c1a8"
SECRETS = (SECRET, WRONG_SECRET, SSL_SECRET, WRONG_SSL_SECRET)

ROLES = (
    Role("postgres", "trust"),
    Role("s_password", "password", SECRET),
    Role("s_md5", "md5", SECRET, stored_as="md5"),
    Role("s_scram", "scram-sha-256", SECRET),
    Role("s_rotate", "scram-sha-256", SECRET),
    Role("cert_user", "cert", transport="tls"),
)


# -- scanning ---------------------------------------------------------------------------------


def leaks(texts: list[str]) -> list[str]:
    """The texts that contain a secret in any common spelling (plain, bytes repr, URL)."""
    spellings = set()
    for secret in SECRETS:
        spellings |= {secret, repr(secret.encode())[2:-1], secret.encode("unicode_escape")
                      .decode(), secret.replace("é", "%C3%A9").replace("ü", "%C3%BC")}
        spellings |= {secret.split("-")[1] + "-" + secret.split("-")[2]}  # a distinctive core
    return [text for text in texts if any(spelling in text for spelling in spellings)]


def exception_texts(error: BaseException) -> list[str]:
    """str, repr, args, attributes and the formatted traceback of an exception and its chain."""
    texts, seen = [], set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        texts += [str(current), repr(current), *map(repr, current.args),
                  repr(vars(current)), *getattr(current, "__notes__", [])]
        pending += [current.__cause__, current.__context__]
    texts.append("".join(traceback.format_exception(error)))
    return texts


class Surfaces:
    """Everything a secret could leak to during a test: exceptions, reprs, logs, stderr."""

    def __init__(self, caplog, capfd):
        self.caplog = caplog
        self.capfd = capfd
        self.texts: list[str] = []
        caplog.set_level(logging.DEBUG, logger="pgmux")

    def error(self, call: Callable[[], Any], kind: type[BaseException] = Error) -> BaseException:
        """Run ``call``, which must raise ``kind``; keep every text of the exception."""
        with pytest.raises(kind) as caught:
            call()
        self.texts += exception_texts(caught.value)
        return caught.value

    def add(self, *objects: Any) -> None:
        self.texts += [repr(obj) for obj in objects] + [str(obj) for obj in objects]

    def assert_clean(self) -> None:
        out, err = self.capfd.readouterr()
        records = self.caplog.records
        logged = [self.caplog.text, out, err]
        logged += [record.getMessage() for record in records]
        logged += [record.exc_text or "" for record in records]
        found = leaks(self.texts + logged)
        assert not found, f"secret found in: {found[0][:500]!r}"
        assert self.texts, "nothing was scanned"


@pytest.fixture
def surfaces(caplog, capfd):
    scan = Surfaces(caplog, capfd)
    yield scan
    scan.assert_clean()


def test_the_scanner_finds_a_secret(caplog, capfd):
    """The control: each surface is really scanned."""
    for sample in ([f"x {SECRET} y"], [repr(WRONG_SECRET.encode())],
                   [f"postgresql://u:{SECRET.replace('é', '%C3%A9')}@h/d"]):
        assert leaks(sample) == sample
    scan = Surfaces(caplog, capfd)
    logging.getLogger("pgmux").debug("oops %s", SSL_SECRET)
    with pytest.raises(AssertionError, match="secret found"):
        scan.add("clean")
        scan.assert_clean()


# -- a private server whose roles have the distinctive password --------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    bin_dir = tls_server_bin()
    embedded = EmbeddedPostgres(bin_dir=bin_dir, tls=True, hba=hba_lines(ROLES)).start()
    server = PgServer.with_roles(embedded, ROLES)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def encrypted_key(server, tmp_path_factory) -> str:
    """The cert_user client key, encrypted with SSL_SECRET."""
    with open(server.tls_files["client-cert_user.key"], "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.BestAvailableEncryption(SSL_SECRET.encode()))
    path = tmp_path_factory.mktemp("key") / "client.key"
    path.write_bytes(data)
    path.chmod(0o600)
    return str(path)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    isolate_environment(monkeypatch, tmp_path, home=tmp_path)


# -- the password, given every way -------------------------------------------------------------


def client_for(server: PgServer, role: str, password: str, source: str, monkeypatch,
               tmp_path) -> Client:
    """A Client for ``role`` that gets ``password`` from ``source``."""
    port = server.embedded_server.port
    ca = server.tls_files["ca.crt"]
    if source == "keyword":
        return Client(server.dsn_for(role, password=None, **tls(server)), password=password,
                      pipeline_size=1, pinned_size=1)
    if source == "url":
        return Client(server.dsn_for(role, password=password, **tls(server)),
                      pipeline_size=1, pinned_size=1)
    if source == "key=value":
        escaped = password.replace("\\", "\\\\").replace("'", "\\'")
        dsn = (f"host=127.0.0.1 port={port} user={role} dbname=pgmux_test "
               f"password='{escaped}' sslmode=verify-full sslrootcert={ca}")
        return Client(dsn, pipeline_size=1, pinned_size=1)
    if source == "PGPASSWORD":
        monkeypatch.setenv("PGPASSWORD", password)
    else:  # passfile
        path = tmp_path / "pgpass"
        path.write_text(f"127.0.0.1:{port}:pgmux_test:{role}:{password}\n")
        path.chmod(0o600)
        monkeypatch.setenv("PGPASSFILE", str(path))
    return Client(server.dsn_for(role, password=None, **tls(server)),
                  pipeline_size=1, pinned_size=1)


def session_query(db: Client) -> Any:
    with db.session() as session:
        return session.fetchval("SELECT 1")


SOURCES = ["keyword", "url", "key=value", "PGPASSWORD", "passfile"]


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("role", ["s_password", "s_md5", "s_scram"])
def test_wrong_password_leaks_nowhere(server, surfaces, monkeypatch, tmp_path, role, source):
    db = client_for(server, role, WRONG_SECRET, source, monkeypatch, tmp_path)
    try:
        error = surfaces.error(lambda: db.fetchval("SELECT 1"), OperationalError)
        assert "password authentication failed" in str(error)
        surfaces.error(lambda: db.fetchval("SELECT 1"), OperationalError)  # and again
        surfaces.error(lambda: session_query(db), OperationalError)  # the pinned path
        surfaces.add(db, db.conninfo, db.stats(), db.conninfo.endpoints())
    finally:
        db.close()
    surfaces.add(db, db.stats())


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("role", ["s_password", "s_md5", "s_scram"])
def test_working_password_leaks_nowhere(server, surfaces, monkeypatch, tmp_path, role, source):
    db = client_for(server, role, SECRET, source, monkeypatch, tmp_path)
    try:
        assert db.fetchval("SELECT current_user") == role
        with db.session() as session:
            assert session.fetchval("SELECT current_user") == role
            surfaces.add(session)
        surfaces.add(db, db.conninfo, db.stats(), db.conninfo.endpoints())
        for driver in drivers(db):
            conn = driver.conn
            surfaces.add(driver, conn, conn.transport, conn.endpoint, vars(conn))
    finally:
        db.close()
    surfaces.add(db, db.stats())


def test_reconnect_after_a_password_change_leaks_nowhere(server, surfaces):
    """The backend is terminated and the password rotated: the reconnects fail and log."""
    db = Client(server.dsn_for("s_rotate", **tls(server)), pipeline_size=1, pinned_size=1)
    try:
        assert db.fetchval("SELECT 1") == 1
        server.admin("ALTER ROLE s_rotate PASSWORD 'rotated-away';"
                     "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE usename = 's_rotate'")
        wait_until(lambda: any("password authentication failed" in record.getMessage()
                               for record in surfaces.caplog.records),
                   what="a logged reconnect failure")
        for _ in range(3):
            try:
                db.fetchval("SELECT 1")
            except Error as exc:
                surfaces.texts += exception_texts(exc)
        surfaces.add(db, db.stats())
    finally:
        db.close()
        server.admin(f"ALTER ROLE s_rotate PASSWORD '{SECRET}'")


@pytest.mark.parametrize("role", ["s_password", "s_md5", "s_scram"])
def test_server_connection_level(server, surfaces, role):
    """connect() directly: the failure's chain, and a success's connection objects."""
    bad = make_conninfo(**server.params_for(role, password=WRONG_SECRET, **tls(server)))
    surfaces.error(lambda: connect(bad, timeout=PATIENCE), OperationalError)
    surfaces.add(bad, bad.endpoints(), bad.describe())
    good = make_conninfo(**server.params_for(role, password=SECRET, **tls(server)))
    conn = connect(good, timeout=PATIENCE)
    try:
        surfaces.add(good, conn, conn.transport, conn.endpoint, vars(conn), conn.parameters)
    finally:
        conn.close()
    surfaces.add(conn)


@pytest.mark.parametrize("role", ["s_password", "s_md5"])
def test_refusals_before_sending_leak_nowhere(server, surfaces, role):
    """Client-side refusals (cleartext guard, require_auth, channel binding)."""
    for params in ({"sslmode": "disable"},
                   {"require_auth": "scram-sha-256", **tls(server)},
                   {"channel_binding": "require", **tls(server)}):
        info = make_conninfo(**server.params_for(role, password=SECRET, **params))
        surfaces.error(lambda info=info: connect(info, timeout=PATIENCE), OperationalError)


def test_startup_handshake_repr_and_vars(surfaces):
    """The sans-IO machine, before and after it has used the password."""
    machine = StartupHandshake(user="s_md5", database="db", password=SECRET,
                               secure_transport=True)
    surfaces.add(machine, vars(machine))
    machine.start()
    salt = b"\x01\x02\x03\x04"
    reply = machine.handle(backend.AUTHENTICATION, struct.pack("!i", 5) + salt)
    assert reply[:1] == b"p"
    surfaces.add(machine, vars(machine))
    scram = StartupHandshake(user="s_scram", database="db", password=SECRET)
    scram.start()
    scram.handle(backend.AUTHENTICATION, struct.pack("!i", 10) + b"SCRAM-SHA-256\x00\x00")
    surfaces.add(scram, vars(scram))


@pytest.mark.parametrize("dsn", [
    f"password={SECRET} bogus_option=1",
    f"password='{SECRET}",
    f"password={SECRET} port=99999999",
    f"password={SECRET} connect_timeout=soon",
    f"postgresql://user:{SECRET}@localhost:notaport/db",
    f"postgresql://user:{SECRET}@localhost/db?bogus={SECRET}",
    f"postgresql://user:{SECRET}%zz@localhost/db",
    f"password={SECRET} sslmode=sometimes",
])
def test_malformed_connection_strings_leak_nowhere(surfaces, dsn):
    surfaces.error(lambda: make_conninfo(dsn))


def test_connection_refused_leaks_nowhere(surfaces):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    info = make_conninfo(host="127.0.0.1", port=port, user="u", password=SECRET,
                         sslpassword=SSL_SECRET)
    surfaces.error(lambda: connect(info, timeout=PATIENCE), OperationalError)
    surfaces.add(info)


# -- sslpassword ----------------------------------------------------------------------------------


def cert_params(server: PgServer, key: str, sslpassword: str) -> dict:
    return server.params_for("cert_user", sslkey=key, sslpassword=sslpassword, **tls(server))


def test_encrypted_client_key_with_the_right_sslpassword(server, surfaces, encrypted_key):
    info = make_conninfo(**cert_params(server, encrypted_key, SSL_SECRET))
    conn = connect(info, timeout=PATIENCE)
    try:
        assert conn.transport.is_tls
        assert conn.parameters["session_authorization"] == "cert_user"
        surfaces.add(info, conn, conn.transport, vars(conn))
    finally:
        conn.close()
    db = Client(**cert_params(server, encrypted_key, SSL_SECRET), pipeline_size=1,
                pinned_size=1)
    try:
        assert db.fetchval("SELECT current_user") == "cert_user"
        surfaces.add(db, db.conninfo, db.stats())
    finally:
        db.close()


def test_wrong_sslpassword_leaks_nowhere(server, surfaces, encrypted_key):
    info = make_conninfo(**cert_params(server, encrypted_key, WRONG_SSL_SECRET))
    error = surfaces.error(lambda: connect(info, timeout=PATIENCE), OperationalError)
    assert "client certificate" in str(error)
    db = Client(**cert_params(server, encrypted_key, WRONG_SSL_SECRET), pipeline_size=1,
                pinned_size=1)
    try:
        surfaces.error(lambda: db.fetchval("SELECT 1"), OperationalError)
        surfaces.add(db, db.conninfo, db.stats())
    finally:
        db.close()


# -- SCRAM iteration cap against a scripted server --------------------------------------------------


class ScramServer:
    """Asks for SCRAM-SHA-256, answers the client-first with ``iterations``, then records
    the client's next message (b"" if it hangs up instead) and hangs up itself."""

    def __init__(self, iterations: int):
        self.iterations = iterations
        self.after_first: list[bytes] = []
        self._server = StreamServer(("127.0.0.1", 0), self._handle)
        self._server.start()
        self.port = self._server.server_port

    def _handle(self, conn: socket.socket, _address) -> None:
        try:
            with gevent.Timeout(PATIENCE):
                self._script(conn)
        finally:
            conn.close()

    def _script(self, conn: socket.socket) -> None:
        length = struct.unpack("!i", recv_exactly(conn, 4))[0]
        recv_exactly(conn, length - 4)  # the StartupMessage
        conn.sendall(frontend.message(b"R", struct.pack("!i", 10) + b"SCRAM-SHA-256\x00\x00"))
        kind, body = read_message(conn)
        assert kind == b"p"
        client_first = body[body.index(b"\x00") + 5 :].decode()  # mechanism, length, data
        nonce = client_first.split("r=", 1)[1]
        salt = base64.b64encode(os.urandom(16)).decode()
        server_first = f"r={nonce}srv,s={salt},i={self.iterations}".encode()
        conn.sendall(frontend.message(b"R", struct.pack("!i", 11) + server_first))
        try:
            kind, body = read_message(conn)  # the client-final-message, if any
        except EOFError:
            self.after_first.append(b"")
        else:
            self.after_first.append(kind + body)

    def close(self) -> None:
        self._server.stop()


def recv_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError("the client hung up")
        data += chunk
    return data


def read_message(conn: socket.socket) -> tuple[bytes, bytes]:
    head = recv_exactly(conn, 5)
    return head[:1], recv_exactly(conn, struct.unpack("!i", head[1:])[0] - 4)


@pytest.fixture
def scram_server() -> Iterator[Callable[[int], ScramServer]]:
    servers: list[ScramServer] = []

    def start(iterations: int) -> ScramServer:
        servers.append(ScramServer(iterations))
        return servers[-1]

    yield start
    for fake in servers:
        fake.close()


def scram_info(fake: ScramServer):
    return make_conninfo(host="127.0.0.1", port=fake.port, user="u", dbname="d",
                         password=SECRET, sslmode="disable")


def test_scram_iteration_count_over_the_cap_is_refused_quickly(scram_server, surfaces):
    fake = scram_server(10_000_000)  # about 3 s of PBKDF2 here, were it computed
    started = time.monotonic()
    error = surfaces.error(lambda: connect(scram_info(fake), timeout=PATIENCE),
                           OperationalError)
    elapsed = time.monotonic() - started
    assert "iteration count 10000000 exceeds the cap" in str(error)
    assert elapsed < 1.0, f"took {elapsed:.2f}s: the key was derived before the check?"
    wait_until(lambda: fake.after_first, what="the fake server to see the client hang up")
    assert fake.after_first == [b""]  # no client-final-message: it hung up


def test_scram_with_a_normal_iteration_count_proceeds(scram_server):
    """The control: at 4096 iterations the client answers with its proof (a 'p')."""
    fake = scram_server(4096)
    with pytest.raises(OperationalError, match="closed the connection"):
        connect(scram_info(fake), timeout=PATIENCE)
    wait_until(lambda: fake.after_first, what="the fake server to see the client hang up")
    assert fake.after_first[0][:1] == b"p" and b",p=" in fake.after_first[0]
