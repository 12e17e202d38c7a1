"""Authentication against real servers: every method over TCP, TLS and the Unix socket,
require_auth and channel binding refusing before a secret leaves, client certificates,
and protocol 3.0 by default with 3.2 opt-in (PostgreSQL 18), negotiated down to 3.0 by
PostgreSQL 15."""

from __future__ import annotations

import struct

import gevent
import gevent.event
import pytest
from gevent import socket
from gevent.server import StreamServer
from support.connect import PATIENCE, isolate_environment, opening, tls
from support.server import ROLES, PgServer, hba_lines

from pgmux.errors import OperationalError
from pgmux.io.connect import ServerConnection, connect
from pgmux.io.conninfo import make_conninfo
from pgmux.protocol import backend, frontend
from pgmux.protocol.framing import FrameBuffer
from pgmux.tooling.embedded import EmbeddedPostgres, find_postgres_bin

# pg_hba method of each test role -> what StartupHandshake.auth_method reports for it.
METHOD_OF_ROLE = {
    "trust_user": "trust",
    "password_user": "password",
    "md5_user": "md5",
    "scram_user": "scram-sha-256",
}
# ... and the require_auth value that admits only that method.
REQUIRE_AUTH_FOR = {
    "trust": "none",
    "password": "password",
    "md5": "md5",
    "scram-sha-256": "scram-sha-256",
}
PASSWORD_ROLES = ("password_user", "md5_user", "scram_user")
WRONG_PASSWORD = "Wrong-Pa55word-7c1e"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    """No PG* variables, no ~/.postgresql or ~/.pgpass, no default socket directory."""
    isolate_environment(monkeypatch, tmp_path, home=tmp_path)


@pytest.fixture
def opened():
    """open(server, role, **params) -> ServerConnection, closed after the test."""
    with opening() as open_connection:
        yield open_connection


# -- a recording proxy ---------------------------------------------------------------------------


class RecordingProxy:
    """A loopback TCP forwarder to a server that records what each client sends.

    ``sent[i]`` holds the client->server bytes of the i-th connection; ``wait_idle()``
    returns once every connection has been closed by both sides, so the record is complete.
    """

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.sent: list[bytearray] = []
        self._open = 0
        self._idle = gevent.event.Event()
        self._idle.set()
        self._server = StreamServer(("127.0.0.1", 0), self._handle)
        self._server.start()
        self.port = self._server.server_port

    def _handle(self, client: socket.socket, _address) -> None:
        record = bytearray()
        self.sent.append(record)
        self._open += 1
        self._idle.clear()
        upstream = socket.create_connection(("127.0.0.1", self.target_port))
        try:
            pumps = [gevent.spawn(self._pump, client, upstream, record),
                     gevent.spawn(self._pump, upstream, client, None)]
            gevent.wait(pumps, count=1)  # one side hung up: end both
            gevent.killall(pumps)
        finally:
            client.close()
            upstream.close()
            self._open -= 1
            if not self._open:
                self._idle.set()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, record: bytearray | None) -> None:
        try:
            while chunk := source.recv(65536):
                if record is not None:
                    record += chunk
                sink.sendall(chunk)
        except OSError:
            pass

    def wait_idle(self) -> None:
        assert self._idle.wait(PATIENCE), "the proxied connection did not end"

    def close(self) -> None:
        self._server.stop()


@pytest.fixture
def proxy(pg):
    server = pg.embedded_server
    recorder = RecordingProxy(server.port)
    yield recorder
    recorder.close()


def frontend_messages(stream: bytes) -> list[tuple[bytes, bytes]]:
    """Split a client->server byte stream (no TLS) into (type, body) after the startup packet."""
    length, code = struct.unpack_from("!ii", stream)
    assert code >> 16 == 3, f"the first packet is not a StartupMessage (code {code})"
    messages, pos = [], length
    while pos < len(stream):
        kind = stream[pos : pos + 1]
        (size,) = struct.unpack_from("!i", stream, pos + 1)
        messages.append((kind, bytes(stream[pos + 5 : pos + 1 + size])))
        pos += 1 + size
    assert pos == len(stream), "the client sent a truncated message"
    return messages


def via_proxy(pg: PgServer, proxy: RecordingProxy, role: str, **params) -> dict:
    """Plain-TCP connection keywords for `role` through the proxy."""
    return pg.params_for(role, port=proxy.port, sslmode="disable", **params)


def assert_nothing_secret_sent(proxy: RecordingProxy, password: str) -> list[bytes]:
    """No PasswordMessage/SASL message ('p') and no password bytes went to the server."""
    proxy.wait_idle()
    assert len(proxy.sent) == 1
    stream = bytes(proxy.sent[0])
    kinds = [kind for kind, _ in frontend_messages(stream)]
    assert b"p" not in kinds
    assert password.encode() not in stream
    return kinds


# -- every method, every transport -----------------------------------------------------------


@pytest.mark.parametrize("role", list(METHOD_OF_ROLE))
def test_every_method_over_tls(pg, opened, role):
    method = METHOD_OF_ROLE[role]
    conn = opened(pg, role, require_auth=REQUIRE_AUTH_FOR[method], channel_binding="disable",
                  **tls(pg))
    assert conn.auth_method == method
    assert conn.transport.is_tls and conn.transport.tls_version in ("TLSv1.2", "TLSv1.3")
    assert conn.parameters["session_authorization"] == role
    assert conn.transaction_status == "I"


@pytest.mark.parametrize("role", list(METHOD_OF_ROLE))
def test_every_method_over_plain_tcp(pg, opened, role):
    """Cleartext and MD5 go over plain TCP only with allow_cleartext_password=True."""
    method = METHOD_OF_ROLE[role]
    conn = opened(pg, role, require_auth=REQUIRE_AUTH_FOR[method], sslmode="disable",
                  allow_cleartext_password=True)
    assert conn.auth_method == method
    assert not conn.transport.is_tls and not conn.transport.is_unix
    assert conn.parameters["session_authorization"] == role


@pytest.fixture(scope="module")
def socket_auth_server():
    """PostgreSQL 15 whose Unix socket asks each role for its own method (pg's says trust)."""
    bin_dir, _ = find_postgres_bin()
    roles = tuple(role for role in ROLES if role.transport == "any")
    local = [f"local all {role.name} {role.method}" for role in roles]
    tcp = [line for line in hba_lines(roles) if not line.startswith("local")]
    embedded = EmbeddedPostgres(bin_dir=bin_dir, hba=[*local, *tcp]).start()
    server = PgServer.with_roles(embedded, roles)
    yield server
    server.stop()


@pytest.mark.parametrize("role", list(METHOD_OF_ROLE))
def test_every_method_over_the_unix_socket(socket_auth_server, opened, role):
    """A Unix socket counts as secure: cleartext and MD5 need no opt-in there."""
    server = socket_auth_server
    method = METHOD_OF_ROLE[role]
    conn = opened(server, role, host=server.embedded_server.host,
                  require_auth=REQUIRE_AUTH_FOR[method])
    assert conn.transport.is_unix and not conn.transport.is_tls
    assert conn.auth_method == method
    assert conn.parameters["session_authorization"] == role


@pytest.mark.parametrize("role", PASSWORD_ROLES)
def test_wrong_password_over_the_unix_socket(socket_auth_server, role):
    server = socket_auth_server
    info = make_conninfo(**server.params_for(role, password=WRONG_PASSWORD,
                                             host=server.embedded_server.host))
    with pytest.raises(OperationalError) as caught:
        connect(info, timeout=PATIENCE)
    assert getattr(caught.value, "sqlstate", None) == "28P01"


def test_hostnossl_role_over_plain_tcp_only(pg, opened):
    conn = opened(pg, "nossl_user", sslmode="disable")
    assert conn.auth_method == "scram-sha-256" and not conn.transport.is_tls
    with pytest.raises(OperationalError, match="pg_hba.conf rejects") as caught:
        opened(pg, "nossl_user", **tls(pg))
    assert getattr(caught.value, "sqlstate", None) == "28000"


# -- wrong passwords --------------------------------------------------------------------------


@pytest.mark.parametrize("role", PASSWORD_ROLES)
@pytest.mark.parametrize("transport", ["tls", "plain"])
def test_wrong_password(pg, role, transport):
    """OperationalError carrying SQLSTATE 28P01; the password appears nowhere in it."""
    extra = tls(pg) if transport == "tls" else {"sslmode": "disable",
                                                 "allow_cleartext_password": True}
    info = make_conninfo(**pg.params_for(role, password=WRONG_PASSWORD, **extra))
    with pytest.raises(OperationalError) as caught:
        connect(info, timeout=PATIENCE)
    error = caught.value
    assert "password authentication failed" in str(error)
    assert getattr(error, "sqlstate", None) == "28P01"
    shown = [str(error), repr(error), *map(repr, error.args)]
    assert not [text for text in shown if WRONG_PASSWORD in text]


def test_missing_password_is_refused_by_the_client(pg):
    info = make_conninfo(**pg.params_for("scram_user", password=None, **tls(pg)))
    with pytest.raises(OperationalError, match="no password was supplied"):
        connect(info, timeout=PATIENCE)


# -- SCRAM-SHA-256-PLUS and channel binding -----------------------------------------------------


@pytest.mark.parametrize("sslmode", ["require", "verify-ca", "verify-full"])
def test_scram_plus_with_channel_binding_required(pg, opened, sslmode):
    conn = opened(pg, "scram_user", channel_binding="require", **pg.tls_params(sslmode))
    assert conn.auth_method == "scram-sha-256-plus"
    assert conn.transport.is_tls and conn.transport.server_certificate


@pytest.mark.parametrize(("channel_binding", "method"),
                         [("prefer", "scram-sha-256-plus"), ("disable", "scram-sha-256")])
def test_channel_binding_prefer_and_disable_over_tls(pg, opened, channel_binding, method):
    conn = opened(pg, "scram_user", channel_binding=channel_binding, **tls(pg))
    assert conn.auth_method == method


def test_channel_binding_require_fails_over_plain_tcp(pg, proxy):
    info = make_conninfo(**via_proxy(pg, proxy, "scram_user", channel_binding="require"))
    with pytest.raises(OperationalError, match="does not use TLS") as caught:
        connect(info, timeout=PATIENCE)
    assert getattr(caught.value, "sqlstate", None) is None  # refused by us, not the server
    assert assert_nothing_secret_sent(proxy, pg.role("scram_user").password) == []


@pytest.mark.parametrize("role", ["password_user", "md5_user"])
def test_channel_binding_require_refuses_password_methods_over_tls(pg, role):
    info = make_conninfo(**pg.params_for(role, channel_binding="require", **tls(pg)))
    with pytest.raises(OperationalError, match="channel binding required"):
        connect(info, timeout=PATIENCE)


@pytest.mark.parametrize("role", ["password_user", "md5_user"])
def test_channel_binding_require_refuses_password_methods_before_sending(pg, proxy, role):
    info = make_conninfo(**via_proxy(pg, proxy, role, channel_binding="require",
                                     allow_cleartext_password=True))
    with pytest.raises(OperationalError, match="channel binding required"):
        connect(info, timeout=PATIENCE)
    assert assert_nothing_secret_sent(proxy, pg.role(role).password) == []


@pytest.mark.parametrize("extra", [{"sslmode": "disable"}, {"sslmode": "verify-full"}],
                         ids=["plain", "tls"])
def test_channel_binding_require_refuses_trust(pg, extra):
    if extra["sslmode"] == "verify-full":
        extra = tls(pg)
    info = make_conninfo(**pg.params_for("trust_user", channel_binding="require", **extra))
    with pytest.raises(OperationalError, match="channel binding required"):
        connect(info, timeout=PATIENCE)


# -- require_auth: no downgrade, refused before the password leaves ---------------------------


def test_recording_proxy_sees_a_password_that_is_sent(pg, proxy, opened):
    """The control for the tests below: when allowed, the proxy does record the password."""
    conn = opened(pg, "password_user", port=proxy.port, sslmode="disable",
                  require_auth="password", allow_cleartext_password=True)
    assert conn.auth_method == "password"
    conn.close()
    proxy.wait_idle()
    messages = frontend_messages(bytes(proxy.sent[0]))
    assert (b"p", pg.role("password_user").password.encode() + b"\x00") in messages


DOWNGRADES = [
    ("password_user", "scram-sha-256"),
    ("password_user", "!password"),
    ("password_user", "md5,scram-sha-256"),
    ("md5_user", "scram-sha-256"),
    ("md5_user", "!md5,!password"),
    ("md5_user", "password"),
    ("scram_user", "password,md5"),
    ("scram_user", "!scram-sha-256"),
]


@pytest.mark.parametrize(("role", "require_auth"), DOWNGRADES)
def test_require_auth_refuses_a_downgrade_before_sending_anything(pg, proxy, role, require_auth):
    info = make_conninfo(**via_proxy(pg, proxy, role, require_auth=require_auth,
                                     allow_cleartext_password=True))
    with pytest.raises(OperationalError, match="authentication method requirement") as caught:
        connect(info, timeout=PATIENCE)
    assert require_auth in str(caught.value)
    assert assert_nothing_secret_sent(proxy, pg.role(role).password) == []


@pytest.mark.parametrize("require_auth", ["password", "md5", "scram-sha-256"])
def test_require_auth_refuses_a_server_that_asks_for_nothing(pg, proxy, require_auth):
    """trust_user is let in without authentication: a client that demands one refuses."""
    info = make_conninfo(**via_proxy(pg, proxy, "trust_user", password="would-be-sent",
                                     require_auth=require_auth))
    with pytest.raises(OperationalError, match="did not complete authentication"):
        connect(info, timeout=PATIENCE)
    assert assert_nothing_secret_sent(proxy, "would-be-sent") == []


@pytest.mark.parametrize("role", ["password_user", "md5_user"])
def test_no_password_over_plain_tcp_without_opt_in(pg, proxy, role):
    info = make_conninfo(**via_proxy(pg, proxy, role))
    with pytest.raises(OperationalError, match="neither TLS nor a Unix socket"):
        connect(info, timeout=PATIENCE)
    assert assert_nothing_secret_sent(proxy, pg.role(role).password) == []


def test_cleartext_refusal_names_the_connection_option_to_set(pg):
    """The refusal must point at the conninfo keyword a user can actually set."""
    info = make_conninfo(**pg.params_for("password_user", sslmode="disable"))
    with pytest.raises(OperationalError) as caught:
        connect(info, timeout=PATIENCE)
    assert "allow_cleartext_password" in str(caught.value)


# -- client certificates -------------------------------------------------------------------------


def test_cert_auth_with_client_certificate(pg, opened):
    conn = opened(pg, "cert_user", **tls(pg))
    assert conn.transport.is_tls
    assert conn.auth_method == "trust"  # cert auth asks the client for nothing more
    assert conn.parameters["session_authorization"] == "cert_user"


def test_cert_auth_refused_without_a_client_certificate(pg):
    info = make_conninfo(**pg.params_for("cert_user", sslcertmode="disable", **tls(pg)))
    with pytest.raises(OperationalError, match="requires a valid client certificate") as caught:
        connect(info, timeout=PATIENCE)
    assert getattr(caught.value, "sqlstate", None) == "28000"


def test_cert_auth_refused_with_a_certificate_from_another_ca(pg):
    """The server's TLS layer rejects it (an alert, or the connection closed in TLS 1.3)."""
    wrong = pg.tls_files["client-cert_user-wrongca.crt"]
    info = make_conninfo(**pg.params_for("cert_user", sslcert=wrong, **tls(pg)))
    with pytest.raises(OperationalError):
        connect(info, timeout=PATIENCE)


# -- protocol versions ---------------------------------------------------------------------------


def first_error(conn: ServerConnection) -> dict[str, str]:
    """Read the connection until an ErrorResponse; return its fields."""
    frames: FrameBuffer = conn.frames
    while True:
        message = frames.next_message()
        if message is None:
            frames.feed(conn.transport.recv(65536))
        elif message[0] == backend.ERROR_RESPONSE:
            return backend.parse_fields(message[1])


def cancel_a_sleep(conn: ServerConnection) -> dict[str, str]:
    """Run pg_sleep and cancel it with the connection's key; return the ErrorResponse fields.

    A cancel that reaches the backend before it starts the query is ignored by the server,
    so the request is repeated until the query fails.
    """
    conn.transport.sendall(frontend.query("SELECT pg_sleep(30)"))
    with gevent.Timeout(PATIENCE):
        while True:
            conn.send_cancel()
            with gevent.Timeout(0.5, False):
                return first_error(conn)


def test_protocol_3_2_on_postgresql_18_when_asked(pg18, opened):
    conn = opened(pg18, "scram_user", max_protocol_version="3.2")
    assert conn.protocol == "3.2"
    assert len(conn.cancel_key) > 4  # PostgreSQL 18 sends 32 bytes
    assert cancel_a_sleep(conn)["C"] == "57014"  # the long key cancels


def test_fallback_to_3_0_on_postgresql_15(pg, opened):
    conn = opened(pg, "scram_user", max_protocol_version="3.2", **tls(pg))
    assert conn.protocol == "3.0"  # after NegotiateProtocolVersion
    assert len(conn.cancel_key) == 4
    assert cancel_a_sleep(conn)["C"] == "57014"


def test_protocol_3_0_by_default_on_postgresql_18(pg18, opened):
    conn = opened(pg18, "scram_user")
    assert conn.protocol == "3.0"
    assert len(conn.cancel_key) == 4
    assert cancel_a_sleep(conn)["C"] == "57014"


def test_min_protocol_version_3_2_refuses_postgresql_15_before_the_password(pg, proxy):
    if pg.version >= 18:
        pytest.skip("needs a server older than PostgreSQL 18, which speaks protocol 3.2")
    info = make_conninfo(**via_proxy(pg, proxy, "scram_user", min_protocol_version="3.2"))
    with pytest.raises(OperationalError, match="protocol"):
        connect(info, timeout=PATIENCE)
    assert assert_nothing_secret_sent(proxy, pg.role("scram_user").password) == []


def test_session_parameters_reported_at_startup(pg18, opened):
    conn = opened(pg18, "trust_user", application_name="auth-test")
    assert conn.parameters["application_name"] == "auth-test"
    assert conn.parameters["client_encoding"] == "UTF8"
    assert conn.server_version.startswith("18")
    assert conn.pid > 0 and conn.transaction_status == "I"
