"""tls-server-end-point channel binding data (RFC 5929) for SCRAM-SHA-256-PLUS."""

from __future__ import annotations

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import SignatureAlgorithmOID

from pgmux.errors import OperationalError

TLS_SERVER_END_POINT = "tls-server-end-point"

# RFC 5929 section 4.1: a certificate signed with MD5 or SHA-1 is hashed with SHA-256.
_UPGRADED_TO_SHA256 = frozenset({"md5", "sha1"})

# Signature algorithms without a separate hash function, named for the error message.
_HASHLESS_NAMES = {
    SignatureAlgorithmOID.ED25519: "Ed25519",
    SignatureAlgorithmOID.ED448: "Ed448",
}


def tls_server_end_point_hash(der: bytes) -> bytes:
    """The hash of the server certificate ``der`` that tls-server-end-point binds to.

    The hash function is the one of the certificate's signature algorithm, with MD5
    and SHA-1 replaced by SHA-256. Raises ``OperationalError`` when the certificate
    cannot be read or its signature algorithm has no hash (Ed25519, Ed448): channel
    binding is then impossible.
    """
    algorithm = _binding_hash_algorithm(_load(der))
    digest = hashes.Hash(algorithm)
    digest.update(der)
    return digest.finalize()


def _load(der: bytes) -> x509.Certificate:
    try:
        return x509.load_der_x509_certificate(der)
    except ValueError:
        raise OperationalError(
            "channel binding impossible: the server certificate is not valid DER"
        ) from None


def _binding_hash_algorithm(cert: x509.Certificate) -> hashes.HashAlgorithm:
    oid = cert.signature_algorithm_oid
    try:
        algorithm = cert.signature_hash_algorithm
    except UnsupportedAlgorithm:
        raise OperationalError(
            f"channel binding impossible: unknown signature algorithm {oid.dotted_string} "
            "in the server certificate"
        ) from None
    if algorithm is None:
        name = _HASHLESS_NAMES.get(oid, oid.dotted_string)
        raise OperationalError(
            f"channel binding impossible: the server certificate is signed with {name}, "
            "which has no hash function for tls-server-end-point"
        )
    if algorithm.name in _UPGRADED_TO_SHA256:
        return hashes.SHA256()
    return algorithm
