"""Sans-IO startup and authentication: from StartupMessage to the first ReadyForQuery.

Theory of operation: the io layer sends ``start()``, then feeds every backend
message to ``handle()`` and sends back whatever it returns, until ``done``. The
machine moves through a few states; a table says which message types each state
accepts, another which authentication requests. Anything else is a
``ProtocolError``. Every policy check (require_auth, channel_binding, the
cleartext guard, SCRAM's proofs) runs before a secret leaves, and a refusal is an
``OperationalError`` that names the reason and never the password.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from types import MappingProxyType

from pgmux.errors import (
    DatabaseError,
    Error,
    InterfaceError,
    OperationalError,
    ProtocolError,
)
from pgmux.protocol import backend as be
from pgmux.protocol import frontend
from pgmux.protocol.channel_binding import tls_server_end_point_hash
from pgmux.protocol.scram import (
    DEFAULT_MAX_ITERATIONS,
    MECHANISM,
    MECHANISM_PLUS,
    KeyDerivation,
    ScramClient,
    password_bytes,
)

__all__ = [
    "PROTOCOLS",
    "TERMINATE",
    "StartupHandshake",
    "cancel_request",
    "ssl_request",
    "parse_require_auth",
    "md5_password_digest",
    "DEFAULT_MAX_ITERATIONS",
]

_NO_PARAMS: Mapping[str, str] = MappingProxyType({})

REQUIRE_AUTH_METHODS = frozenset({"password", "md5", "scram-sha-256", "gss", "sspi", "none"})
CHANNEL_BINDING_MODES = frozenset({"disable", "prefer", "require"})
PROTOCOL_VERSIONS = {0: frontend.PROTOCOL_3_0, 2: frontend.PROTOCOL_3_2}  # minor -> version
PROTOCOLS = {"3.0": frontend.PROTOCOL_3_0, "3.2": frontend.PROTOCOL_3_2}  # name -> version

# The rest of a connection's life outside requests (those come from the engine): asking
# for TLS before startup, cancelling from another connection, and the goodbye.
TERMINATE = frontend.TERMINATE
ssl_request = frontend.ssl_request
cancel_request = frontend.cancel_request
_PROTOCOL_OPTION_PREFIX = "_pq_."

# States.
NEW = "new"
AUTHENTICATING = "authenticating"  # waiting for the server's authentication request
PASSWORD_SENT = "password sent"  # cleartext or MD5 answered, waiting for AuthenticationOk
SASL_STARTED = "SASL started"  # client-first sent, waiting for SASLContinue
SASL_RESPONDED = "SASL responded"  # client-final sent, waiting for SASLFinal
SASL_VERIFIED = "SASL verified"  # server signature checked, waiting for AuthenticationOk
SETTING_UP = "setting up"  # authenticated: ParameterStatus, BackendKeyData, ReadyForQuery
DONE = "done"
FAILED = "failed"

_AUTH_STATES = (AUTHENTICATING, PASSWORD_SENT, SASL_STARTED, SASL_RESPONDED, SASL_VERIFIED)
_AUTH_MESSAGES = frozenset({be.AUTHENTICATION, be.ERROR_RESPONSE, be.NOTICE_RESPONSE})

# State -> the message types it accepts.
_ACCEPTED: dict[str, frozenset[int]] = {
    AUTHENTICATING: _AUTH_MESSAGES | {be.NEGOTIATE_PROTOCOL_VERSION},
    **{state: _AUTH_MESSAGES for state in _AUTH_STATES[1:]},
    SETTING_UP: frozenset(
        {be.PARAMETER_STATUS, be.BACKEND_KEY_DATA, be.NOTICE_RESPONSE, be.ERROR_RESPONSE,
         be.READY_FOR_QUERY}
    ),
}  # fmt: skip

# Message type -> handler method.
_MESSAGE_HANDLERS = {
    be.AUTHENTICATION: "_on_authentication",
    be.ERROR_RESPONSE: "_on_error",
    be.NOTICE_RESPONSE: "_on_notice",
    be.NEGOTIATE_PROTOCOL_VERSION: "_on_negotiate_protocol_version",
    be.PARAMETER_STATUS: "_on_parameter_status",
    be.BACKEND_KEY_DATA: "_on_backend_key_data",
    be.READY_FOR_QUERY: "_on_ready_for_query",
}

# (state, authentication request code) -> handler method.
_AUTH_STEPS = {
    (AUTHENTICATING, be.AUTH_OK): "_auth_ok",
    (AUTHENTICATING, be.AUTH_CLEARTEXT): "_auth_cleartext",
    (AUTHENTICATING, be.AUTH_MD5): "_auth_md5",
    (AUTHENTICATING, be.AUTH_SASL): "_auth_sasl",
    (PASSWORD_SENT, be.AUTH_OK): "_auth_ok",
    (SASL_STARTED, be.AUTH_SASL_CONTINUE): "_auth_sasl_continue",
    (SASL_STARTED, be.AUTH_OK): "_auth_ok",  # refused: SCRAM unfinished
    (SASL_RESPONDED, be.AUTH_SASL_FINAL): "_auth_sasl_final",
    (SASL_RESPONDED, be.AUTH_OK): "_auth_ok",  # refused: SCRAM unfinished
    (SASL_VERIFIED, be.AUTH_OK): "_auth_ok",
}

# Requests that only continue an exchange already under way.
_CONTINUATIONS = frozenset({be.AUTH_GSS_CONTINUE, be.AUTH_SASL_CONTINUE, be.AUTH_SASL_FINAL})

# Authentication requests pgmux cannot answer: code -> (require_auth name, description).
_UNSUPPORTED_AUTH: dict[int, tuple[str | None, str]] = {
    be.AUTH_KERBEROS_V5: (None, "Kerberos V5"),
    4: (None, "crypt"),
    6: (None, "SCM credential"),
    be.AUTH_GSS: ("gss", "GSSAPI"),
    be.AUTH_SSPI: ("sspi", "SSPI"),
}


def parse_require_auth(spec: str | None) -> frozenset[str] | None:
    """libpq's ``require_auth``: the set of allowed methods, or None for "anything".

    A comma list of methods, or of methods each negated with ``!`` (allow all but
    those); mixing the two, repeating a method or naming an unknown one is an
    ``InterfaceError``.
    """
    if not spec:
        return None
    names = [name.strip() for name in spec.split(",")]
    negated = {name.startswith("!") for name in names}
    if len(negated) > 1:
        raise InterfaceError("require_auth cannot mix negated (!) and plain methods")
    bare = [name[1:] if name.startswith("!") else name for name in names]
    for name in bare:
        if name not in REQUIRE_AUTH_METHODS:
            raise InterfaceError(f"require_auth: unknown authentication method {name!r}")
    if len(set(bare)) != len(bare):
        raise InterfaceError("require_auth names a method more than once")
    return REQUIRE_AUTH_METHODS - set(bare) if negated == {True} else frozenset(bare)


def md5_password_digest(user: str, password: str, salt: bytes) -> bytes:
    """PostgreSQL's MD5 answer: ``"md5" + md5(md5(password + user).hex + salt).hex``."""
    inner = hashlib.md5(password_bytes(password) + user.encode()).hexdigest().encode()
    return b"md5" + hashlib.md5(inner + salt).hexdigest().encode()


def _refuse(reason: str) -> OperationalError:
    error = OperationalError(reason)
    error.sqlstate = None  # only server errors carry one
    return error


class _Secret:
    """Keeps the password out of ``vars()``/``repr`` dumps of the handshake."""

    __slots__ = ("value",)

    def __init__(self, value: str | None) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "<secret>" if self.value else "<none>"


class StartupHandshake:
    """The startup/authentication state machine of one connection (sans-IO).

    Results, valid once ``done``: ``auth_method`` ("trust", "password", "md5",
    "scram-sha-256" or "scram-sha-256-plus"), ``protocol_version`` (as negotiated),
    ``backend_pid``/``backend_key`` (0/b"" if the server sent no BackendKeyData),
    ``parameters``, ``transaction_status``, ``notices`` and ``unsupported_options``
    (``_pq_.`` options we sent that the server does not know).

    ``tls_server_certificate`` is the DER server certificate when the transport is
    TLS; it implies ``secure_transport``. ``max_scram_iterations`` caps the SCRAM
    iteration count a server may demand (default 1,000,000, about 0.3 s of PBKDF2;
    PostgreSQL's default is 4096).
    """

    def __init__(
        self,
        *,
        user: str,
        database: str | None,
        password: str | None,
        params: Mapping[str, str] = _NO_PARAMS,
        protocol_version: int = frontend.PROTOCOL_3_2,
        require_auth: str | None = None,
        channel_binding: str = "prefer",
        tls_server_certificate: bytes | None = None,
        secure_transport: bool = False,
        allow_cleartext_over_insecure: bool = False,
        min_protocol_version: int = frontend.PROTOCOL_3_0,
        max_scram_iterations: int = DEFAULT_MAX_ITERATIONS,
        scram_nonce: Callable[[], str] | None = None,
        scram_key_derivation: KeyDerivation | None = None,
    ) -> None:
        _check_options(user, params, protocol_version, channel_binding, max_scram_iterations)
        self.user = user
        self.database = database
        self._password = _Secret(password)
        self._startup_params = _startup_params(user, database, params)
        self._protocol_options = {k for k in params if k.startswith(_PROTOCOL_OPTION_PREFIX)}
        self._requested_version = protocol_version
        self._min_version = min_protocol_version
        self._require_auth = require_auth
        self._allowed = parse_require_auth(require_auth)
        self._channel_binding = channel_binding
        self._certificate = tls_server_certificate
        self._secure = secure_transport or tls_server_certificate is not None
        self._allow_cleartext = allow_cleartext_over_insecure
        self._max_iterations = max_scram_iterations
        self._scram_nonce = scram_nonce
        self._derive_key = scram_key_derivation
        self._scram: ScramClient | None = None
        self._negotiated = False
        self._state = NEW
        self.done = False
        self.auth_method: str | None = None
        self.protocol_version = protocol_version
        self.backend_pid = 0
        self.backend_key = b""
        self.parameters: dict[str, str] = {}
        self.transaction_status: str | None = None
        self.notices: list[dict[str, str]] = []
        self.unsupported_options: list[str] = []

    def __repr__(self) -> str:
        minor = self.protocol_version & 0xFFFF
        return (
            f"<StartupHandshake user={self.user!r} database={self.database!r} "
            f"state={self._state!r} auth_method={self.auth_method!r} protocol=3.{minor}>"
        )

    @property
    def state(self) -> str:
        return self._state

    # -- driving ----------------------------------------------------------------------

    def start(self) -> bytes:
        """The StartupMessage to send first."""
        if self._state != NEW:
            raise InterfaceError("start() was already called")
        self._state = AUTHENTICATING
        return frontend.startup(self._startup_params, self._requested_version)

    def handle(self, kind: int, payload: bytes) -> bytes:
        """Feed one backend message; returns the bytes to send back (b"" for none)."""
        if self._state == NEW:
            raise InterfaceError("call start() before handle()")
        if self._state == FAILED:
            raise InterfaceError("the startup handshake has already failed")
        try:
            if kind not in _ACCEPTED.get(self._state, ()):
                raise ProtocolError(f"unexpected {_describe(kind)} during startup ({self._state})")
            return getattr(self, _MESSAGE_HANDLERS[kind])(payload)
        except Error:
            self._state = FAILED
            raise

    # -- messages ---------------------------------------------------------------------

    def _on_error(self, payload: bytes) -> bytes:
        cause = DatabaseError.from_fields(be.parse_fields(payload))
        error = OperationalError(str(cause))
        error.sqlstate = cause.sqlstate
        raise error from cause

    def _on_notice(self, payload: bytes) -> bytes:
        self.notices.append(be.parse_fields(payload))
        return b""

    def _on_negotiate_protocol_version(self, payload: bytes) -> bytes:
        if self._negotiated:
            raise ProtocolError("NegotiateProtocolVersion received twice")
        self._negotiated = True
        minor, options = be.parse_negotiate_protocol_version(payload)
        requested = self._requested_version & 0xFFFF
        if minor > requested:
            raise ProtocolError(
                f"server chose protocol 3.{minor}, newer than the 3.{requested} we asked for"
            )
        if minor not in PROTOCOL_VERSIONS:
            raise ProtocolError(f"server chose protocol 3.{minor}, which does not exist")
        for option in options:
            if option not in self._protocol_options:
                raise ProtocolError(f"server reported option {option!r} that we did not send")
        if PROTOCOL_VERSIONS[minor] < self._min_version:
            raise _refuse(
                f"server only supports protocol version 3.{minor}, but "
                f"min_protocol_version was set to 3.{self._min_version & 0xFFFF}"
            )
        self.protocol_version = PROTOCOL_VERSIONS[minor]
        self.unsupported_options = list(options)
        return b""

    def _on_parameter_status(self, payload: bytes) -> bytes:
        name, value = be.parse_parameter_status(payload)
        self.parameters[name] = value
        return b""

    def _on_backend_key_data(self, payload: bytes) -> bytes:
        if self.backend_key:
            raise ProtocolError("BackendKeyData received twice")
        pid, key = be.parse_backend_key_data(payload)
        if self.protocol_version == frontend.PROTOCOL_3_0 and len(key) != 4:
            raise ProtocolError(f"BackendKeyData with a {len(key)}-byte key on protocol 3.0")
        self.backend_pid, self.backend_key = pid, key
        return b""

    def _on_ready_for_query(self, payload: bytes) -> bytes:
        self.transaction_status = be.parse_ready_for_query(payload)
        self._state = DONE
        self.done = True
        return b""

    def _on_authentication(self, payload: bytes) -> bytes:
        code, data = be.parse_authentication(payload)
        step = _AUTH_STEPS.get((self._state, code))
        if step is not None:
            return getattr(self, step)(data)
        if self._state == AUTHENTICATING and code not in _CONTINUATIONS:
            self._refuse_unsupported(code)
        raise ProtocolError(f"unexpected authentication request {code} ({self._state})")

    # -- authentication requests ------------------------------------------------------

    def _auth_ok(self, data: bytes) -> bytes:
        be.expect_empty(data, "AuthenticationOk")
        if self._scram is not None and not self._scram.finished:
            raise _refuse(
                "the server ended authentication before SCRAM finished, without "
                "proving it knows the password: possible man-in-the-middle"
            )
        if self.auth_method is None:
            self.auth_method = "trust"
            self._require("none", "server did not complete authentication")
        if self._channel_binding == "require" and self.auth_method != "scram-sha-256-plus":
            raise _refuse(
                "channel binding required, but the server authenticated the client "
                f"without it ({self.auth_method})"
            )
        self._password.value = None  # authenticated: nothing needs it any more
        self._state = SETTING_UP
        return b""

    def _auth_cleartext(self, data: bytes) -> bytes:
        be.expect_empty(data, "AuthenticationCleartextPassword")
        secret = self._password_checks("password", "cleartext password")
        self.auth_method = "password"
        self._state = PASSWORD_SENT
        return frontend.password(password_bytes(secret))

    def _auth_md5(self, data: bytes) -> bytes:
        if len(data) != 4:
            raise ProtocolError(f"AuthenticationMD5Password with a {len(data)}-byte salt")
        secret = self._password_checks("md5", "MD5 password")
        self.auth_method = "md5"
        self._state = PASSWORD_SENT
        return frontend.password(md5_password_digest(self.user, secret, data))

    def _auth_sasl(self, data: bytes) -> bytes:
        offered = be.parse_sasl_mechanisms(data)
        self._require("scram-sha-256", "server requested SASL authentication")
        mechanism, flag, binding = self._choose_mechanism(offered)
        secret = self._need_password()
        nonce = self._scram_nonce() if self._scram_nonce is not None else None
        self._scram = ScramClient(
            secret,
            cbind_flag=flag,
            cbind_data=binding,
            nonce=nonce,
            max_iterations=self._max_iterations,
            derive_key=self._derive_key,
        )
        self.auth_method = mechanism.lower()
        self._state = SASL_STARTED
        return frontend.sasl_initial_response(mechanism, self._scram.client_first())

    def _auth_sasl_continue(self, data: bytes) -> bytes:
        assert self._scram is not None
        self._state = SASL_RESPONDED
        return frontend.sasl_response(self._scram.client_final(data))

    def _auth_sasl_final(self, data: bytes) -> bytes:
        assert self._scram is not None
        self._scram.verify_server_final(data)
        self._state = SASL_VERIFIED
        return b""

    def _refuse_unsupported(self, code: int) -> None:
        name, description = _UNSUPPORTED_AUTH.get(code, (None, f"request code {code}"))
        if name is not None:
            self._require(name, f"server requested {description} authentication")
        raise _refuse(
            f"the server requested {description} authentication, which pgmux does not support"
        )

    # -- policy -----------------------------------------------------------------------

    def _require(self, method: str, what: str) -> None:
        """Refuse unless require_auth allows ``method``."""
        if self._allowed is not None and method not in self._allowed:
            raise _refuse(
                f'authentication method requirement "{self._require_auth}" failed: {what}'
            )

    def _password_checks(self, method: str, what: str) -> str:
        """The checks before a cleartext or MD5 answer; returns the password."""
        self._require(method, f"server requested {what} authentication")
        if self._channel_binding == "require":
            raise _refuse(
                f"channel binding required, but the server requested {what} authentication"
            )
        if not self._secure and not self._allow_cleartext:
            raise _refuse(
                f"the server requested {what} authentication over a connection "
                "that is neither TLS nor a Unix socket; refusing to send it "
                "(use TLS, or set allow_cleartext_password=True)"
            )
        return self._need_password()

    def _need_password(self) -> str:
        password = self._password.value
        if not password:
            raise _refuse("password authentication requested but no password was supplied")
        return password

    def _choose_mechanism(self, offered: list[str]) -> tuple[str, str, bytes]:
        """(mechanism, GS2 channel-binding flag, binding data) for the offered list."""
        plus, plain = MECHANISM_PLUS in offered, MECHANISM in offered
        tls = self._certificate is not None
        if plus and not tls:
            raise _refuse(
                "the server offered SCRAM-SHA-256-PLUS over a connection without "
                "TLS: possible man-in-the-middle"
            )
        if not plus and not plain:
            raise _refuse(f"none of the server's SASL mechanisms is supported: {offered}")
        if self._channel_binding == "require":
            return self._required_binding(plus)
        if plus and self._channel_binding == "prefer":
            binding = self._preferred_binding()
            if binding:
                return MECHANISM_PLUS, "p", binding
        if not plain:
            raise _refuse(
                f"the server offers only SCRAM-SHA-256-PLUS, but channel binding is "
                f"{'disabled' if self._channel_binding == 'disable' else 'impossible'}"
            )
        flag = "y" if tls and not plus and self._channel_binding != "disable" else "n"
        return MECHANISM, flag, b""

    def _required_binding(self, plus: bool) -> tuple[str, str, bytes]:
        if self._certificate is None:
            raise _refuse("channel_binding=require, but the connection does not use TLS")
        if not plus:
            raise _refuse(
                "channel_binding=require, but the server does not offer SCRAM-SHA-256-PLUS"
            )
        return MECHANISM_PLUS, "p", tls_server_end_point_hash(self._certificate)

    def _preferred_binding(self) -> bytes:
        """The certificate hash, or b"" when binding is impossible (then plain SCRAM)."""
        assert self._certificate is not None
        try:
            return tls_server_end_point_hash(self._certificate)
        except OperationalError:
            return b""


def _check_options(
    user: str,
    params: Mapping[str, str],
    protocol_version: int,
    channel_binding: str,
    max_scram_iterations: int,
) -> None:
    if not user:
        raise InterfaceError("a user name is required")
    clash = {"user", "database"} & set(params)
    if clash:
        raise InterfaceError(f"pass {sorted(clash)} as arguments, not in params")
    if protocol_version not in PROTOCOL_VERSIONS.values():
        raise InterfaceError(
            f"unsupported protocol version {protocol_version >> 16}.{protocol_version & 0xFFFF}"
        )
    if channel_binding not in CHANNEL_BINDING_MODES:
        raise InterfaceError(f"channel_binding must be one of {sorted(CHANNEL_BINDING_MODES)}")
    if max_scram_iterations < 1:
        raise InterfaceError("max_scram_iterations must be at least 1")


def _startup_params(user: str, database: str | None, params: Mapping[str, str]) -> dict[str, str]:
    startup = {"user": user}
    if database is not None:
        startup["database"] = database
    startup.update(params)
    return startup


def _describe(kind: int) -> str:
    char = chr(kind)
    return f"message {char!r}" if char.isprintable() else f"message type {kind}"
