"""The byte stream to a server: a gevent socket, TCP or Unix, connected as libpq does.

Theory of operation. ``open_transport`` connects one host within one deadline
(``timeout`` bounds the TCP connect, the SSLRequest exchange and the TLS handshake) and
returns a ``Transport`` ready for the startup message; TLS is negotiated per ``sslmode``
(see ``pgmux.io.tls``). Unix sockets never use TLS.
"""

from __future__ import annotations

import errno
import logging
import random
import ssl
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gevent
from gevent import socket
from gevent.hub import get_hub

from pgmux.errors import OperationalError
from pgmux.io import tls
from pgmux.io.conninfo import ConnInfo, format_address, is_unix_host, unix_socket_path

log = logging.getLogger("pgmux")

_READ_EVENT = 1  # the event loop's "readable" flag for an io watcher (EV_READ)

# ConnInfo keepalive field -> socket option names to try (Linux name first, then macOS).
_KEEPALIVE_OPTIONS = (
    ("keepalives_idle", ("TCP_KEEPIDLE", "TCP_KEEPALIVE")),
    ("keepalives_interval", ("TCP_KEEPINTVL",)),
    ("keepalives_count", ("TCP_KEEPCNT",)),
)


class Transport:
    """A connected socket (a gevent SSLSocket under TLS) and what TLS negotiated."""

    __slots__ = (
        "sock", "host", "port", "is_unix", "is_tls", "server_certificate",
        "tls_version", "cipher", "alpn_protocol", "_closed", "_readable", "_raw",
        "_woken",
    )

    def __init__(self, sock: socket.socket, host: str, port: int, *, is_unix: bool = False):
        self.sock = sock
        self.host = host
        self.port = port
        self.is_unix = is_unix
        self.is_tls = False
        self.server_certificate: bytes | None = None  # DER, for channel binding
        self.tls_version: str | None = None
        self.cipher: str | None = None
        self.alpn_protocol: str | None = None
        self._closed = False
        self._readable: Any = None  # the hub's read watcher for wait_readable, made once
        # The plain socket under gevent's (never blocking: gevent keeps it so), used without
        # gevent's wrapper by send (a send that would block is finished by sendall) and by
        # the read that follows wait_readable (``_woken``: the data is there); None under
        # TLS (the SSL socket reads records) or for another kind of socket.
        self._raw: Any = _plain_socket(sock)
        self._woken = False

    @classmethod
    def over_tls(cls, tls: ssl.SSLSocket, host: str, port: int) -> Transport:
        """A transport over the TLS socket ``tls``, its handshake done."""
        transport = cls(tls, host, port)
        transport.is_tls = True
        transport._raw = None
        transport.server_certificate = tls.getpeercert(binary_form=True)
        transport.tls_version = tls.version()
        cipher = tls.cipher()
        transport.cipher = cipher[0] if cipher else None
        transport.alpn_protocol = tls.selected_alpn_protocol()
        return transport

    @property
    def closed(self) -> bool:
        return self._closed

    def describe(self) -> str:
        return format_address(self.host, self.port)

    def sendall(self, data: bytes | memoryview) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise self._failure("sending to", exc) from exc

    def send(self, data: bytes | memoryview) -> int:
        """Send what the socket takes now (0 if it takes nothing without waiting)."""
        raw = self._raw
        try:
            if raw is not None:
                try:
                    return raw.send(data)
                except BlockingIOError:
                    return 0  # (the caller sends the rest with sendall, which waits)
            return self.sock.send(data)
        except OSError as exc:
            raise self._failure("sending to", exc) from exc

    def recv(self, size: int) -> bytes:
        """Up to ``size`` bytes; b"" when the server closed the connection.

        A TLS read returns one record; the records that have already arrived are taken
        as well, so one wake-up serves every reply the server flushed meanwhile.
        """
        raw = self._raw
        try:
            if raw is not None and self._woken:
                self._woken = False
                try:
                    return raw.recv(size)
                except BlockingIOError:
                    pass  # (woken for nothing) gevent's socket waits
            data = self.sock.recv(size)
            if self.is_tls and data and len(data) < size:
                data = self._arrived_records(data, size)
            return data
        except OSError as exc:
            raise self._failure("receiving from", exc) from exc

    def _arrived_records(self, data: bytes, size: int) -> bytes:
        sock = self.sock
        chunks = [data]
        got = len(data)
        timeout = sock.gettimeout()
        sock.settimeout(0.0)  # read without waiting: stop at the first would-block
        try:
            while got < size:
                try:
                    more = sock.recv(size - got)
                except (ssl.SSLWantReadError, BlockingIOError):
                    break
                if not more:
                    break
                chunks.append(more)
                got += len(more)
        finally:
            sock.settimeout(timeout)
        return b"".join(chunks)

    def wait_readable(self) -> None:
        """Park until the socket is readable, without trying a read first.

        For a reply just requested, which cannot have arrived yet: a recv would fail with
        EAGAIN first (a system call and an exception inside gevent's socket).
        """
        if self._closed:
            raise self._failure("receiving from", OSError(errno.EBADF, "closed"))
        if self.is_tls and self.sock.pending():
            return
        hub = get_hub()
        watcher = self._readable
        if watcher is None:
            watcher = self._readable = hub.loop.io(self.sock.fileno(), _READ_EVENT)
        try:
            hub.wait(watcher)
        except OSError as exc:
            raise self._failure("receiving from", exc) from exc
        self._woken = True

    def recv_into(self, buffer: bytearray | memoryview, size: int | None = None) -> int:
        """Receive into ``buffer`` (up to ``size`` bytes); 0 when the server closed."""
        raw = self._raw
        try:
            if raw is not None and self._woken:
                self._woken = False
                try:
                    return raw.recv_into(buffer) if size is None else raw.recv_into(buffer, size)
                except BlockingIOError:
                    pass  # (woken for nothing) gevent's socket waits
            if size is None:
                return self.sock.recv_into(buffer)
            return self.sock.recv_into(buffer, size)
        except OSError as exc:
            raise self._failure("receiving from", exc) from exc

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        """Close the socket: idempotent, never raises, sends nothing (no TLS close_notify)."""
        if self._closed:
            return
        self._closed = True
        watcher, self._readable = self._readable, None
        if watcher is None:
            self._close_socket()
            return
        # As gevent's own socket does: a greenlet parked in wait_readable gets EBADF, and
        # the descriptor closes only after that (libev must not watch a closed one).
        get_hub().cancel_waits_close_and_then(
            [watcher], OSError(errno.EBADF, "the connection was closed"), self._close_socket)

    def _close_socket(self) -> None:
        try:
            self.sock.close()
        except Exception:
            pass

    def detach_for_fork(self) -> None:
        """In a forked child: release our copy of the fd without a byte on the wire.

        close() of a descriptor shared with the parent neither shuts the connection down
        nor sends TLS alerts; the parent's copy keeps the connection open.
        """
        self.close()

    def _failure(self, action: str, exc: OSError) -> OperationalError:
        reason = exc.strerror or str(exc) or type(exc).__name__
        return OperationalError(f"{action} the server at {self.describe()} failed: {reason}")

    def __repr__(self) -> str:
        kind = "unix" if self.is_unix else (self.tls_version or "tcp")
        state = " closed" if self._closed else ""
        return f"<Transport {self.describe()} {kind}{state}>"


def open_transport(
    info: ConnInfo,
    host: str,
    port: int,
    *,
    hostaddr: str | None = None,
    timeout: float | None = None,
    force_tls: bool | None = None,
) -> Transport:
    """Connect to one host and negotiate TLS per ``info.sslmode``, all within ``timeout``.

    ``force_tls`` overrides the mode for this attempt: True demands TLS (the retry of
    sslmode=allow), False plaintext (only where the mode allows it). Over Unix sockets it
    is ignored. Raises OperationalError (ProtocolError for protocol violations).
    """
    with _deadline(timeout, format_address(host, port)):
        if is_unix_host(host):
            return _open_unix(info, host, port)
        plan = tls.plan_for(info, force_tls)
        context = None if plan == tls.PLAIN else tls.ssl_context_for(info, host)
        sock = _connect_tcp(info, host, port, hostaddr)
        if context is None:
            return Transport(sock, host, port)
        try:
            secured = tls.negotiate_tls(info, context, sock, host, port, plan)
        except tls.TLSHandshakeError as exc:
            if plan != tls.REQUEST:
                raise
            log.info("pgmux: %s; sslmode=prefer, so retrying without TLS", exc)
            return Transport(_connect_tcp(info, host, port, hostaddr), host, port)
        if secured is None:
            return Transport(sock, host, port)
        return Transport.over_tls(secured, host, port)


def _plain_socket(sock: Any) -> Any:
    """The plain socket under a gevent socket (gevent keeps it never blocking), else None."""
    return getattr(sock, "_sock", None) if type(sock) is socket.socket else None


@contextmanager
def _deadline(seconds: float | None, name: str) -> Iterator[None]:
    if seconds is None or seconds <= 0:
        yield
        return
    timer = gevent.Timeout(seconds)
    timer.start()
    try:
        yield
    except gevent.Timeout as exc:
        if exc is not timer:
            raise
        raise OperationalError(f"connection to {name} timed out after {seconds:g}s") from None
    finally:
        timer.cancel()


# -- sockets -----------------------------------------------------------------------------


def _connect_tcp(info: ConnInfo, host: str, port: int, hostaddr: str | None) -> socket.socket:
    addresses = _resolve(host, port, hostaddr)
    if info.load_balance_hosts == "random":
        random.shuffle(addresses)  # libpq: a host's addresses are tried in random order too
    failures = []
    for family, kind, proto, _, address in addresses:
        sock = socket.socket(family, kind, proto)
        try:
            sock.connect(address)
        except OSError as exc:
            sock.close()
            failures.append(
                f'connection to server at "{host}" ({address[0]}), port {port} failed: '
                f"{exc.strerror or exc}"
            )
            continue
        except BaseException:
            sock.close()
            raise
        try:
            _configure_tcp(sock, info)
        except OSError as exc:
            sock.close()
            raise OperationalError(f"could not set socket options for {host}: {exc}") from exc
        return sock
    raise OperationalError("; ".join(failures) or f'no address for host "{host}"')


def _resolve(host: str, port: int, hostaddr: str | None) -> list[tuple]:
    target, flags = (hostaddr, socket.AI_NUMERICHOST) if hostaddr else (host, 0)
    try:
        return socket.getaddrinfo(target, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, flags)
    except (socket.gaierror, UnicodeError) as exc:
        what = "parse network address" if hostaddr else "translate host name"
        reason = getattr(exc, "strerror", None) or str(exc)
        raise OperationalError(f'could not {what} "{target}" to address: {reason}') from None


def _configure_tcp(sock: socket.socket, info: ConnInfo) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if info.keepalives:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, options in _KEEPALIVE_OPTIONS:
            value = getattr(info, name)
            option = next((getattr(socket, o) for o in options if hasattr(socket, o)), None)
            if value and option is not None:
                sock.setsockopt(socket.IPPROTO_TCP, option, value)
    if info.tcp_user_timeout and hasattr(socket, "TCP_USER_TIMEOUT"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, info.tcp_user_timeout)


def _open_unix(info: ConnInfo, host: str, port: int) -> Transport:
    path = unix_socket_path(host, port)
    shown = path.replace("\0", "@")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        if info.requirepeer:
            _check_peer(sock, info.requirepeer)
    except OSError as exc:
        sock.close()
        raise OperationalError(
            f'connection to server on socket "{shown}" failed: {exc.strerror or exc}'
        ) from None
    except BaseException:
        sock.close()
        raise
    return Transport(sock, host, port, is_unix=True)


def _check_peer(sock: socket.socket, required: str) -> None:
    """libpq's requirepeer: the server process must run as this OS user."""
    if not hasattr(socket, "SO_PEERCRED"):
        raise OperationalError("requirepeer is not supported on this platform")
    import pwd

    credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", credentials)
    try:
        actual = pwd.getpwuid(uid).pw_name
    except KeyError:
        raise OperationalError(f"could not look up the local user ID {uid}") from None
    if actual != required:
        raise OperationalError(
            f'requirepeer parameter "{required}" does not match actual peer user name "{actual}"'
        )
