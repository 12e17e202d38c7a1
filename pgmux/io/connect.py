"""Opening a server connection: transport, startup and authentication, and CancelRequest."""

from __future__ import annotations

import hashlib
import logging
import os

import gevent
from gevent.hub import get_hub

from pgmux.errors import OperationalError, ProtocolError
from pgmux.io.conninfo import ConnInfo, Endpoint
from pgmux.io.hosts import HostHealth, HostSkipped, passes_for, unsuitable
from pgmux.io.transport import Transport, open_transport
from pgmux.io.wire import ServerClosed, Wire
from pgmux.protocol import startup
from pgmux.protocol.framing import FrameBuffer
from pgmux.protocol.startup import StartupHandshake

log = logging.getLogger("pgmux")

_CHEAP_ITERATIONS = 16384  # PostgreSQL's default is 4096: a few milliseconds

# Sent at startup on every connection so the codecs can rely on the formats. Only
# parameters a pooler tracks (PgBouncer refuses any other startup parameter, IntervalStyle
# included); the rest of the output settings are followed through ParameterStatus.
BASE_STARTUP_PARAMS = {
    "client_encoding": "UTF8",
    "DateStyle": "ISO, MDY",
}


class ServerConnection:
    """A transport that has completed startup, with its framing buffer and server facts."""

    def __init__(self, transport: Transport, frames: FrameBuffer, handshake: StartupHandshake,
                 info: ConnInfo, endpoint: Endpoint):
        self.transport = transport
        self.endpoint = endpoint
        self.frames = frames
        self.conninfo = info
        # (set once the handshake is done: an authentication request, then ReadyForQuery)
        assert handshake.auth_method is not None and handshake.transaction_status is not None
        self.pid: int = handshake.backend_pid
        self.cancel_key: bytes = handshake.backend_key
        self.parameters: dict[str, str] = dict(handshake.parameters)
        self.protocol_version: int = handshake.protocol_version
        self.auth_method: str = handshake.auth_method
        self.transaction_status: str = handshake.transaction_status
        self.owner_pid = os.getpid()
        self.closed = False

    @property
    def server_version(self) -> str:
        return self.parameters.get("server_version", "")

    @property
    def protocol(self) -> str:
        return f"{self.protocol_version >> 16}.{self.protocol_version & 0xFFFF}"

    def close(self, terminate: bool = True) -> None:
        """Close the socket; send Terminate first when asked and when we own it (not after fork)."""
        if self.closed:
            return
        self.closed = True
        if self.owner_pid != os.getpid():
            self.transport.detach_for_fork()
            return
        if terminate:
            try:
                self.transport.sendall(startup.TERMINATE)
            except Exception:
                pass
        self.transport.close()

    def send_cancel(self, timeout: float = 5.0) -> bool:
        """Send CancelRequest for this backend on a fresh transport of the same kind.

        Returns True once the server has closed the cancel connection, which it does
        after it has signalled the backend; False if that did not happen in ``timeout``
        (a late cancel could then still hit a later statement).
        """
        endpoint = self.endpoint
        with gevent.Timeout(timeout, False):
            transport = open_transport(
                self.conninfo, endpoint.host, endpoint.port, hostaddr=endpoint.hostaddr,
                timeout=timeout, force_tls=self.transport.is_tls,
            )
            try:
                transport.sendall(startup.cancel_request(self.pid, self.cancel_key))
                return transport.recv(1) == b""
            finally:
                transport.close()
        return False

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<ServerConnection pid={self.pid} {self.conninfo.describe()} {state}>"


def connect(info: ConnInfo, *, timeout: float | None = None,
            hosts: HostHealth | None = None) -> ServerConnection:
    """Connect to the first host of ``info`` that accepts us and suits
    ``target_session_attrs``, honouring libpq's sslmode=allow.

    ``hosts``: the client's shared host health (which hosts are down, which are
    standbys); hosts it knows to be down or unsuitable are tried after the others, and
    what this attempt learns is recorded there. Without it every host is tried in
    libpq's order.
    """
    timeout = info.connect_timeout if timeout is None else timeout
    health = hosts if hosts is not None else HostHealth(backoff=0)
    endpoints = info.endpoints()  # shuffled once under load_balance_hosts=random, as libpq
    errors: list[OperationalError] = []
    for target in passes_for(info.target_session_attrs):
        for endpoint in health.order(endpoints, target):
            conn = _connect_endpoint(info, endpoint, timeout, errors, health)
            if conn is None:
                continue
            reason = unsuitable(conn.parameters, target)
            if reason is None:
                return conn
            errors.append(OperationalError(f"{endpoint.describe()}: {reason}"))
            conn.close()
    if len(errors) == 1:
        raise errors[0]  # as raised: keeps .sqlstate and the server's DatabaseError cause
    error = OperationalError("could not connect to any host:\n  " + "\n  ".join(map(str, errors)))
    error.sqlstate = getattr(errors[-1], "sqlstate", None)
    raise error from errors[-1]


# sslmode -> (TLS on the second attempt, SQLSTATEs of a first failure worth it): libpq
# retries "allow" with TLS and "prefer" without it when the server refused the first.
_SECOND_ATTEMPT = {"allow": (True, ("28000", None)), "prefer": (False, ("28000",))}


def _connect_endpoint(info: ConnInfo, endpoint: Endpoint, timeout: float | None,
                      errors: list[OperationalError],
                      health: HostHealth) -> ServerConnection | None:
    second, retry_on = _SECOND_ATTEMPT.get(info.sslmode, (None, ()))
    attempts = [None] if second is None or endpoint.is_unix else [None, second]
    try:
        with health.attempt(endpoint):
            for force_tls in attempts:
                try:
                    conn = _connect_one(info, endpoint, timeout, force_tls)
                except OperationalError as exc:
                    errors.append(exc)
                    if getattr(exc, "sqlstate", None) not in retry_on:
                        break
                    continue
                health.succeeded(endpoint, conn.parameters)
                return conn
            health.failed(endpoint, errors[-1])
    except HostSkipped as exc:  # another attempt just found it down
        errors.append(exc)
    return None


def _connect_one(info: ConnInfo, endpoint: Endpoint, timeout: float | None,
                 force_tls: bool | None) -> ServerConnection:
    transport = open_transport(info, endpoint.host, endpoint.port, hostaddr=endpoint.hostaddr,
                               timeout=timeout, force_tls=force_tls)
    try:
        with gevent.Timeout(timeout, False):
            return _startup(info, endpoint, transport)
        raise OperationalError(
            f"connection to {endpoint.describe()} timed out after {timeout}s during startup"
        )
    except OperationalError as exc:
        transport.close()
        raise _with_protocol_hint(info, exc)
    except BaseException:
        transport.close()
        raise


def _with_protocol_hint(info: ConnInfo, exc: OperationalError) -> OperationalError:
    """Say what to change when a pooler refused the protocol 3.2 startup packet."""
    if info.max_protocol_version == "3.0" or getattr(exc, "sqlstate", None) != "08P01":
        return exc
    hinted = OperationalError(f"{exc} (the server, or a pooler in front of it such as "
                              "PgBouncer before 1.23, does not negotiate protocol 3.2: "
                              "connect with max_protocol_version=3.0, the default)")
    hinted.sqlstate = exc.sqlstate
    hinted.__cause__ = exc.__cause__ or exc
    return hinted


def _derive_key_off_loop(name: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    """PBKDF2 for SCRAM; a costly one runs in gevent's thread pool so the hub keeps going."""
    if iterations <= _CHEAP_ITERATIONS:
        return hashlib.pbkdf2_hmac(name, password, salt, iterations)
    return get_hub().threadpool.apply(hashlib.pbkdf2_hmac, (name, password, salt, iterations))


def _startup(info: ConnInfo, endpoint: Endpoint, transport: Transport) -> ServerConnection:
    params = dict(BASE_STARTUP_PARAMS)
    if info.application_name:
        params["application_name"] = info.application_name
    if info.options:
        params["options"] = info.options
    params.update(info.server_settings)
    version = startup.PROTOCOLS[info.max_protocol_version]
    handshake = StartupHandshake(
        user=info.user,
        database=info.dbname,
        password=endpoint.password,
        params=params,
        protocol_version=version,
        require_auth=info.require_auth,
        channel_binding=info.channel_binding,
        tls_server_certificate=transport.server_certificate,
        secure_transport=transport.is_tls or transport.is_unix,
        allow_cleartext_over_insecure=info.allow_cleartext_password,
        min_protocol_version=startup.PROTOCOLS[info.min_protocol_version],
        scram_key_derivation=_derive_key_off_loop,
    )
    transport.sendall(handshake.start())
    frames = FrameBuffer(row_runs=True)  # its readers hand everything to the engine
    wire = Wire(transport, frames)
    while not handshake.done:
        try:
            messages = wire.receive()
        except ServerClosed:
            raise OperationalError(
                f"server {info.describe()} closed the connection during startup") from None
        for index, (kind, payload) in enumerate(messages):
            reply = handshake.handle(kind, payload)
            if reply:
                transport.sendall(reply)
            if handshake.done:
                if index + 1 < len(messages) or frames.buffered:
                    raise ProtocolError("server sent data after ReadyForQuery without being "
                                        "asked")
                break
    return ServerConnection(transport, frames, handshake, info, endpoint)
