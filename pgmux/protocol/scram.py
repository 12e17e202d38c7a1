"""SCRAM-SHA-256(-PLUS) client side (RFC 5802, RFC 7677) with PostgreSQL's SASLprep."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
import stringprep
import unicodedata
from collections.abc import Callable

from pgmux.errors import InterfaceError, OperationalError

MECHANISM = "SCRAM-SHA-256"
MECHANISM_PLUS = "SCRAM-SHA-256-PLUS"

# Cap on the server's iteration count. PBKDF2 runs on the caller's thread (with gevent: the
# hub), so a hostile or misconfigured server could stall it: 1,000,000 iterations cost about
# 0.3 s here. PostgreSQL's default is 4096; OWASP's 2023 advice for PBKDF2-SHA256 is 600,000.
DEFAULT_MAX_ITERATIONS = 1_000_000

# PBKDF2 as hashlib.pbkdf2_hmac(name, password, salt, iterations); injectable so the io
# layer can run a costly derivation off the event loop.
KeyDerivation = Callable[[str, bytes, bytes, int], bytes]

# gs2-cbind-flag -> GS2 header (no authzid; PostgreSQL uses the startup user).
GS2_HEADERS = {
    "n": b"n,,",  # the client does not support channel binding
    "y": b"y,,",  # the client supports it but the server did not offer it
    "p": b"p=tls-server-end-point,,",  # the client binds to the server certificate
}

_NONCE_BYTES = 18
_PRINTABLE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")  # RFC 5802 "printable": no comma
_ITERATIONS = re.compile(r"-?[0-9]{1,12}")

# SASLprep (RFC 4013) as PostgreSQL's pg_saslprep applies it.
_MAPS_TO_SPACE = stringprep.in_table_c12
_MAPS_TO_NOTHING = stringprep.in_table_b1
_PROHIBITED = (
    stringprep.in_table_c12,
    stringprep.in_table_c21,
    stringprep.in_table_c22,
    stringprep.in_table_c3,
    stringprep.in_table_c4,
    stringprep.in_table_c5,
    stringprep.in_table_c6,
    stringprep.in_table_c7,
    stringprep.in_table_c8,
    stringprep.in_table_c9,
    stringprep.in_table_a1,  # unassigned code points: PostgreSQL refuses them too
)


def saslprep(password: str) -> bytes:
    """The password bytes SCRAM hashes, exactly as PostgreSQL prepares them.

    ASCII passes unchanged. Otherwise RFC 4013 (map, NFKC, prohibit, bidi); a password
    that SASLprep rejects (or that maps to nothing) is used as its raw UTF-8 bytes, which
    is what the server does when it stores the verifier.
    """
    raw = password_bytes(password)
    if password.isascii():
        return raw
    mapped = "".join(
        " " if _MAPS_TO_SPACE(ch) else ch for ch in password if not _MAPS_TO_NOTHING(ch)
    )
    if not mapped or not _sasl_allowed(mapped):
        return raw
    return unicodedata.normalize("NFKC", mapped).encode()


def _sasl_allowed(text: str) -> bool:
    # pg_saslprep checks the mapped string (before normalisation); so do we.
    if any(check(ch) for ch in text for check in _PROHIBITED):
        return False
    if not any(stringprep.in_table_d1(ch) for ch in text):
        return True
    right_to_left_ends = stringprep.in_table_d1(text[0]) and stringprep.in_table_d1(text[-1])
    return right_to_left_ends and not any(stringprep.in_table_d2(ch) for ch in text)


def password_bytes(password: str) -> bytes:
    """The password as UTF-8, refused without quoting it if it cannot be encoded."""
    try:
        return password.encode()
    except UnicodeEncodeError:
        pass  # raise outside the handler: its args carry the password, keep it off __context__
    raise InterfaceError("the password cannot be encoded as UTF-8")


def _saslname(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.digest(key, data, "sha256")


def _refuse(reason: str) -> OperationalError:
    return OperationalError(f"SCRAM authentication refused: {reason}")


def new_nonce() -> str:
    """A fresh client nonce: 18 random bytes in base64 (printable, no comma)."""
    return base64.b64encode(secrets.token_bytes(_NONCE_BYTES)).decode()


class ScramClient:
    """One SCRAM-SHA-256 exchange, client side; sans-IO.

    Call ``client_first()``, then ``client_final(server_first)``, then
    ``verify_server_final(server_final)``; ``finished`` is True only once the
    server has proved it knows the password. Server messages that are malformed or
    unsafe raise ``OperationalError``; calls out of order raise ``InterfaceError``.

    ``cbind_flag`` is the GS2 channel-binding flag: ``"n"``, ``"y"`` or ``"p"``
    (tls-server-end-point, with ``cbind_data`` the certificate hash).
    """

    __slots__ = (
        "_password",
        "_username",
        "_cbind_flag",
        "_cbind_data",
        "_nonce",
        "_max_iterations",
        "_first_bare",
        "_server_signature",
        "_derive_key",
        "finished",
    )

    def __init__(
        self,
        password: str,
        *,
        username: str = "",
        cbind_flag: str = "n",
        cbind_data: bytes = b"",
        nonce: str | None = None,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
        derive_key: KeyDerivation | None = None,
    ) -> None:
        if cbind_flag not in GS2_HEADERS:
            raise InterfaceError(f"unknown GS2 channel-binding flag {cbind_flag!r}")
        if (cbind_flag == "p") != bool(cbind_data):
            raise InterfaceError("channel binding data goes with the 'p' flag, and only there")
        if nonce is None:
            nonce = new_nonce()
        elif not _PRINTABLE.fullmatch(nonce):
            raise InterfaceError("a SCRAM nonce must be printable ASCII without commas")
        self._password: bytes | None = saslprep(password)
        self._username = username
        self._cbind_flag = cbind_flag
        self._cbind_data = cbind_data
        self._nonce = nonce
        self._max_iterations = max_iterations
        self._first_bare: bytes | None = None
        self._server_signature: bytes | None = None
        self._derive_key = derive_key or hashlib.pbkdf2_hmac
        self.finished = False

    @property
    def mechanism(self) -> str:
        return MECHANISM_PLUS if self._cbind_flag == "p" else MECHANISM

    def __repr__(self) -> str:
        return f"<ScramClient {self.mechanism} flag={self._cbind_flag} finished={self.finished}>"

    def client_first(self) -> bytes:
        """client-first-message: GS2 header, user name and our nonce."""
        if self._first_bare is not None:
            raise InterfaceError("client_first() was already called")
        self._first_bare = f"n={_saslname(self._username)},r={self._nonce}".encode()
        return GS2_HEADERS[self._cbind_flag] + self._first_bare

    def client_final(self, server_first: bytes) -> bytes:
        """client-final-message with the proof, from the server-first-message."""
        if self._first_bare is None or self._password is None:
            raise InterfaceError("client_final() comes once, after client_first()")
        nonce, salt, iterations = self._parse_server_first(server_first)
        channel = base64.b64encode(GS2_HEADERS[self._cbind_flag] + self._cbind_data)
        without_proof = b"c=" + channel + b",r=" + nonce.encode()
        auth_message = b",".join((self._first_bare, server_first, without_proof))
        salted = self._derive_key("sha256", self._password, salt, iterations)
        self._password = None  # the exchange no longer needs it
        client_key = _hmac(salted, b"Client Key")
        signature = _hmac(hashlib.sha256(client_key).digest(), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = _hmac(_hmac(salted, b"Server Key"), auth_message)
        return without_proof + b",p=" + base64.b64encode(proof)

    def verify_server_final(self, server_final: bytes) -> None:
        """Check the server signature (constant time); raises unless it proves the password."""
        expected = self._server_signature
        if expected is None or self.finished:
            raise InterfaceError("verify_server_final() comes once, after client_final()")
        attributes = _attributes(server_final, "server-final-message")
        key, value = attributes[0]
        if key == "e":
            raise _refuse(f"the server reported error {value!r}")
        if key != "v":
            raise _refuse("server-final-message has neither a verifier nor an error")
        if not hmac.compare_digest(_b64decode(value, "server signature"), expected):
            raise _refuse(
                "the server signature does not match: the server does not know "
                "the password (possible impostor)"
            )
        self._server_signature = None
        self.finished = True

    def _parse_server_first(self, message: bytes) -> tuple[str, bytes, int]:
        attributes = _attributes(message, "server-first-message")
        if attributes[0][0] == "m":
            raise _refuse("the server requires an unsupported mandatory extension")
        if [key for key, _ in attributes[:3]] != ["r", "s", "i"]:
            raise _refuse("server-first-message must start with r=, s=, i=")
        (_, nonce), (_, salt), (_, iterations) = attributes[:3]
        self._check_nonce(nonce)
        return nonce, self._check_salt(salt), self._check_iterations(iterations)

    def _check_nonce(self, nonce: str) -> None:
        if not _PRINTABLE.fullmatch(nonce):
            raise _refuse("the server nonce has characters outside the printable set")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise _refuse("the server nonce does not extend the client nonce")

    @staticmethod
    def _check_salt(text: str) -> bytes:
        salt = _b64decode(text, "salt")
        if not salt:
            raise _refuse("the server sent an empty salt")
        return salt

    def _check_iterations(self, text: str) -> int:
        if not _ITERATIONS.fullmatch(text):
            raise _refuse(f"iteration count {text[:20]!r} is not a number")
        iterations = int(text)
        if iterations < 1:
            raise _refuse(f"iteration count {iterations} is below 1")
        if iterations > self._max_iterations:
            raise _refuse(
                f"iteration count {iterations} exceeds the cap of "
                f"{self._max_iterations} (max_scram_iterations)"
            )
        return iterations


def _attributes(message: bytes, what: str) -> list[tuple[str, str]]:
    """``a=value,b=value`` → [(a, value), ...]; one-letter names, values without commas."""
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise _refuse(f"{what} is not valid UTF-8") from None
    pairs = []
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=" or not ("a" <= part[0] <= "z" or "A" <= part[0] <= "Z"):
            raise _refuse(f"{what} is malformed")
        pairs.append((part[0], part[2:]))
    return pairs


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _refuse(f"the {what} is not valid base64") from None
