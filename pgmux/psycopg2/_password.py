"""``encrypt_password``: a password as PostgreSQL stores it, computed client-side."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from typing import Any

_ITERATIONS = 4096


def encrypt(password: str, user: str, scope: Any = None, algorithm: str | None = None) -> str:
    """``md5`` or ``scram-sha-256`` (the default: the server's password_encryption when a
    connection or cursor is given)."""
    if not isinstance(password, str) or not isinstance(user, str):
        raise TypeError("password and user must be str")
    if algorithm is None and scope is not None:
        conn = getattr(scope, "connection", scope)
        cur = conn.cursor()
        cur.execute("SHOW password_encryption")
        algorithm = cur.fetchone()[0]
        cur.close()
    if algorithm is not None and not isinstance(algorithm, str):
        raise TypeError("algorithm must be a str")
    algorithm = algorithm or "scram-sha-256"
    if algorithm in ("md5", "on"):
        return "md5" + hashlib.md5((password + user).encode()).hexdigest()  # noqa: S324
    if algorithm != "scram-sha-256":
        from pgmux.psycopg2._exceptions import ProgrammingError

        raise ProgrammingError(f"password encryption algorithm not supported: {algorithm}")
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, _ITERATIONS)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored = hashlib.sha256(client_key).digest()
    server = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    b64 = base64.b64encode
    return (f"SCRAM-SHA-256${_ITERATIONS}:{b64(salt).decode()}"
            f"${b64(stored).decode()}:{b64(server).decode()}")
