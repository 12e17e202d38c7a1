"""The TLS matrix against real servers: every sslmode x server with and without TLS x good,
wrong-host, wrong-CA and expired certificates; sslmode against hostssl/hostnossl rules;
direct TLS; channel binding with RSA, ECDSA and EdDSA certificates of different hashes."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import time

import gevent
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.x509.oid import NameOID
from gevent import socket
from gevent import ssl as gevent_ssl
from gevent.server import StreamServer
from support.connect import PATIENCE, isolate_environment, opening
from support.server import PgServer, tls_server_bin

from pgmux.errors import InterfaceError, OperationalError
from pgmux.io.connect import ServerConnection, connect
from pgmux.io.conninfo import make_conninfo
from pgmux.protocol import startup
from pgmux.protocol.channel_binding import tls_server_end_point_hash
from pgmux.tooling import certs

SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
CERTS = ("good", "wrong-host", "wrong-ca", "expired")

# Outcomes: connected over TLS, connected in plaintext, or an error matching the text.
TLS, PLAIN = "tls", "plain"
UNKNOWN_CA = "unknown certificate authority"
EXPIRED = "certificate expired"
HOST_MISMATCH = "host name mismatch"
NO_SSL = "does not support SSL"

# The client trusts the test CA (sslrootcert given): libpq then verifies the chain in every
# mode that uses TLS; prefer falls back to plaintext when the handshake fails.
WITH_ROOT_CERT = {
    "disable": dict.fromkeys(CERTS, PLAIN),
    "allow": dict.fromkeys(CERTS, PLAIN),
    "prefer": {"good": TLS, "wrong-host": TLS, "wrong-ca": PLAIN, "expired": PLAIN},
    "require": {"good": TLS, "wrong-host": TLS, "wrong-ca": UNKNOWN_CA, "expired": EXPIRED},
    "verify-ca": {"good": TLS, "wrong-host": TLS, "wrong-ca": UNKNOWN_CA, "expired": EXPIRED},
    "verify-full": {
        "good": TLS, "wrong-host": HOST_MISMATCH, "wrong-ca": UNKNOWN_CA, "expired": EXPIRED,
    },
}
# No root certificate: nothing to verify against, so prefer and require take any certificate.
WITHOUT_ROOT_CERT = {"prefer": dict.fromkeys(CERTS, TLS), "require": dict.fromkeys(CERTS, TLS)}
# A server without TLS.
NO_TLS_SERVER = {
    "disable": PLAIN, "allow": PLAIN, "prefer": PLAIN,
    "require": NO_SSL, "verify-ca": NO_SSL, "verify-full": NO_SSL,
}


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    """No PG* variables, no ~/.postgresql files, no default socket directory."""
    isolate_environment(monkeypatch, tmp_path, home=tmp_path)


@pytest.fixture
def opened():
    """open(server, role, **params) -> ServerConnection, closed after the test."""
    with opening() as open_connection:
        yield open_connection


# -- a private TLS server whose certificate the tests switch ---------------------------------


def _ed25519_pair() -> dict[str, x509.Certificate | object]:
    """An Ed25519 CA and a server certificate it signs (signatures without a hash)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ed25519.Ed25519PrivateKey.generate(), ed25519.Ed25519PrivateKey.generate()

    def build(subject: str, issuer: str, public, signer, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(signer, None)

    ca = build("ed25519 CA", "ed25519 CA", ca_key.public_key(), ca_key, ca=True)
    cert = build("localhost", "ed25519 CA", key.public_key(), ca_key, ca=False)
    return {"ca": ca, "cert": cert, "key": key}


# Channel-binding variants: name -> (key type, signature hash, expected binding hash length).
BINDING_VARIANTS = {
    "rsa-sha256": ("rsa", "sha256", 32),
    "rsa-sha384": ("rsa", "sha384", 48),
    "rsa-sha512": ("rsa", "sha512", 64),
    "ecdsa-p256-sha256": ("ec256", "sha256", 32),
    "ecdsa-p384-sha384": ("ec384", "sha384", 48),
    "ecdsa-p384-sha512": ("ec384", "sha512", 64),
}


class SwitchingServer:
    """A private PostgreSQL 15 with TLS; ``serve(name)`` switches its certificate (reload).

    Certificates live in the server's own TLS directory (the server user must read them);
    ``certs[name]`` is (certificate path, key path, CA path, DER).
    """

    def __init__(self, server: PgServer):
        self.pg = server
        self.embedded = server.embedded_server
        self.directory = self.embedded.tls_dir
        key_stat = os.stat(server.tls_files["server.key"])
        self._owner = (key_stat.st_uid, key_stat.st_gid)
        self.certs: dict[str, tuple[str, str, str, bytes]] = {}
        self.current = "good"
        self._make_matrix_certs()
        self._make_binding_certs()

    def _write(self, name: str, obj) -> str:
        path = certs.write_pem(os.path.join(self.directory, name), obj)
        os.chown(path, *self._owner)
        return path

    def _add(self, name: str, cert: x509.Certificate, key, ca_path: str) -> None:
        cert_path = self._write(f"{name}.crt", cert)
        key_path = self._write(f"{name}.key", key)
        der = cert.public_bytes(serialization.Encoding.DER)
        self.certs[name] = (cert_path, key_path, ca_path, der)

    def _make_matrix_certs(self) -> None:
        files = self.pg.tls_files
        key = _load_key(files["server.key"])
        for name, file in (("good", "server.crt"), ("wrong-host", "wronghost.crt"),
                           ("expired", "expired.crt")):
            self._add(name, _load_cert(files[file]), key, files["ca.crt"])
        wrong_ca = _load_cert(files["wrong-ca.crt"])
        signed, _ = certs.make_cert(wrong_ca, _load_key(files["wrong-ca.key"]), "localhost",
                                     certs.SERVER_NAMES, key=key)
        self._add("wrong-ca", signed, key, files["ca.crt"])

    def _make_binding_certs(self) -> None:
        for name, (key_type, hash_name, _) in BINDING_VARIANTS.items():
            ca, ca_key = certs.make_ca(f"{name} CA", key_type=key_type, hash=hash_name)
            cert, key = certs.make_cert(ca, ca_key, "localhost", certs.SERVER_NAMES,
                                         key_type=key_type, hash=hash_name)
            self._add(name, cert, key, self._write(f"{name}-ca.crt", ca))
        pair = _ed25519_pair()
        self._add("ed25519", pair["cert"], pair["key"], self._write("ed25519-ca.crt", pair["ca"]))

    def serve(self, name: str) -> None:
        """Make the server present certificate ``name``; checked by looking at it."""
        if name == self.current:
            return
        cert_path, key_path, _, der = self.certs[name]
        self.embedded.psql(
            f"ALTER SYSTEM SET ssl_cert_file = '{cert_path}';"
            f"ALTER SYSTEM SET ssl_key_file = '{key_path}';"
        )
        self.embedded.reload()
        self.current = name
        seen = self.presented_certificate()
        assert seen == der, f"the server did not switch to the {name} certificate"

    def presented_certificate(self) -> bytes | None:
        """The certificate the server presents now (a TLS connection that verifies nothing)."""
        info = make_conninfo(**self.pg.params_for("trust_user", sslmode="require"))
        conn = connect(info, timeout=PATIENCE)
        try:
            return conn.transport.server_certificate
        finally:
            conn.close()

    def ca_of(self, name: str) -> str:
        return self.certs[name][2]


def _load_cert(path: str) -> x509.Certificate:
    with open(path, "rb") as f:
        return x509.load_pem_x509_certificate(f.read())


def _load_key(path: str):
    with open(path, "rb") as f:
        return serialization.load_pem_private_key(f.read(), password=None)


@pytest.fixture(scope="module")
def switching():
    tls_server_bin()
    server = PgServer.embedded(prefer="debian", tls=True)
    try:
        yield SwitchingServer(server)
    finally:
        server.stop()


@pytest.fixture(scope="module", params=CERTS)
def served_name(request):
    """A matrix certificate name; module scope makes pytest group the tests by it."""
    return request.param


@pytest.fixture
def served(switching, served_name):
    """The private server presenting that certificate (a no-op when it already does)."""
    switching.serve(served_name)
    return served_name


@pytest.fixture(scope="module")
def unrelated_ca(tmp_path_factory):
    """A CA file that signed nothing the servers present."""
    ca, _ = certs.make_ca("unrelated CA", key_type="ec256")
    return certs.write_pem(tmp_path_factory.mktemp("ca") / "ca.crt", ca)


def server_sees_tls(server: PgServer, conn: ServerConnection) -> bool:
    """What the server says about this backend's connection (pg_stat_ssl)."""
    found = server.admin(f"SELECT ssl FROM pg_stat_ssl WHERE pid = {conn.pid}")
    assert found in ("t", "f"), f"backend {conn.pid} not found in pg_stat_ssl"
    return found == "t"


def check_outcome(server: PgServer, open_connection, expected: str, **params) -> None:
    """Connect as scram_user and assert the expected outcome, on both ends."""
    if expected not in (TLS, PLAIN):
        with pytest.raises(OperationalError, match=expected):
            open_connection(server, "scram_user", **params)
        return
    conn = open_connection(server, "scram_user", **params)
    assert conn.transport.is_tls == (expected == TLS)
    assert server_sees_tls(server, conn) == (expected == TLS)
    assert conn.auth_method == ("scram-sha-256-plus" if expected == TLS else "scram-sha-256")


# -- the matrix ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sslmode", SSLMODES)
def test_tls_server_with_root_certificate(switching, served, opened, sslmode):
    expected = WITH_ROOT_CERT[sslmode][served]
    check_outcome(switching.pg, opened, expected, sslmode=sslmode,
                  sslrootcert=switching.ca_of(served))


@pytest.mark.parametrize("sslmode", sorted(WITHOUT_ROOT_CERT))
def test_tls_server_without_root_certificate(switching, served, opened, sslmode):
    expected = WITHOUT_ROOT_CERT[sslmode][served]
    check_outcome(switching.pg, opened, expected, sslmode=sslmode)


@pytest.mark.parametrize("sslmode", ["verify-ca", "verify-full"])
def test_verifying_modes_need_a_root_certificate(switching, opened, sslmode):
    with pytest.raises(OperationalError, match="root certificate file .* does not exist"):
        opened(switching.pg, "scram_user", sslmode=sslmode)


@pytest.mark.parametrize("sslmode", SSLMODES)
def test_server_without_tls(pg18, opened, unrelated_ca, sslmode):
    """PostgreSQL 18 from the wheel has no TLS: it answers N to the SSLRequest."""
    check_outcome(pg18, opened, NO_TLS_SERVER[sslmode], sslmode=sslmode,
                  sslrootcert=unrelated_ca)


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_verify_full_by_name_and_by_address(switching, opened, host):
    switching.serve("good")
    conn = opened(switching.pg, "scram_user", host=host, sslmode="verify-full",
                  sslrootcert=switching.ca_of("good"))
    assert conn.transport.is_tls and conn.transport.tls_version == "TLSv1.3"
    assert conn.transport.cipher


def test_wrong_host_name_error_names_both_names(switching):
    switching.serve("wrong-host")
    info = make_conninfo(**switching.pg.params_for(
        "scram_user", sslmode="verify-full", sslrootcert=switching.ca_of("wrong-host")))
    with pytest.raises(OperationalError) as caught:
        connect(info, timeout=PATIENCE)
    assert certs.WRONG_HOST in str(caught.value) and '"127.0.0.1"' in str(caught.value)


# -- sslmode against pg_hba's hostssl / hostnossl --------------------------------------------------

# role -> sslmode -> outcome on the shared server (good certificate, trusted CA).
HBA_MATRIX = {
    "nossl_user": {  # hostnossl only
        "disable": PLAIN, "allow": PLAIN, "prefer": PLAIN,
        "require": "pg_hba.conf rejects", "verify-ca": "pg_hba.conf rejects",
        "verify-full": "pg_hba.conf rejects",
    },
    "cert_user": {  # hostssl only, client certificate
        "disable": "pg_hba.conf rejects", "allow": TLS, "prefer": TLS,
        "require": TLS, "verify-ca": TLS, "verify-full": TLS,
    },
}


@pytest.mark.parametrize("sslmode", SSLMODES)
@pytest.mark.parametrize("role", sorted(HBA_MATRIX))
def test_sslmode_against_hostssl_and_hostnossl(pg, opened, role, sslmode):
    """libpq's fallbacks: allow retries with TLS and prefer without it when pg_hba refuses."""
    expected = HBA_MATRIX[role][sslmode]
    params = {"sslmode": sslmode, "sslrootcert": pg.tls_files["ca.crt"]}
    if expected not in (TLS, PLAIN):
        with pytest.raises(OperationalError, match=expected):
            opened(pg, role, **params)
        return
    conn = opened(pg, role, **params)
    assert conn.transport.is_tls == (expected == TLS)
    assert server_sees_tls(pg, conn) == (expected == TLS)
    assert conn.parameters["session_authorization"] == role


# -- direct TLS ------------------------------------------------------------------------------------


@pytest.mark.parametrize("sslmode", ["disable", "allow"])  # prefer: see test_transport
def test_direct_tls_needs_a_verifying_sslmode(sslmode):
    with pytest.raises(InterfaceError, match="sslnegotiation=direct"):
        make_conninfo(host="127.0.0.1", user="u", sslmode=sslmode, sslnegotiation="direct")


def test_direct_tls_against_a_server_without_it_fails_quickly(pg):
    """PostgreSQL 15 reads a ClientHello as a bogus startup packet and hangs up."""
    info = make_conninfo(**pg.params_for("scram_user", sslnegotiation="direct",
                                         **pg.tls_params("verify-full")))
    started = time.monotonic()
    with pytest.raises(OperationalError, match="SSL handshake"):
        connect(info, timeout=PATIENCE)
    assert time.monotonic() - started < 2.0  # no waiting for the connect timeout


class DirectTLSTerminator:
    """A gevent TLS terminator in front of a real server, as a PostgreSQL 17+ would accept
    direct TLS: the client's first byte must be a ClientHello (0x16), ALPN "postgresql" is
    selected, and the decrypted stream goes on to the server in plaintext."""

    def __init__(self, target_port: int, cert: str, key: str):
        self.target_port = target_port
        self.context = gevent_ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.context.set_alpn_protocols(["postgresql"])
        self.first_bytes: list[bytes] = []
        self.alpn: list[str | None] = []
        self._server = StreamServer(("127.0.0.1", 0), self._handle)
        self._server.start()
        self.port = self._server.server_port

    def _handle(self, client: socket.socket, _address) -> None:
        self.first_bytes.append(client.recv(1, socket.MSG_PEEK))
        try:
            tls = self.context.wrap_socket(client, server_side=True)
        except (OSError, ssl.SSLError):
            client.close()
            return
        self.alpn.append(tls.selected_alpn_protocol())
        upstream = socket.create_connection(("127.0.0.1", self.target_port))
        pumps = [gevent.spawn(_pump, tls, upstream), gevent.spawn(_pump, upstream, tls)]
        gevent.wait(pumps, count=1)
        gevent.killall(pumps)
        tls.close()
        upstream.close()

    def close(self) -> None:
        self._server.stop()


def _pump(source, sink) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass


@pytest.fixture
def terminator(pg):
    files = pg.tls_files
    proxy = DirectTLSTerminator(pg.embedded_server.port, files["server.crt"],
                                files["server.key"])
    yield proxy
    proxy.close()


def test_direct_tls_end_to_end_through_a_terminator(pg, opened, terminator):
    conn = opened(pg, "scram_user", port=terminator.port, sslnegotiation="direct",
                  channel_binding="prefer", **pg.tls_params("verify-full"))
    assert terminator.first_bytes == [b"\x16"]  # a TLS record, no SSLRequest first
    assert terminator.alpn == ["postgresql"]
    assert conn.transport.is_tls and conn.transport.alpn_protocol == "postgresql"
    # The server saw plaintext, so it offered no SCRAM-SHA-256-PLUS.
    assert conn.auth_method == "scram-sha-256"
    assert not server_sees_tls(pg, conn)


def test_channel_binding_require_detects_a_tls_terminator(pg, terminator):
    """A man in the middle with a trusted certificate cannot pass channel_binding=require."""
    info = make_conninfo(**pg.params_for("scram_user", port=terminator.port,
                                         sslnegotiation="direct", channel_binding="require",
                                         **pg.tls_params("verify-full")))
    with pytest.raises(OperationalError, match="does not offer SCRAM-SHA-256-PLUS"):
        connect(info, timeout=PATIENCE)


# -- channel binding with certificates of different algorithms ---------------------------------


@pytest.mark.parametrize("variant", list(BINDING_VARIANTS))
def test_channel_binding_with_each_signature_hash(switching, opened, variant):
    """The server checks the binding: success proves both ends hashed the same way."""
    switching.serve(variant)
    conn = opened(switching.pg, "scram_user", channel_binding="require",
                  sslmode="verify-full", sslrootcert=switching.ca_of(variant))
    assert conn.auth_method == "scram-sha-256-plus"
    certificate = conn.transport.server_certificate
    assert certificate == switching.certs[variant][3]
    assert len(tls_server_end_point_hash(certificate)) == BINDING_VARIANTS[variant][2]


def test_the_server_rejects_a_binding_with_the_wrong_hash(switching, monkeypatch):
    """The control for the test above: SHA-256 for a SHA-512 certificate is refused."""
    switching.serve("rsa-sha512")

    def sha256_always(der: bytes) -> bytes:
        digest = hashes.Hash(hashes.SHA256())
        digest.update(der)
        return digest.finalize()

    monkeypatch.setattr(startup, "tls_server_end_point_hash", sha256_always)
    info = make_conninfo(**switching.pg.params_for(
        "scram_user", channel_binding="require", sslmode="verify-full",
        sslrootcert=switching.ca_of("rsa-sha512")))
    with pytest.raises(OperationalError, match="channel binding"):
        connect(info, timeout=PATIENCE)


def test_ed25519_certificate_cannot_bind(switching, opened):
    """Ed25519 signatures have no hash: prefer falls back to SCRAM, require refuses."""
    switching.serve("ed25519")
    params = {"sslmode": "verify-full", "sslrootcert": switching.ca_of("ed25519")}
    conn = opened(switching.pg, "scram_user", channel_binding="prefer", **params)
    assert conn.transport.is_tls and conn.auth_method == "scram-sha-256"
    with pytest.raises(OperationalError, match="channel binding impossible"):
        opened(switching.pg, "scram_user", channel_binding="require", **params)
