"""The transport: TCP/Unix sockets and TLS negotiation against scripted in-process servers."""

from __future__ import annotations

import datetime
import os
import pwd
import ssl
import struct
import time

import gevent
import gevent.event
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from gevent import socket
from gevent import ssl as gevent_ssl
from support.connect import isolate_environment
from support.server import tls_server_bin

from pgmux.errors import InterfaceError, OperationalError, ProtocolError
from pgmux.io import conninfo
from pgmux.io.conninfo import make_conninfo
from pgmux.io.tls import check_host_name, ssl_context_for
from pgmux.io.transport import open_transport
from pgmux.protocol import frontend
from pgmux.tooling import certs

SSL_REQUEST = frontend.ssl_request()
SHORT = 0.2  # seconds: the timeout under test
PATIENCE = 5.0  # seconds: a generous bound for things that must not time out


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    """No PG* variables and a fresh HOME (so no ~/.postgresql files leak in)."""
    return isolate_environment(monkeypatch, tmp_path, home=tmp_path / "home")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return certs.write_tls_bundle(tmp_path_factory.mktemp("pki"), key_type="ec256")


# -- a scripted server ---------------------------------------------------------------------


class FakeServer:
    """Listens on 127.0.0.1 (or a Unix socket); connection i is handled by scripts[i].

    A script gets the accepted gevent socket and returns what the test should check.
    """

    def __init__(self, scripts, unix_path=None):
        family = socket.AF_UNIX if unix_path else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.bind(unix_path or ("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = None if unix_path else self.listener.getsockname()[1]
        self.greenlet = gevent.spawn(self._serve, list(scripts))

    def _serve(self, scripts):
        results = []
        for script in scripts:
            conn, _ = self.listener.accept()
            try:
                results.append(script(conn))
            finally:
                conn.close()
        return results

    def results(self, timeout=PATIENCE):
        return self.greenlet.get(timeout=timeout)

    def close(self):
        self.greenlet.kill()
        self.listener.close()


@pytest.fixture
def serve():
    servers = []

    def start(*scripts, unix_path=None):
        server = FakeServer(scripts, unix_path)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def recv_exactly(conn, size):
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def server_context(pki, cert="server.crt", alpn=True, client_ca=None, seen_names=None):
    context = gevent_ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki[cert], pki["server.key"])
    if alpn:
        context.set_alpn_protocols(["postgresql"])
    if client_ca:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    if seen_names is not None:
        context.sni_callback = lambda sock, name, ctx: seen_names.append(name)
    return context


def plain_echo(conn):
    """Answer N to SSLRequest, then return the next 5 plaintext bytes."""
    assert recv_exactly(conn, 8) == SSL_REQUEST
    conn.sendall(b"N")
    return recv_exactly(conn, 5)


def tls_echo(context, *, request=True):
    """Answer S (unless direct), do the handshake, return (first 5 bytes, ALPN, peer cert)."""

    def script(conn):
        if request:
            assert recv_exactly(conn, 8) == SSL_REQUEST
            conn.sendall(b"S")
        with context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False) as tls:
            tls.do_handshake()
            alpn, peer = tls.selected_alpn_protocol(), tls.getpeercert()
            return recv_exactly(tls, 5), alpn, peer

    return script


def tls_refused(context):
    """Answer S and attempt the handshake, which the client is expected to abort."""

    def script(conn):
        assert recv_exactly(conn, 8) == SSL_REQUEST
        conn.sendall(b"S")
        with context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False) as tls:
            try:
                tls.do_handshake()
            except (ssl.SSLError, OSError) as exc:
                return exc
        return None

    return script


def info_for(**kwargs):
    kwargs.setdefault("host", "localhost")
    return make_conninfo(user="u", dbname="d", **kwargs)


_opened = []


@pytest.fixture(autouse=True)
def close_transports():
    yield
    while _opened:
        _opened.pop().close()


def connect(server, info, host="localhost", **kwargs):
    """open_transport to a FakeServer; the transport is closed after the test."""
    kwargs.setdefault("hostaddr", "127.0.0.1")
    kwargs.setdefault("timeout", PATIENCE)
    transport = open_transport(info, host, server.port, **kwargs)
    _opened.append(transport)
    return transport


# -- SSLRequest answered N ---------------------------------------------------------------------


def test_prefer_continues_in_plaintext_after_n(serve):
    server = serve(plain_echo)
    transport = connect(server, info_for(sslmode="prefer"))
    assert not transport.is_tls and not transport.is_unix
    assert transport.server_certificate is None and transport.tls_version is None
    transport.sendall(b"hello")
    assert server.results() == [b"hello"]
    transport.close()


@pytest.mark.parametrize("mode", ["require", "verify-ca", "verify-full"])
def test_tls_modes_refuse_a_server_without_tls(serve, pki, mode):
    server = serve(plain_echo)
    with pytest.raises(OperationalError, match="does not support SSL, but SSL was required"):
        connect(server, info_for(sslmode=mode, sslrootcert=pki["ca.crt"]))


@pytest.mark.parametrize("mode", ["disable", "allow"])
def test_plaintext_modes_send_no_ssl_request(serve, mode):
    server = serve(lambda conn: recv_exactly(conn, 5))
    transport = connect(server, info_for(sslmode=mode))
    transport.sendall(b"start")
    assert server.results() == [b"start"] and not transport.is_tls


def test_allow_retry_with_force_tls_sends_ssl_request(serve, pki):
    server = serve(tls_echo(server_context(pki)))
    transport = connect(server, info_for(sslmode="allow"), force_tls=True)
    transport.sendall(b"hello")
    assert transport.is_tls and server.results()[0][0] == b"hello"


def test_force_tls_false_for_a_plain_attempt_under_prefer(serve):
    server = serve(lambda conn: recv_exactly(conn, 5))
    connect(server, info_for(sslmode="prefer"), force_tls=False).sendall(b"plain")
    assert server.results() == [b"plain"]


@pytest.mark.parametrize(("mode", "force"), [("disable", True), ("require", False)])
def test_force_tls_may_not_contradict_the_mode(mode, force):
    with pytest.raises(InterfaceError):
        open_transport(info_for(sslmode=mode), "localhost", 1, force_tls=force)


# -- SSLRequest answered S: TLS and verification -----------------------------------------------


@pytest.mark.parametrize("mode", ["require", "verify-ca", "verify-full"])
def test_tls_with_the_right_ca(serve, pki, mode):
    server = serve(tls_echo(server_context(pki)))
    transport = connect(server, info_for(sslmode=mode, sslrootcert=pki["ca.crt"]))
    transport.sendall(b"hello")
    data, alpn, _ = server.results()[0]
    assert data == b"hello" and alpn == "postgresql"
    assert transport.is_tls and transport.tls_version in ("TLSv1.2", "TLSv1.3")
    assert transport.cipher and transport.alpn_protocol == "postgresql"
    with open(pki["server.crt"], "rb") as f:
        expected = x509.load_pem_x509_certificate(f.read()).public_bytes(
            serialization.Encoding.DER
        )
    assert transport.server_certificate == expected
    transport.close()
    transport.close()  # idempotent
    assert transport.closed


def accept(conn, mode, pki):
    """The server's side of the negotiation for ``mode``: the connection to talk on."""
    if mode != "require":
        return conn
    assert recv_exactly(conn, 8) == SSL_REQUEST
    conn.sendall(b"S")
    return server_context(pki).wrap_socket(conn, server_side=True)


@pytest.mark.parametrize("mode", ["disable", "require"])
def test_transport_io(serve, pki, mode):
    def script(conn):
        with accept(conn, mode, pki) as conn:
            conn.sendall(b"world!")
            return recv_exactly(conn, 4)

    server = serve(script)
    transport = connect(server, info_for(sslmode=mode))
    buffer = bytearray(16)
    assert transport.recv_into(buffer, 3) == 3 and buffer[:3] == b"wor"
    assert transport.recv(2) == b"ld"
    assert transport.recv_into(memoryview(buffer)[4:]) == 1 and buffer[4:5] == b"!"
    assert transport.send(b"ab") == 2
    transport.sendall(b"cd")
    assert server.results() == [b"abcd"]
    assert transport.recv(10) == b""  # the server hung up
    assert transport.recv_into(buffer) == 0


@pytest.mark.parametrize("mode", ["disable", "require"])
def test_wait_readable_parks_until_the_reply_arrives(serve, pki, mode):
    def script(conn):
        with accept(conn, mode, pki) as conn:
            assert recv_exactly(conn, 2) == b"go"
            conn.sendall(b"reply")
            return recv_exactly(conn, 3)

    server = serve(script)
    transport = connect(server, info_for(sslmode=mode))
    waiter = gevent.spawn(transport.wait_readable)
    gevent.sleep(0)  # the waiter parks: nothing was asked yet
    assert not waiter.ready()
    transport.sendall(b"go")
    waiter.get(timeout=PATIENCE)
    assert transport.recv(16) == b"reply"  # waiting consumed nothing
    transport.sendall(b"bye")
    assert server.results() == [b"bye"]


def test_closing_a_transport_wakes_a_greenlet_waiting_for_its_reply(serve):
    def script(conn):
        with conn:
            return conn.recv(1)  # b"" once the client closes

    server = serve(script)
    transport = connect(server, info_for(sslmode="disable"))
    waiter = gevent.spawn(transport.wait_readable)
    gevent.sleep(0)  # the waiter parks on the socket
    transport.close()
    with pytest.raises(OperationalError, match="closed"):
        waiter.get(timeout=PATIENCE)
    assert transport.sock.fileno() == -1  # the descriptor closed after the waiter woke
    assert server.results() == [b""]
    with pytest.raises(OperationalError, match="closed"):
        transport.wait_readable()


def test_verify_full_by_ip_address(serve, pki):
    server = serve(tls_echo(server_context(pki)))
    info = info_for(host="127.0.0.1", sslmode="verify-full", sslrootcert=pki["ca.crt"])
    transport = open_transport(info, "127.0.0.1", server.port, timeout=PATIENCE)
    assert transport.is_tls
    transport.close()


@pytest.mark.parametrize("mode", ["require", "verify-ca", "verify-full"])
def test_wrong_ca_is_rejected(serve, pki, mode):
    server = serve(tls_refused(server_context(pki)))
    info = info_for(sslmode=mode, sslrootcert=pki["wrong-ca.crt"])
    with pytest.raises(OperationalError, match="unknown certificate authority"):
        connect(server, info)
    assert isinstance(server.results()[0], (ssl.SSLError, OSError))


def test_wrong_host_name_is_rejected_by_verify_full_only(serve, pki):
    context = server_context(pki, cert="wronghost.crt")
    server = serve(tls_echo(context), tls_echo(context))
    info = info_for(sslmode="verify-ca", sslrootcert=pki["ca.crt"])
    connect(server, info).sendall(b"hello")
    info = info_for(sslmode="verify-full", sslrootcert=pki["ca.crt"])
    with pytest.raises(OperationalError, match="host name mismatch") as caught:
        connect(server, info)
    assert '"wrong-host.invalid"' in str(caught.value) and '"localhost"' in str(caught.value)
    first, second = server.results()
    assert first[0] == b"hello"
    assert second[0] == b""  # the handshake completed, then we hung up without a byte


def test_expired_certificate_is_rejected(serve, pki):
    server = serve(tls_refused(server_context(pki, cert="expired.crt")))
    info = info_for(sslmode="verify-ca", sslrootcert=pki["ca.crt"])
    with pytest.raises(OperationalError, match="certificate expired"):
        connect(server, info)


def test_require_without_root_certificate_does_not_verify(serve, pki):
    server = serve(tls_echo(server_context(pki, cert="wronghost.crt")))
    transport = connect(server, info_for(sslmode="require"))
    assert transport.is_tls


def test_default_root_certificate_makes_require_verify(serve, pki, clean_environment):
    directory = clean_environment / ".postgresql"
    directory.mkdir()
    with open(pki["wrong-ca.crt"], "rb") as src:
        (directory / "root.crt").write_bytes(src.read())
    server = serve(tls_refused(server_context(pki)))
    with pytest.raises(OperationalError, match="unknown certificate authority"):
        connect(server, info_for(sslmode="require"))


@pytest.mark.parametrize("mode", ["verify-ca", "verify-full"])
def test_verifying_modes_need_a_root_certificate(mode):
    with pytest.raises(OperationalError, match=r"root certificate file .* does not exist"):
        ssl_context_for(info_for(sslmode=mode), "localhost")


def test_system_trust_store_rejects_a_private_ca(serve, pki):
    server = serve(tls_refused(server_context(pki)))
    with pytest.raises(OperationalError, match="unknown certificate authority"):
        connect(server, info_for(sslrootcert="system"))


def test_prefer_falls_back_to_plaintext_after_a_failed_handshake(serve, pki):
    server = serve(tls_refused(server_context(pki)), lambda conn: recv_exactly(conn, 5))
    info = info_for(sslmode="prefer", sslrootcert=pki["wrong-ca.crt"])
    transport = connect(server, info)
    transport.sendall(b"plain")
    assert not transport.is_tls and server.results()[1] == b"plain"


def test_revoked_certificate_is_rejected(serve, pki, tmp_path):
    with open(pki["ca.key"], "rb") as f:
        ca_key = serialization.load_pem_private_key(f.read(), None)
    with open(pki["ca.crt"], "rb") as f:
        ca = x509.load_pem_x509_certificate(f.read())
    with open(pki["server.crt"], "rb") as f:
        server_cert = x509.load_pem_x509_certificate(f.read())
    now = datetime.datetime.now(datetime.timezone.utc)
    revoked = (
        x509.RevokedCertificateBuilder()
        .serial_number(server_cert.serial_number)
        .revocation_date(now)
        .build()
    )
    crl = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca.subject)
        .last_update(now - datetime.timedelta(hours=1))
        .next_update(now + datetime.timedelta(days=1))
        .add_revoked_certificate(revoked)
        .sign(ca_key, hashes.SHA256())
    )
    crl_path = tmp_path / "root.crl"
    crl_path.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    server = serve(tls_refused(server_context(pki)))
    info = info_for(sslmode="verify-ca", sslrootcert=pki["ca.crt"], sslcrl=str(crl_path))
    with pytest.raises(OperationalError, match="certificate revoked"):
        connect(server, info)


# -- SNI and client certificates -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "sslsni", "expected"),
    [("localhost", True, ["localhost"]), ("localhost", False, [None]),
     ("127.0.0.1", True, [None])],
)
def test_sni(serve, pki, host, sslsni, expected):
    names = []
    server = serve(tls_echo(server_context(pki, seen_names=names)))
    info = info_for(host=host, sslmode="require", sslsni=sslsni)
    connect(server, info, host=host).sendall(b"hello")
    server.results()
    assert names == expected


def client_cert_server(pki):
    return tls_echo(server_context(pki, client_ca=pki["ca.crt"]))


def peer_common_name(peer):
    return dict(item[0] for item in peer["subject"])["commonName"]


def test_client_certificate(serve, pki):
    server = serve(client_cert_server(pki))
    info = info_for(
        sslmode="require", sslcert=pki["client-cert_user.crt"], sslkey=pki["client-cert_user.key"]
    )
    connect(server, info).sendall(b"hello")
    assert peer_common_name(server.results()[0][2]) == "cert_user"


def test_client_certificate_from_the_default_paths(serve, pki, clean_environment):
    directory = clean_environment / ".postgresql"
    directory.mkdir()
    for source, target in [("client-cert_user.crt", "postgresql.crt"),
                           ("client-cert_user.key", "postgresql.key")]:
        with open(pki[source], "rb") as f:
            (directory / target).write_bytes(f.read())
    os.chmod(directory / "postgresql.key", 0o600)
    server = serve(client_cert_server(pki))
    connect(server, info_for(sslmode="require")).sendall(b"hello")
    assert peer_common_name(server.results()[0][2]) == "cert_user"


def test_sslcertmode_disable_sends_no_certificate(serve, pki):
    server = serve(tls_refused(server_context(pki, client_ca=pki["ca.crt"])))
    info = info_for(sslmode="require", sslcertmode="disable",
                    sslcert=pki["client-cert_user.crt"], sslkey=pki["client-cert_user.key"])
    with pytest.raises(OperationalError):
        transport = connect(server, info)
        transport.sendall(b"hello")  # TLS 1.3 reports the server's refusal on first use
        transport.recv(1)
    assert server.results()[0] is not None


def test_client_key_with_loose_permissions_is_refused(pki, tmp_path):
    key = tmp_path / "loose.key"
    with open(pki["client-cert_user.key"], "rb") as f:
        key.write_bytes(f.read())
    os.chmod(key, 0o644)
    info = info_for(sslmode="require", sslcert=pki["client-cert_user.crt"], sslkey=str(key))
    with pytest.raises(OperationalError, match="group or world access"):
        ssl_context_for(info, "localhost")


def test_encrypted_client_key_needs_sslpassword(serve, pki, tmp_path):
    with open(pki["client-cert_user.key"], "rb") as f:
        key = serialization.load_pem_private_key(f.read(), None)
    secret = "key-secret-123"
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(secret.encode()),
    ))
    os.chmod(encrypted, 0o600)
    common = {"sslmode": "require", "sslcert": pki["client-cert_user.crt"],
              "sslkey": str(encrypted)}
    for wrong in (None, "not-it"):
        with pytest.raises(OperationalError, match="could not load client certificate") as caught:
            ssl_context_for(info_for(sslpassword=wrong, **common), "localhost")
        assert secret not in str(caught.value) and "not-it" not in str(caught.value)
    server = serve(client_cert_server(pki))
    connect(server, info_for(sslpassword=secret, **common)).sendall(b"hello")
    assert peer_common_name(server.results()[0][2]) == "cert_user"


# -- protocol violations and odd answers ---------------------------------------------------------


def test_bytes_injected_after_s_are_refused(serve):
    """CVE-2021-23222: a MITM appends plaintext to S, hoping it is read after the handshake."""

    def script(conn):
        assert recv_exactly(conn, 8) == SSL_REQUEST
        conn.sendall(b"S" + b"R\x00\x00\x00\x08\x00\x00\x00\x00")
        try:
            return conn.recv(100)
        except ConnectionResetError:  # closed with our bytes unread: Linux sends RST
            return b""

    server = serve(script)
    with pytest.raises(ProtocolError, match="CVE-2021-23222"):
        connect(server, info_for(sslmode="require"))
    assert server.results() == [b""]  # closed before any handshake byte


def test_error_answer_to_ssl_request_is_not_shown(serve):
    def script(conn):
        assert recv_exactly(conn, 8) == SSL_REQUEST
        conn.sendall(b"E\x00\x00\x00\x20SFATAL\x00Munauthenticated words\x00\x00")
        return conn.recv(100)

    server = serve(script)
    with pytest.raises(OperationalError, match="error response during SSL exchange") as caught:
        connect(server, info_for(sslmode="prefer"))
    assert "unauthenticated" not in str(caught.value)
    assert not isinstance(caught.value, ProtocolError)


def test_unknown_answer_is_a_protocol_error(serve):
    def script(conn):
        recv_exactly(conn, 8)
        conn.sendall(b"X")
        return conn.recv(1)

    server = serve(script)
    with pytest.raises(ProtocolError, match="invalid response to SSL negotiation"):
        connect(server, info_for(sslmode="prefer"))
    assert server.results() == [b""]


def test_server_closing_during_negotiation(serve):
    server = serve(lambda conn: recv_exactly(conn, 8))
    with pytest.raises(OperationalError, match="closed the connection during SSL negotiation"):
        connect(server, info_for(sslmode="prefer"))


# -- direct TLS negotiation ----------------------------------------------------------------------


def test_direct_tls_with_alpn(serve, pki):
    server = serve(tls_echo(server_context(pki), request=False))
    info = info_for(sslmode="verify-full", sslnegotiation="direct", sslrootcert=pki["ca.crt"])
    transport = connect(server, info)
    transport.sendall(b"hello")
    assert server.results()[0][:2] == (b"hello", "postgresql")
    assert transport.is_tls and transport.alpn_protocol == "postgresql"


def test_direct_tls_requires_the_server_to_select_alpn(serve, pki):
    server = serve(tls_echo(server_context(pki, alpn=False), request=False))
    info = info_for(sslmode="require", sslnegotiation="direct")
    with pytest.raises(OperationalError, match="without ALPN"):
        connect(server, info)


def test_postgres_negotiation_accepts_a_server_without_alpn(serve, pki):
    server = serve(tls_echo(server_context(pki, alpn=False)))
    transport = connect(server, info_for(sslmode="require"))
    assert transport.is_tls and transport.alpn_protocol is None


def test_direct_with_prefer_is_refused():
    with pytest.raises(InterfaceError, match="sslnegotiation=direct"):
        make_conninfo(sslmode="prefer", sslnegotiation="direct")


# -- timeouts and connection failures ------------------------------------------------------------


def silent(conn):
    """Accept, say nothing; return everything received until the client hangs up."""
    received = b""
    while chunk := conn.recv(100):
        received += chunk
    return received


def test_timeout_waiting_for_the_ssl_answer(serve):
    server = serve(silent)
    started = time.monotonic()
    with pytest.raises(OperationalError, match=r"localhost:\d+ timed out after 0.2s"):
        connect(server, info_for(sslmode="prefer"), timeout=SHORT)
    assert SHORT <= time.monotonic() - started < 2
    assert server.results() == [SSL_REQUEST]


def test_timeout_during_a_stalled_tls_handshake(serve):
    def script(conn):
        recv_exactly(conn, 8)
        conn.sendall(b"S")
        hello = conn.recv(4096)
        return hello[:1], conn.recv(100)  # ClientHello, then the hang-up

    server = serve(script)
    started = time.monotonic()
    with pytest.raises(OperationalError, match="timed out after 0.2s"):
        connect(server, info_for(sslmode="require"), timeout=SHORT)
    assert time.monotonic() - started < 2
    assert server.results() == [(b"\x16", b"")]


def test_timer_is_cancelled_after_success(serve):
    server = serve(plain_echo)
    transport = connect(server, info_for(sslmode="prefer"), timeout=SHORT)
    gevent.sleep(SHORT * 1.5)  # a leaked timer would fire into this greenlet now
    transport.sendall(b"later")
    assert server.results() == [b"later"]


def test_connection_refused_names_host_and_port():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    info = info_for(host="127.0.0.1", password="hunter2")
    with pytest.raises(OperationalError, match=rf'"127.0.0.1" \(127.0.0.1\), port {port} failed'):
        open_transport(info, "127.0.0.1", port, timeout=PATIENCE)


def test_bad_hostaddr():
    with pytest.raises(OperationalError, match="could not parse network address"):
        open_transport(info_for(), "db", 5432, hostaddr="not-an-ip", timeout=PATIENCE)


def test_hostaddr_skips_name_resolution(serve):
    server = serve(plain_echo)
    transport = connect(server, info_for(sslmode="prefer"), host="db.invalid")
    assert transport.host == "db.invalid" and transport.port == server.port
    transport.sendall(b"hello")
    assert server.results() == [b"hello"]


# -- socket options and closing ----------------------------------------------------------------


def test_tcp_options(serve):
    server = serve(silent)
    info = info_for(sslmode="disable", keepalives_idle=30, keepalives_interval=4,
                    keepalives_count=3, tcp_user_timeout=7000)
    sock = connect(server, info).sock
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
    values = [sock.getsockopt(socket.IPPROTO_TCP, option) for option in
              (socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL, socket.TCP_KEEPCNT,
               socket.TCP_USER_TIMEOUT)]
    assert values == [30, 4, 3, 7000]


def test_keepalives_off(serve):
    server = serve(silent)
    sock = connect(server, info_for(sslmode="disable", keepalives=False)).sock
    assert not sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)


def test_detach_for_fork_sends_nothing_and_leaves_other_holders_connected(serve):
    quiet = gevent.event.Event()

    def script(conn):
        with gevent.Timeout(SHORT, False):
            early = conn.recv(100)  # neither data nor EOF may come after detaching
            return ("premature", early)
        quiet.set()
        return ("quiet", recv_exactly(conn, 5), conn.recv(100))

    server = serve(script)
    transport = connect(server, info_for(sslmode="disable"))
    other_holder = os.dup(transport.fileno())  # stands in for the parent process
    transport.detach_for_fork()
    assert transport.closed
    assert quiet.wait(PATIENCE)
    os.write(other_holder, b"still")
    os.close(other_holder)
    assert server.results() == [("quiet", b"still", b"")]


def test_io_errors_become_operational_errors(serve):
    server = serve(lambda conn: conn.setsockopt(
        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)))  # RST on close
    transport = connect(server, info_for(sslmode="disable"))
    server.results()
    with pytest.raises(OperationalError, match="failed"):
        for _ in range(100):
            transport.sendall(b"x" * 65536)
            gevent.sleep(0.001)


# -- Unix sockets --------------------------------------------------------------------------


@pytest.fixture
def unix_dir(tmp_path):
    directory = tmp_path / "sock"
    directory.mkdir()
    return str(directory)


@pytest.mark.parametrize("mode", ["require", "verify-full"])
def test_unix_socket_never_uses_tls(serve, unix_dir, mode):
    server = serve(lambda conn: recv_exactly(conn, 5),
                   unix_path=conninfo.unix_socket_path(unix_dir, 5999))
    info = info_for(host=unix_dir, port=5999, sslmode=mode, sslrootcert="/nonexistent")
    transport = open_transport(info, unix_dir, 5999, timeout=PATIENCE)
    transport.sendall(b"start")
    assert server.results() == [b"start"]
    assert transport.is_unix and not transport.is_tls
    assert ssl_context_for(info, unix_dir) is None
    transport.close()


def test_requirepeer(serve, unix_dir):
    me = pwd.getpwuid(os.geteuid()).pw_name
    path = conninfo.unix_socket_path(unix_dir, 5998)
    server = serve(silent, silent, unix_path=path)
    open_transport(info_for(host=unix_dir, port=5998, requirepeer=me), unix_dir, 5998).close()
    with pytest.raises(OperationalError, match=f'does not match actual peer user name "{me}"'):
        open_transport(info_for(host=unix_dir, port=5998, requirepeer="somebody-else"),
                       unix_dir, 5998)
    assert server.results() == [b"", b""]


def test_missing_unix_socket(unix_dir):
    with pytest.raises(OperationalError, match=r'on socket ".*\.s\.PGSQL\.5997" failed'):
        open_transport(info_for(host=unix_dir, port=5997), unix_dir, 5997)


# -- host name rules (libpq's) -------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca():
    return certs.make_ca("names CA", key_type="ec256")


def der_for(ca, cn, sans=()):
    cert, _ = certs.make_cert(*ca, cn, sans, key_type="ec256")
    return cert.public_bytes(serialization.Encoding.DER)


@pytest.mark.parametrize(
    ("cn", "sans", "host", "ok"),
    [
        ("x", ["db.example.com"], "db.example.com", True),
        ("x", ["DB.Example.COM"], "db.example.com", True),
        ("x", ["*.example.com"], "db.example.com", True),
        ("x", ["*.example.com"], "a.b.example.com", False),
        ("x", ["*.example.com"], "example.com", False),
        ("x", ["*.example.com"], "db.example.org", False),
        ("db.example.com", [], "db.example.com", True),      # CN when there is no SAN
        ("db.example.com", ["other.example.com"], "db.example.com", False),  # SAN wins
        ("x", ["10.0.0.1"], "10.0.0.1", True),
        ("x", ["10.0.0.1"], "10.0.0.2", False),
        ("x", ["::1"], "::1", True),
        ("10.0.0.1", ["db.example.com"], "10.0.0.1", True),  # no IP SAN: CN is used
        ("10.0.0.1", ["10.0.0.9"], "10.0.0.1", False),
    ],
)
def test_host_name_rules(ca, cn, sans, host, ok):
    der = der_for(ca, cn, sans)
    if ok:
        check_host_name(der, host)
    else:
        with pytest.raises(OperationalError, match="host name mismatch"):
            check_host_name(der, host)


def test_host_name_mismatch_message_counts_other_names(ca):
    der = der_for(ca, "x", ["a.example", "b.example", "c.example"])
    with pytest.raises(OperationalError, match=r'"a.example" \(and 2 other names\)'):
        check_host_name(der, "d.example")


# -- a real server -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_server():
    embedded = pytest.importorskip("pgmux.tooling.embedded")
    try:
        server = embedded.EmbeddedPostgres(bin_dir=tls_server_bin(), tls=True).start()
    except (FileNotFoundError, embedded.EmbeddedPostgresError) as exc:
        pytest.skip(f"no PostgreSQL server available: {exc}")
    yield server
    server.stop()


def startup_reply(transport):
    """Send a StartupMessage and return the type of the first message the server answers."""
    transport.sendall(frontend.startup({"user": "postgres", "database": "postgres"}))
    return transport.recv(1)


def test_real_server_verify_full(real_server):
    info = make_conninfo(real_server.dsn(), sslmode="verify-full",
                         sslrootcert=real_server.tls_files["ca.crt"])
    transport = open_transport(info, "127.0.0.1", real_server.port, timeout=PATIENCE)
    assert transport.is_tls and transport.tls_version == "TLSv1.3"
    assert startup_reply(transport) == b"R"  # AuthenticationOk (trust)
    transport.close()


def test_real_server_wrong_ca(real_server, pki):
    info = make_conninfo(real_server.dsn(), sslmode="verify-ca", sslrootcert=pki["ca.crt"])
    with pytest.raises(OperationalError, match="unknown certificate authority"):
        open_transport(info, "127.0.0.1", real_server.port, timeout=PATIENCE)


def test_real_server_unix_socket_with_requirepeer(real_server):
    owner = pwd.getpwuid(os.stat(real_server.data_dir).st_uid).pw_name
    info = make_conninfo(host=real_server.host, port=real_server.port, requirepeer=owner,
                         sslmode="require")
    transport = open_transport(info, real_server.host, real_server.port, timeout=PATIENCE)
    assert transport.is_unix and not transport.is_tls
    assert startup_reply(transport) == b"R"
    transport.close()
