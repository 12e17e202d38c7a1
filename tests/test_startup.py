"""The startup/authentication state machine, driven by hand-built backend messages."""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import struct

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.x509.oid import NameOID

from pgmux.errors import DatabaseError, InterfaceError, OperationalError, ProtocolError
from pgmux.protocol import frontend
from pgmux.protocol.channel_binding import tls_server_end_point_hash
from pgmux.protocol.startup import StartupHandshake, parse_require_auth

PASSWORD = "Xyzzy-s3cr3t-Plugh"
USER = "alice"
CLIENT_NONCE = "fyko+d2lbbFgONRv9qkxdawL"
SERVER_NONCE = CLIENT_NONCE + "3rfcNHYJY1ZVvWVs7j"
SALT = bytes.fromhex("41c6a1d2b77e0f3c9e5d88aa01020304")
ITERATIONS = 4096
SERVER_FIRST = f"r={SERVER_NONCE},s={base64.b64encode(SALT).decode()},i={ITERATIONS}".encode()
CLIENT_FIRST_BARE = f"n=,r={CLIENT_NONCE}".encode()  # libpq sends an empty user name
PLUS_HEADER = b"p=tls-server-end-point,,"

R, E, N, S, K, Z, V = (ord(c) for c in "RENSKZv")

# -- hand-built backend messages -----------------------------------------------------------


def auth(code: int, data: bytes = b"") -> tuple[int, bytes]:
    return R, struct.pack("!i", code) + data


AUTH_OK = auth(0)
CLEARTEXT = auth(3)
MD5_SALT = b"\x01\x02\x03\x04"
MD5 = auth(5, MD5_SALT)
GSS, SSPI, KERBEROS = auth(7), auth(9), auth(2)


def sasl(*mechanisms: str) -> tuple[int, bytes]:
    return auth(10, b"".join(m.encode() + b"\x00" for m in mechanisms) + b"\x00")


SASL_PLAIN = sasl("SCRAM-SHA-256")
SASL_BOTH = sasl("SCRAM-SHA-256-PLUS", "SCRAM-SHA-256")
SASL_PLUS_ONLY = sasl("SCRAM-SHA-256-PLUS")


def sasl_continue(data: bytes = SERVER_FIRST) -> tuple[int, bytes]:
    return auth(11, data)


def sasl_final(data: bytes) -> tuple[int, bytes]:
    return auth(12, data)


def fields(**values: str) -> bytes:
    return b"".join(k.encode() + v.encode() + b"\x00" for k, v in values.items()) + b"\x00"


def error(code: str, message: str, severity: str = "FATAL") -> tuple[int, bytes]:
    return E, fields(S=severity, V=severity, C=code, M=message)


def notice(message: str) -> tuple[int, bytes]:
    return N, fields(S="WARNING", C="01000", M=message)


def parameter(name: str, value: str) -> tuple[int, bytes]:
    return S, name.encode() + b"\x00" + value.encode() + b"\x00"


def key_data(pid: int, key: bytes) -> tuple[int, bytes]:
    return K, struct.pack("!i", pid) + key


def negotiate(minor: int, *options: str) -> tuple[int, bytes]:
    body = struct.pack("!ii", minor, len(options))
    return V, body + b"".join(o.encode() + b"\x00" for o in options)


READY = (Z, b"I")

# -- expected frontend bytes, built by hand ------------------------------------------------


def frame(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def password_message(secret: bytes) -> bytes:
    return frame(b"p", secret + b"\x00")


def sasl_initial(mechanism: str, data: bytes) -> bytes:
    return frame(b"p", mechanism.encode() + b"\x00" + struct.pack("!i", len(data)) + data)


def reference_scram(password: bytes, gs2_and_cbind: bytes) -> tuple[bytes, bytes]:
    """(client-final-message, server-final-message), step by step from RFC 5802 section 3."""
    salted_password = hashlib.pbkdf2_hmac("sha256", password, SALT, ITERATIONS)
    client_key = hmac.new(salted_password, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    channel = base64.b64encode(gs2_and_cbind)
    without_proof = b"c=" + channel + b",r=" + SERVER_NONCE.encode()
    auth_message = CLIENT_FIRST_BARE + b"," + SERVER_FIRST + b"," + without_proof
    client_signature = hmac.new(stored_key, auth_message, hashlib.sha256).digest()
    proof = bytes(x ^ y for x, y in zip(client_key, client_signature, strict=True))
    server_key = hmac.new(salted_password, b"Server Key", hashlib.sha256).digest()
    server_signature = hmac.new(server_key, auth_message, hashlib.sha256).digest()
    client_final = without_proof + b",p=" + base64.b64encode(proof)
    return client_final, b"v=" + base64.b64encode(server_signature)


def handshake(**options) -> StartupHandshake:
    settings = {
        "user": USER,
        "database": "appdb",
        "password": PASSWORD,
        "scram_nonce": lambda: CLIENT_NONCE,
    } | options
    machine = StartupHandshake(**settings)
    machine.start()
    return machine


def feed(machine: StartupHandshake, *messages: tuple[int, bytes]) -> list[bytes]:
    return [machine.handle(kind, payload) for kind, payload in messages]


def finish(machine: StartupHandshake) -> None:
    assert feed(machine, parameter("server_version", "17.2"), key_data(7, b"k" * 32), READY) == [
        b"",
        b"",
        b"",
    ]
    assert machine.done


# -- certificates --------------------------------------------------------------------------

NAME = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "db.example")])
NOT_BEFORE = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def rsa_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key():
    return ec.generate_private_key(ec.SECP384R1())


def built_certificate(key, algorithm) -> bytes:
    cert = (
        x509.CertificateBuilder()
        .subject_name(NAME)
        .issuer_name(NAME)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(NOT_BEFORE)
        .not_valid_after(NOT_BEFORE + datetime.timedelta(days=30))
        .sign(key, algorithm)
    )
    return cert.public_bytes(serialization.Encoding.DER)


def der(tag: int, content: bytes) -> bytes:
    size = len(content)
    if size < 0x80:
        return bytes([tag, size]) + content
    length = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + content


def der_oid(dotted: str) -> bytes:
    first, second, *rest = (int(arc) for arc in dotted.split("."))
    body = bytearray([40 * first + second])
    for arc in rest:
        chunk = [arc & 0x7F]
        while arc > 0x7F:
            arc >>= 7
            chunk.append(0x80 | (arc & 0x7F))
        body += bytes(reversed(chunk))
    return der(0x06, bytes(body))


LEGACY_RSA_SIGNATURES = {  # cryptography refuses to build these; we assemble the DER ourselves
    "md5": ("1.2.840.113549.1.1.4", hashes.MD5()),
    "sha1": ("1.2.840.113549.1.1.5", hashes.SHA1()),
}


def legacy_rsa_certificate(key, name: str) -> bytes:
    oid, algorithm = LEGACY_RSA_SIGNATURES[name]
    algorithm_id = der(0x30, der_oid(oid) + b"\x05\x00")
    validity = der(0x30, der(0x17, b"240101000000Z") + der(0x17, b"240131000000Z"))
    spki = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    tbs = der(
        0x30,
        der(0xA0, der(0x02, b"\x02"))  # version 3
        + der(0x02, b"\x01")  # serial
        + algorithm_id
        + NAME.public_bytes()
        + validity
        + NAME.public_bytes()
        + spki,
    )
    signature = key.sign(tbs, padding.PKCS1v15(), algorithm)
    return der(0x30, tbs + algorithm_id + der(0x03, b"\x00" + signature))


@pytest.fixture(scope="module")
def certificates(rsa_key, ec_key):
    """name -> (DER, hashlib name the binding must use)."""
    return {
        "rsa-sha256": (built_certificate(rsa_key, hashes.SHA256()), "sha256"),
        "rsa-sha384": (built_certificate(rsa_key, hashes.SHA384()), "sha384"),
        "ecdsa-sha384": (built_certificate(ec_key, hashes.SHA384()), "sha384"),
        "ecdsa-sha512": (built_certificate(ec_key, hashes.SHA512()), "sha512"),
        "rsa-sha1": (legacy_rsa_certificate(rsa_key, "sha1"), "sha256"),
        "rsa-md5": (legacy_rsa_certificate(rsa_key, "md5"), "sha256"),
    }


@pytest.fixture(scope="module")
def rsa_cert(certificates) -> bytes:
    return certificates["rsa-sha256"][0]


@pytest.fixture(scope="module")
def ed25519_cert() -> bytes:
    key = ed25519.Ed25519PrivateKey.generate()
    return built_certificate(key, None)


# -- the StartupMessage --------------------------------------------------------------------


def test_start_sends_user_database_then_params_on_3_2():
    machine = StartupHandshake(
        user="alice",
        database="db",
        password=None,
        params={"application_name": "app", "DateStyle": "ISO"},
    )
    body = (
        struct.pack("!i", 196610)
        + b"user\x00alice\x00database\x00db\x00"
        + b"application_name\x00app\x00DateStyle\x00ISO\x00\x00"
    )
    assert machine.start() == struct.pack("!i", len(body) + 4) + body


def test_start_without_database_on_3_0():
    machine = StartupHandshake(
        user="bob", database=None, password=None, protocol_version=frontend.PROTOCOL_3_0
    )
    body = struct.pack("!i", 196608) + b"user\x00bob\x00\x00"
    assert machine.start() == struct.pack("!i", len(body) + 4) + body


# -- trust and the setup phase -------------------------------------------------------------


def test_trust_flow_records_everything():
    machine = handshake()
    assert feed(machine, AUTH_OK) == [b""]
    assert not machine.done
    feed(
        machine,
        parameter("server_version", "17.2"),
        parameter("client_encoding", "UTF8"),
        notice("be careful"),
        key_data(4242, bytes(range(32))),
    )
    assert feed(machine, (Z, b"T")) == [b""]
    assert machine.done
    assert machine.auth_method == "trust"
    assert machine.protocol_version == frontend.PROTOCOL_3_2
    assert machine.parameters == {"server_version": "17.2", "client_encoding": "UTF8"}
    assert (machine.backend_pid, machine.backend_key) == (4242, bytes(range(32)))
    assert machine.transaction_status == "T"
    assert machine.notices == [{"S": "WARNING", "C": "01000", "M": "be careful"}]


def test_notice_before_authentication_is_recorded():
    machine = handshake()
    feed(machine, notice("early"), AUTH_OK)
    assert machine.notices[0]["M"] == "early"


# -- cleartext and MD5 ---------------------------------------------------------------------


def test_cleartext_over_insecure_tcp_is_refused_before_sending():
    machine = handshake()
    with pytest.raises(OperationalError, match="neither TLS nor a Unix socket") as info:
        machine.handle(*CLEARTEXT)
    assert PASSWORD not in str(info.value)
    assert machine.state == "failed"
    with pytest.raises(InterfaceError):  # nothing more comes out of a failed handshake
        machine.handle(*CLEARTEXT)


@pytest.mark.parametrize(
    "transport",
    [{"secure_transport": True}, {"allow_cleartext_over_insecure": True}],
)
def test_cleartext_sent_when_secure_or_allowed(transport):
    machine = handshake(**transport)
    assert feed(machine, CLEARTEXT) == [password_message(PASSWORD.encode())]
    feed(machine, AUTH_OK)
    finish(machine)
    assert machine.auth_method == "password"


def test_cleartext_allowed_over_tls(rsa_cert):
    machine = handshake(tls_server_certificate=rsa_cert)  # TLS implies a secure transport
    assert feed(machine, CLEARTEXT) == [password_message(PASSWORD.encode())]


def test_md5_digest():
    inner = hashlib.md5((PASSWORD + USER).encode()).hexdigest()
    expected = "md5" + hashlib.md5(inner.encode() + MD5_SALT).hexdigest()
    machine = handshake(secure_transport=True)
    assert feed(machine, MD5) == [password_message(expected.encode())]
    feed(machine, AUTH_OK)
    finish(machine)
    assert machine.auth_method == "md5"


def test_md5_over_insecure_tcp_is_refused():
    machine = handshake()
    with pytest.raises(OperationalError, match="MD5 password authentication over a connection"):
        machine.handle(*MD5)


def test_md5_with_a_short_salt_is_a_protocol_error():
    machine = handshake(secure_transport=True)
    with pytest.raises(ProtocolError):
        machine.handle(*auth(5, b"\x01\x02"))


@pytest.mark.parametrize("password", [None, ""])
@pytest.mark.parametrize("request_", [CLEARTEXT, MD5, SASL_PLAIN], ids=["password", "md5", "scram"])
def test_missing_password(password, request_):
    machine = handshake(password=password, secure_transport=True)
    with pytest.raises(OperationalError) as info:
        machine.handle(*request_)
    assert str(info.value) == "password authentication requested but no password was supplied"


# -- SCRAM-SHA-256 -------------------------------------------------------------------------


def test_scram_fixed_transcript():
    client_final, server_final = reference_scram(PASSWORD.encode(), b"n,,")
    machine = handshake()  # plain TCP is fine for SCRAM: no secret crosses the wire
    assert feed(machine, SASL_PLAIN) == [sasl_initial("SCRAM-SHA-256", b"n,," + CLIENT_FIRST_BARE)]
    assert feed(machine, sasl_continue()) == [frame(b"p", client_final)]
    assert feed(machine, sasl_final(server_final), AUTH_OK) == [b"", b""]
    finish(machine)
    assert machine.auth_method == "scram-sha-256"


def test_scram_rejects_a_wrong_server_signature():
    _, server_final = reference_scram(b"some other password", b"n,,")
    machine = handshake()
    feed(machine, SASL_PLAIN, sasl_continue())
    with pytest.raises(OperationalError, match="signature does not match"):
        machine.handle(*sasl_final(server_final))


def test_scram_applies_saslprep_to_the_password():
    client_final, _ = reference_scram(b"pass word", b"n,,")
    machine = handshake(password="pass\u3000word")  # IDEOGRAPHIC SPACE maps to SPACE
    feed(machine, SASL_PLAIN)
    assert feed(machine, sasl_continue()) == [frame(b"p", client_final)]


def test_scram_server_error_during_exchange():
    machine = handshake()
    feed(machine, SASL_PLAIN, sasl_continue())
    with pytest.raises(OperationalError, match="28P01") as info:
        machine.handle(*error("28P01", 'password authentication failed for user "alice"'))
    assert info.value.sqlstate == "28P01"


# -- SCRAM-SHA-256-PLUS and tls-server-end-point -------------------------------------------


@pytest.mark.parametrize(
    "name", ["rsa-sha256", "rsa-sha384", "ecdsa-sha384", "ecdsa-sha512", "rsa-sha1", "rsa-md5"]
)
def test_scram_plus_binds_to_the_certificate(certificates, name):
    der_bytes, hash_name = certificates[name]
    cbind = hashlib.new(hash_name, der_bytes).digest()
    assert tls_server_end_point_hash(der_bytes) == cbind
    client_final, server_final = reference_scram(PASSWORD.encode(), PLUS_HEADER + cbind)
    assert client_final.startswith(b"c=" + base64.b64encode(PLUS_HEADER + cbind) + b",r=")

    machine = handshake(tls_server_certificate=der_bytes)
    first = PLUS_HEADER + CLIENT_FIRST_BARE
    assert feed(machine, SASL_BOTH) == [sasl_initial("SCRAM-SHA-256-PLUS", first)]
    assert feed(machine, sasl_continue()) == [frame(b"p", client_final)]
    feed(machine, sasl_final(server_final), AUTH_OK)
    finish(machine)
    assert machine.auth_method == "scram-sha-256-plus"


def test_ed25519_certificate_makes_binding_impossible(ed25519_cert):
    with pytest.raises(OperationalError, match="Ed25519"):
        tls_server_end_point_hash(ed25519_cert)


def test_garbage_certificate_is_refused():
    with pytest.raises(OperationalError, match="not valid DER"):
        tls_server_end_point_hash(b"\x30\x03abc")


# -- channel_binding -----------------------------------------------------------------------


def first_message(machine: StartupHandshake, request_) -> bytes:
    (sent,) = feed(machine, request_)
    return sent


@pytest.mark.parametrize("mode", ["prefer", "require"])
def test_binding_used_when_tls_and_offered(rsa_cert, mode):
    machine = handshake(tls_server_certificate=rsa_cert, channel_binding=mode)
    sent = first_message(machine, SASL_BOTH)
    assert sent == sasl_initial("SCRAM-SHA-256-PLUS", PLUS_HEADER + CLIENT_FIRST_BARE)


def test_prefer_over_tls_without_plus_sends_y(rsa_cert):
    machine = handshake(tls_server_certificate=rsa_cert)
    assert first_message(machine, SASL_PLAIN) == sasl_initial(
        "SCRAM-SHA-256", b"y,," + CLIENT_FIRST_BARE
    )
    client_final, _ = reference_scram(PASSWORD.encode(), b"y,,")
    assert feed(machine, sasl_continue()) == [frame(b"p", client_final)]


def test_prefer_without_tls_sends_n():
    machine = handshake(secure_transport=True)  # e.g. a Unix socket
    assert first_message(machine, SASL_PLAIN) == sasl_initial(
        "SCRAM-SHA-256", b"n,," + CLIENT_FIRST_BARE
    )


def test_prefer_falls_back_to_plain_scram_when_binding_is_impossible(ed25519_cert):
    machine = handshake(tls_server_certificate=ed25519_cert)
    assert first_message(machine, SASL_BOTH) == sasl_initial(
        "SCRAM-SHA-256", b"n,," + CLIENT_FIRST_BARE
    )


def test_prefer_refuses_plus_only_when_binding_is_impossible(ed25519_cert):
    machine = handshake(tls_server_certificate=ed25519_cert)
    with pytest.raises(OperationalError, match="only SCRAM-SHA-256-PLUS"):
        machine.handle(*SASL_PLUS_ONLY)


@pytest.mark.parametrize("offered", [SASL_BOTH, SASL_PLAIN], ids=["both", "plain"])
def test_disable_uses_plain_scram_with_n(rsa_cert, offered):
    machine = handshake(tls_server_certificate=rsa_cert, channel_binding="disable")
    assert first_message(machine, offered) == sasl_initial(
        "SCRAM-SHA-256", b"n,," + CLIENT_FIRST_BARE
    )


def test_disable_refuses_plus_only(rsa_cert):
    machine = handshake(tls_server_certificate=rsa_cert, channel_binding="disable")
    with pytest.raises(OperationalError, match="channel binding is disabled"):
        machine.handle(*SASL_PLUS_ONLY)


def test_disable_accepts_trust():
    machine = handshake(channel_binding="disable")
    feed(machine, AUTH_OK)
    finish(machine)


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (AUTH_OK, "authenticated the client without it"),
        (CLEARTEXT, "channel binding required, but the server requested cleartext"),
        (MD5, "channel binding required, but the server requested MD5"),
        (SASL_PLAIN, "does not offer SCRAM-SHA-256-PLUS"),
    ],
    ids=["trust", "password", "md5", "plain-scram"],
)
def test_require_refuses_anything_but_scram_plus(rsa_cert, request_, reason):
    machine = handshake(tls_server_certificate=rsa_cert, channel_binding="require")
    with pytest.raises(OperationalError, match=reason):
        machine.handle(*request_)


def test_require_without_tls_is_refused():
    machine = handshake(channel_binding="require", secure_transport=True)
    with pytest.raises(OperationalError, match="does not use TLS"):
        machine.handle(*SASL_PLAIN)


def test_require_with_an_unbindable_certificate_is_refused(ed25519_cert):
    machine = handshake(tls_server_certificate=ed25519_cert, channel_binding="require")
    with pytest.raises(OperationalError, match="channel binding impossible"):
        machine.handle(*SASL_BOTH)


@pytest.mark.parametrize("mode", ["disable", "prefer", "require"])
@pytest.mark.parametrize("offered", [SASL_BOTH, SASL_PLUS_ONLY], ids=["both", "plus-only"])
def test_plus_offered_without_tls_is_refused(mode, offered):
    machine = handshake(channel_binding=mode)
    with pytest.raises(OperationalError, match="PLUS over a connection without TLS"):
        machine.handle(*offered)


def test_no_supported_sasl_mechanism():
    machine = handshake()
    with pytest.raises(OperationalError, match="OAUTHBEARER"):
        machine.handle(*sasl("OAUTHBEARER"))


# -- require_auth --------------------------------------------------------------------------

REQUESTS = {
    "trust": AUTH_OK,
    "password": CLEARTEXT,
    "md5": MD5,
    "scram": SASL_PLAIN,
    "gss": GSS,
    "sspi": SSPI,
}
ALLOWED, REFUSED, UNSUPPORTED = "allowed", "refused", "unsupported"


@pytest.mark.parametrize(
    ("spec", "request_", "outcome"),
    [
        ("password", "password", ALLOWED),
        ("password", "md5", REFUSED),
        ("password", "scram", REFUSED),
        ("password", "trust", REFUSED),
        ("md5", "md5", ALLOWED),
        ("md5", "password", REFUSED),
        ("scram-sha-256", "scram", ALLOWED),
        ("scram-sha-256", "password", REFUSED),
        ("scram-sha-256", "md5", REFUSED),
        ("scram-sha-256", "trust", REFUSED),
        ("none", "trust", ALLOWED),
        ("none", "password", REFUSED),
        ("none", "scram", REFUSED),
        ("password,md5", "password", ALLOWED),
        ("password,md5", "md5", ALLOWED),
        ("password, md5", "scram", REFUSED),
        ("scram-sha-256,none", "trust", ALLOWED),
        ("!password", "password", REFUSED),
        ("!password", "md5", ALLOWED),
        ("!password", "trust", ALLOWED),
        ("!password,!md5", "scram", ALLOWED),
        ("!password,!md5", "md5", REFUSED),
        ("!none", "trust", REFUSED),
        ("!none", "scram", ALLOWED),
        ("!scram-sha-256", "scram", REFUSED),
        ("gss", "gss", UNSUPPORTED),
        ("gss", "password", REFUSED),
        ("!gss", "gss", REFUSED),
        ("sspi", "sspi", UNSUPPORTED),
        ("!sspi", "sspi", REFUSED),
        ("password", "gss", REFUSED),
    ],
)
def test_require_auth(spec, request_, outcome):
    machine = handshake(require_auth=spec, secure_transport=True)
    message = REQUESTS[request_]
    if outcome == ALLOWED:
        (sent,) = feed(machine, message)
        assert (sent == b"") == (request_ == "trust")  # trust answers nothing, others a secret
        return
    with pytest.raises(OperationalError) as info:
        machine.handle(*message)
    text = str(info.value)
    if outcome == REFUSED:
        assert text.startswith(f'authentication method requirement "{spec}" failed')
    else:
        assert "pgmux does not support" in text


@pytest.mark.parametrize(
    ("spec", "allowed"),
    [
        (None, None),
        ("", None),
        ("md5", {"md5"}),
        ("password,scram-sha-256", {"password", "scram-sha-256"}),
        ("!none,!gss", {"password", "md5", "scram-sha-256", "sspi"}),
    ],
)
def test_parse_require_auth(spec, allowed):
    parsed = parse_require_auth(spec)
    assert parsed == (None if allowed is None else frozenset(allowed))


@pytest.mark.parametrize("spec", ["password,!md5", "kerberos", "md5,md5", "!", "password,"])
def test_bad_require_auth_is_interface_error(spec):
    with pytest.raises(InterfaceError):
        StartupHandshake(user=USER, database=None, password=PASSWORD, require_auth=spec)


# -- protocol negotiation ------------------------------------------------------------------


def test_no_negotiation_keeps_3_2_and_a_long_key():
    machine = handshake()
    feed(machine, AUTH_OK, key_data(1, b"x" * 32), READY)
    assert machine.protocol_version == frontend.PROTOCOL_3_2
    assert machine.backend_key == b"x" * 32


def test_downgrade_to_3_0():
    machine = handshake()
    feed(machine, negotiate(0), AUTH_OK, key_data(99, b"abcd"), READY)
    assert machine.protocol_version == frontend.PROTOCOL_3_0
    assert (machine.backend_pid, machine.backend_key) == (99, b"abcd")
    assert machine.unsupported_options == []


def test_long_key_after_downgrade_to_3_0_is_a_protocol_error():
    machine = handshake()
    feed(machine, negotiate(0), AUTH_OK)
    with pytest.raises(ProtocolError, match="3.0"):
        machine.handle(*key_data(1, b"k" * 32))


def test_unsupported_option_we_sent_is_recorded():
    machine = handshake(params={"_pq_.future_thing": "on"})
    feed(machine, negotiate(2, "_pq_.future_thing"), AUTH_OK)
    assert machine.unsupported_options == ["_pq_.future_thing"]
    assert machine.protocol_version == frontend.PROTOCOL_3_2


@pytest.mark.parametrize(
    ("options", "message", "reason"),
    [
        ({}, negotiate(3), "newer than the 3.2"),
        ({"protocol_version": frontend.PROTOCOL_3_0}, negotiate(2), "newer than the 3.0"),
        ({}, negotiate(1), "does not exist"),
        ({}, negotiate(0, "_pq_.never_sent"), "did not send"),
        ({}, negotiate(0, "application_name"), "did not send"),
        ({}, (V, b"\x00\x00"), "too short"),
    ],
)
def test_bad_negotiation_is_a_protocol_error(options, message, reason):
    machine = handshake(**options)
    with pytest.raises(ProtocolError, match=reason):
        machine.handle(*message)


def test_negotiation_twice_or_late_is_a_protocol_error():
    machine = handshake()
    feed(machine, negotiate(0))
    with pytest.raises(ProtocolError, match="twice"):
        machine.handle(*negotiate(0))
    machine = handshake()
    feed(machine, AUTH_OK)
    with pytest.raises(ProtocolError, match="unexpected message 'v'"):
        machine.handle(*negotiate(0))


# -- errors from the server ----------------------------------------------------------------


def test_error_response_during_startup():
    machine = handshake()
    with pytest.raises(OperationalError) as info:
        machine.handle(*error("3D000", 'database "appdb" does not exist'))
    exc = info.value
    assert exc.fields == {}  # pgmux's own failure, with the server's error as its cause
    assert 'database "appdb" does not exist' in str(exc) and "3D000" in str(exc)
    assert exc.sqlstate == "3D000"
    assert isinstance(exc.__cause__, DatabaseError)
    assert exc.__cause__.sqlstate == "3D000"
    assert exc.__cause__.severity == "FATAL"


def test_error_response_after_authentication():
    machine = handshake()
    feed(machine, AUTH_OK, parameter("a", "b"))
    with pytest.raises(OperationalError, match="53300") as info:
        machine.handle(*error("53300", "sorry, too many clients already"))
    assert type(info.value.__cause__).__name__ == "TooManyConnections"


# -- refusals of our own -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (GSS, "GSSAPI authentication, which pgmux does not support"),
        (SSPI, "SSPI authentication, which pgmux does not support"),
        (KERBEROS, "Kerberos V5 authentication, which pgmux does not support"),
        (auth(6), "SCM credential"),
        (auth(42), "request code 42"),
    ],
)
def test_unsupported_methods_are_refused(request_, reason):
    machine = handshake()
    with pytest.raises(OperationalError, match=reason) as info:
        machine.handle(*request_)
    assert not isinstance(info.value, ProtocolError)


def test_auth_ok_right_after_client_first_is_refused():
    machine = handshake()
    feed(machine, SASL_PLAIN)
    with pytest.raises(OperationalError, match="man-in-the-middle"):
        machine.handle(*AUTH_OK)


def test_auth_ok_before_sasl_final_is_refused():
    machine = handshake()
    feed(machine, SASL_PLAIN, sasl_continue())
    with pytest.raises(OperationalError, match="man-in-the-middle"):
        machine.handle(*AUTH_OK)


def nonce_message(nonce: str = SERVER_NONCE, iterations: int = ITERATIONS) -> bytes:
    salt = base64.b64encode(SALT).decode()
    return f"r={nonce},s={salt},i={iterations}".encode()


@pytest.mark.parametrize(
    ("options", "server_first", "reason"),
    [
        ({}, nonce_message(nonce="attacker-nonce"), "does not extend the client nonce"),
        ({}, nonce_message(iterations=0), "below 1"),
        ({}, nonce_message(iterations=1_000_001), "exceeds the cap of 1000000"),
        ({"max_scram_iterations": 4095}, nonce_message(), "exceeds the cap of 4095"),
        ({}, b"r=" + SERVER_NONCE.encode(), "must start with"),
        ({}, b"nonsense", "malformed"),
    ],
)
def test_bad_server_first_is_refused_before_the_proof(options, server_first, reason):
    machine = handshake(**options)
    feed(machine, SASL_PLAIN)
    with pytest.raises(OperationalError, match=reason):
        machine.handle(*sasl_continue(server_first))


def test_malformed_server_final_is_refused():
    machine = handshake()
    feed(machine, SASL_PLAIN, sasl_continue())
    with pytest.raises(OperationalError, match="malformed"):
        machine.handle(*sasl_final(b"junk"))


def test_max_scram_iterations_allows_a_higher_count():
    machine = handshake(max_scram_iterations=ITERATIONS)
    feed(machine, SASL_PLAIN)
    (sent,) = feed(machine, sasl_continue())
    assert sent.startswith(b"p")


# -- unexpected messages -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "message"),
    [
        ((), (ord("D"), b"\x00\x00")),
        ((), READY),
        ((), parameter("a", "b")),
        ((), key_data(1, b"abcd")),
        ((), sasl_continue()),
        ((), sasl_final(b"v=AAAA")),
        ((), auth(8)),  # GSS continue with no GSS under way
        ((), (R, b"\x00")),  # too short for its code
        ((), (ord("?"), b"")),
        ((AUTH_OK,), CLEARTEXT),
        ((AUTH_OK,), AUTH_OK),
        ((AUTH_OK,), (ord("T"), b"\x00\x00")),
        ((AUTH_OK, key_data(1, b"abcd")), key_data(1, b"abcd")),
        ((AUTH_OK, READY), READY),
        ((AUTH_OK, READY), parameter("a", "b")),
        ((SASL_PLAIN,), SASL_PLAIN),
        ((SASL_PLAIN,), sasl_final(b"v=AAAA")),
        ((SASL_PLAIN,), CLEARTEXT),
        ((SASL_PLAIN,), parameter("a", "b")),
        ((SASL_PLAIN, sasl_continue()), sasl_continue()),
    ],
)
def test_unexpected_messages_are_protocol_errors(before, message):
    machine = handshake(secure_transport=True)
    feed(machine, *before)
    with pytest.raises(ProtocolError):
        machine.handle(*message)


def test_cleartext_after_password_sent_is_a_protocol_error():
    machine = handshake(secure_transport=True)
    feed(machine, CLEARTEXT)
    with pytest.raises(ProtocolError):
        machine.handle(*CLEARTEXT)


# -- misuse --------------------------------------------------------------------------------


def test_handle_before_start_and_start_twice():
    machine = StartupHandshake(user=USER, database=None, password=None)
    with pytest.raises(InterfaceError):
        machine.handle(*AUTH_OK)
    machine.start()
    with pytest.raises(InterfaceError):
        machine.start()


@pytest.mark.parametrize(
    "options",
    [
        {"user": ""},
        {"channel_binding": "maybe"},
        {"protocol_version": (3 << 16) | 1},
        {"protocol_version": 2 << 16},
        {"params": {"user": "mallory"}},
        {"params": {"database": "other"}},
        {"max_scram_iterations": 0},
    ],
)
def test_bad_options_are_interface_errors(options):
    settings = {"user": USER, "database": None, "password": None} | options
    with pytest.raises(InterfaceError):
        StartupHandshake(**settings)


def test_bad_injected_nonce_is_interface_error():
    machine = handshake(scram_nonce=lambda: "with,comma")
    with pytest.raises(InterfaceError):
        machine.handle(*SASL_PLAIN)


# -- the password never shows ---------------------------------------------------------------


def exception_texts(exc: BaseException) -> list[str]:
    texts = []
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        texts += [str(exc), repr(exc), repr(exc.args), repr(getattr(exc, "__dict__", {}))]
        exc = exc.__cause__ or exc.__context__
    return texts


SCENARIOS = {
    "cleartext-insecure": ({}, [CLEARTEXT]),
    "md5-insecure": ({}, [MD5]),
    "require-auth": ({"require_auth": "md5"}, [CLEARTEXT]),
    "binding-required": ({"channel_binding": "require"}, [SASL_PLAIN]),
    "gss": ({}, [GSS]),
    "bad-nonce": ({}, [SASL_PLAIN, sasl_continue(nonce_message(nonce="x"))]),
    "bad-signature": ({}, [SASL_PLAIN, sasl_continue(), sasl_final(b"v=AAAA")]),
    "server-error": ({}, [SASL_PLAIN, sasl_continue(), error("28P01", "auth failed")]),
    "mitm": ({}, [SASL_PLAIN, sasl_continue(), AUTH_OK]),
    "protocol": ({"secure_transport": True}, [CLEARTEXT, CLEARTEXT]),
    "unencodable": ({"password": PASSWORD + "\ud800", "secure_transport": True}, [CLEARTEXT]),
    "unencodable-md5": ({"password": PASSWORD + "\ud800", "secure_transport": True}, [MD5]),
    "unencodable-scram": ({"password": PASSWORD + "\ud800"}, [SASL_PLAIN]),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_no_exception_or_repr_contains_the_password(scenario):
    options, messages = SCENARIOS[scenario]
    machine = handshake(**options)
    texts = [repr(machine), str(machine), repr(vars(machine))]
    with pytest.raises((OperationalError, InterfaceError)) as info:
        feed(machine, *messages)
    texts += exception_texts(info.value)
    texts += [repr(machine), str(machine), repr(vars(machine)), repr(machine._scram)]
    assert all(PASSWORD not in text for text in texts), scenario


def test_successful_handshake_repr_has_no_password():
    client_final, server_final = reference_scram(PASSWORD.encode(), b"n,,")
    machine = handshake()
    feed(machine, SASL_PLAIN, sasl_continue(), sasl_final(server_final), AUTH_OK)
    finish(machine)
    for text in (repr(machine), str(machine), repr(vars(machine)), repr(machine._scram)):
        assert PASSWORD not in text
    assert "alice" in repr(machine) and "scram-sha-256" in repr(machine)
