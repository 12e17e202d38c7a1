"""Throwaway X.509 material for tests: CAs, server and client certificates (uses `cryptography`)."""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Callable, Iterable, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey

SERVER_NAMES = ("localhost", "127.0.0.1", "::1")
WRONG_HOST = "wrong-host.invalid"

_KEY_MAKERS: dict[str, Callable[[], PrivateKey]] = {
    "rsa": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
    "ec256": lambda: ec.generate_private_key(ec.SECP256R1()),
    "ec384": lambda: ec.generate_private_key(ec.SECP384R1()),
}
_HASHES: dict[str, Callable[[], hashes.HashAlgorithm]] = {"sha256": hashes.SHA256, "sha384": hashes.SHA384, "sha512": hashes.SHA512}
_DAY = datetime.timedelta(days=1)


def make_key(key_type: str = "rsa") -> PrivateKey:
    """A new private key: "rsa" (2048 bits), "ec256" (P-256) or "ec384" (P-384)."""
    try:
        return _KEY_MAKERS[key_type]()
    except KeyError:
        raise ValueError(f"unknown key_type {key_type!r}; choose from {sorted(_KEY_MAKERS)}")


def _hash(name: str) -> hashes.HashAlgorithm:
    try:
        return _HASHES[name]()
    except KeyError:
        raise ValueError(f"unknown hash {name!r}; choose from {sorted(_HASHES)}")


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _general_name(value: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(value))
    except ValueError:
        return x509.DNSName(value)


def _validity(expired: bool) -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.timezone.utc)
    if expired:
        return now - 30 * _DAY, now - _DAY
    return now - _DAY, now + 365 * _DAY


def _builder(subject: x509.Name, issuer: x509.Name, key: PrivateKey, expired: bool):
    not_before, not_after = _validity(expired)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
    )


def _key_usage(*, ca: bool, rsa_key: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not ca,
        content_commitment=False,
        key_encipherment=rsa_key and not ca,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def make_ca(
    name: str, *, key_type: str = "rsa", hash: str = "sha256", key: PrivateKey | None = None
) -> tuple[x509.Certificate, PrivateKey]:
    """A self-signed CA certificate named `name` and its key."""
    key = key or make_key(key_type)
    cert = (
        _builder(_name(name), _name(name), key, expired=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(ca=True, rsa_key=False), critical=True)
        .sign(key, _hash(hash))
    )
    return cert, key


def make_cert(
    ca_cert: x509.Certificate,
    ca_key: PrivateKey,
    cn: str,
    sans: Iterable[str] = (),
    *,
    expired: bool = False,
    key_type: str = "rsa",
    hash: str = "sha256",
    key: PrivateKey | None = None,
    client: bool = False,
) -> tuple[x509.Certificate, PrivateKey]:
    """A leaf certificate for `cn` signed by the CA; `client=True` for TLS client auth.

    `sans` are DNS names or IP addresses. `key` reuses an existing subject key; the
    signature algorithm is the CA key's with the given `hash`.
    """
    key = key or make_key(key_type)
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    builder = (
        _builder(_name(cn), ca_cert.subject, key, expired)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False, rsa_key=isinstance(key, rsa.RSAPrivateKey)), True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
    )
    names = [_general_name(value) for value in sans]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, _hash(hash)), key


def write_pem(path: str | os.PathLike, obj: x509.Certificate | PrivateKey) -> str:
    """Write a certificate (mode 0644) or an unencrypted PKCS#8 key (mode 0600) as PEM."""
    if isinstance(obj, x509.Certificate):
        data, mode = obj.public_bytes(serialization.Encoding.PEM), 0o644
    else:
        data = obj.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        mode = 0o600
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    return os.fspath(path)


def write_tls_bundle(
    directory: str | os.PathLike,
    *,
    key_type: str = "rsa",
    hash: str = "sha256",
    clients: Sequence[str] = ("cert_user",),
    server_names: Sequence[str] = SERVER_NAMES,
) -> dict[str, str]:
    """Write a test PKI into `directory`; return {file name: path}.

    Files: ca.crt/.key; server.crt/.key (CN and SANs `server_names`); wronghost.crt and
    expired.crt (both for server.key, so a server can switch to them); wrong-ca.crt/.key (a
    CA nobody uses); per client role: client-<role>.crt/.key signed by the CA and
    client-<role>-wrongca.crt (same key) signed by the wrong CA. Five keys per bundle.
    """
    os.makedirs(directory, exist_ok=True)
    ca, ca_key = make_ca("pgmux test CA", key_type=key_type, hash=hash)
    wrong_ca, wrong_ca_key = make_ca("pgmux wrong CA", key_type=key_type, hash=hash)
    server_key, client_key = make_key(key_type), make_key(key_type)
    objects: dict[str, x509.Certificate | PrivateKey] = {
        "ca.crt": ca,
        "ca.key": ca_key,
        "wrong-ca.crt": wrong_ca,
        "wrong-ca.key": wrong_ca_key,
        "server.key": server_key,
        "server.crt": make_cert(
            ca, ca_key, server_names[0], server_names, key=server_key, hash=hash
        )[0],
        "wronghost.crt": make_cert(ca, ca_key, WRONG_HOST, [WRONG_HOST], key=server_key, hash=hash)[
            0
        ],
        "expired.crt": make_cert(
            ca, ca_key, server_names[0], server_names, key=server_key, hash=hash, expired=True
        )[0],
    }
    for role in clients:
        objects[f"client-{role}.key"] = client_key
        objects[f"client-{role}.crt"] = make_cert(
            ca, ca_key, role, key=client_key, hash=hash, client=True
        )[0]
        objects[f"client-{role}-wrongca.crt"] = make_cert(
            wrong_ca, wrong_ca_key, role, key=client_key, hash=hash, client=True
        )[0]
    return {name: write_pem(os.path.join(directory, name), obj) for name, obj in objects.items()}
