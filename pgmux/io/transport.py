"""The byte stream to a server: a gevent socket (TCP or Unix) with TLS negotiated as libpq does.

Theory of operation. ``open_transport`` connects one host within one deadline
(``timeout`` bounds the TCP connect, the SSLRequest exchange and the TLS handshake) and
returns a ``Transport`` ready for the startup message. TLS follows ``sslmode``:

=========== ============================================================================
disable     plaintext
allow       plaintext; the caller retries with ``force_tls=True`` if the server refuses
prefer      SSLRequest; ``N`` or a failed handshake → plaintext (a new connection)
require     SSLRequest, ``S`` required; the chain is verified only if a root cert exists
verify-ca   as require, the chain always verified (sslrootcert, or "system")
verify-full as verify-ca, plus the host name, checked with libpq's rules
=========== ============================================================================

When a root certificate file is loaded the chain is verified in every mode, as libpq
does. ``sslnegotiation=direct`` skips SSLRequest and needs the server to select the ALPN
protocol "postgresql"; the postgres negotiation offers it too but does not require it.
Unix sockets never use TLS. Bytes that arrive together with the ``S`` answer, before the
handshake, are refused (CVE-2021-23222).
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import random
import ssl
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gevent
from gevent import socket
from gevent import ssl as gevent_ssl
from gevent.hub import get_hub

from pgmux.errors import InterfaceError, OperationalError, ProtocolError
from pgmux.io.conninfo import (
    VERIFYING_SSLMODES,
    ConnInfo,
    format_address,
    is_unix_host,
    unix_socket_path,
)
from pgmux.protocol import startup

log = logging.getLogger("pgmux")

ALPN_PROTOCOL = "postgresql"
_READ_EVENT = 1  # the event loop's "readable" flag for an io watcher (EV_READ)

_TLS_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
# OpenSSL X509_V_ERR_* codes -> which check failed.
_VERIFY_PROBLEMS = {
    2: "unknown certificate authority",
    3: "no certificate revocation list for the issuer",
    9: "certificate not yet valid",
    10: "certificate expired",
    12: "certificate revocation list expired",
    18: "unknown certificate authority (self-signed certificate)",
    19: "unknown certificate authority",
    20: "unknown certificate authority",
    21: "unknown certificate authority",
    23: "certificate revoked",
    62: "host name mismatch",
}
# ConnInfo keepalive field -> socket option names to try (Linux name first, then macOS).
_KEEPALIVE_OPTIONS = (
    ("keepalives_idle", ("TCP_KEEPIDLE", "TCP_KEEPALIVE")),
    ("keepalives_interval", ("TCP_KEEPINTVL",)),
    ("keepalives_count", ("TCP_KEEPCNT",)),
)

# How to negotiate on one TCP connection.
PLAIN, REQUEST, REQUIRE, DIRECT = "plain", "request", "require", "direct"
_PLAN_BY_SSLMODE = {
    "disable": PLAIN,
    "allow": PLAIN,
    "prefer": REQUEST,
    "require": REQUIRE,
    "verify-ca": REQUIRE,
    "verify-full": REQUIRE,
}


class TLSHandshakeError(OperationalError):
    """The TLS handshake failed (under sslmode=prefer pgmux then retries in plaintext)."""


class Transport:
    """A connected socket (a gevent SSLSocket under TLS) and what TLS negotiated."""

    __slots__ = (
        "sock", "host", "port", "is_unix", "is_tls", "server_certificate",
        "tls_version", "cipher", "alpn_protocol", "_closed", "_readable",
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

    def _record_tls(self, tls: ssl.SSLSocket) -> None:
        self.is_tls = True
        self.server_certificate = tls.getpeercert(binary_form=True)
        self.tls_version = tls.version()
        cipher = tls.cipher()
        self.cipher = cipher[0] if cipher else None
        self.alpn_protocol = tls.selected_alpn_protocol()

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
        try:
            return self.sock.send(data)
        except OSError as exc:
            raise self._failure("sending to", exc) from exc

    def recv(self, size: int) -> bytes:
        """Up to ``size`` bytes; b"" when the server closed the connection.

        A TLS read returns one record; the records that have already arrived are taken
        as well, so one wake-up serves every reply the server flushed meanwhile.
        """
        try:
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

    def recv_into(self, buffer: bytearray | memoryview, size: int | None = None) -> int:
        """Receive into ``buffer`` (up to ``size`` bytes); 0 when the server closed."""
        try:
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
        plan = _plan(info, force_tls)
        context = None if plan == PLAIN else ssl_context_for(info, host)
        sock = _connect_tcp(info, host, port, hostaddr)
        if context is None:
            return Transport(sock, host, port)
        try:
            return _negotiate_tls(info, context, sock, host, port, plan)
        except TLSHandshakeError as exc:
            if plan != REQUEST:
                raise
            log.info("pgmux: %s; sslmode=prefer, so retrying without TLS", exc)
            return Transport(_connect_tcp(info, host, port, hostaddr), host, port)


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


def _plan(info: ConnInfo, force_tls: bool | None) -> str:
    mode = info.sslmode
    if force_tls is False:
        if mode in VERIFYING_SSLMODES:
            raise InterfaceError(f"sslmode={mode} does not allow a connection without TLS")
        return PLAIN
    if force_tls is True and mode == "disable":
        raise InterfaceError("sslmode=disable does not allow TLS")
    if info.sslnegotiation == "direct":
        return DIRECT
    return REQUIRE if force_tls else _PLAN_BY_SSLMODE[mode]


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


# -- TLS negotiation -----------------------------------------------------------------------


def _negotiate_tls(
    info: ConnInfo, context: ssl.SSLContext, sock: socket.socket, host: str, port: int,
    plan: str,
) -> Transport:
    """Ask for TLS (unless direct) and hand over to the handshake; owns ``sock``."""
    name = format_address(host, port)
    try:
        if plan != DIRECT and not _request_tls(sock, name):
            if plan == REQUIRE:
                raise OperationalError(
                    f"server at {name} does not support SSL, but SSL was required"
                )
            return Transport(sock, host, port)
    except BaseException:
        sock.close()
        raise
    return _handshake(info, context, sock, host, port, direct=plan == DIRECT)


def _request_tls(sock: socket.socket, name: str) -> bool:
    """Send SSLRequest; True if the server agreed (``S``), False if it declined (``N``)."""
    try:
        sock.sendall(startup.ssl_request())
        answer = sock.recv(1)
    except OSError as exc:
        raise OperationalError(f"SSL negotiation with {name} failed: {exc.strerror or exc}")
    if answer == b"S":
        _refuse_early_bytes(sock, name)
        return True
    if answer == b"N":
        return False
    if answer == b"E":
        # Unauthenticated: libpq does not read or show it, nor do we.
        raise OperationalError(f"server at {name} sent an error response during SSL exchange")
    if not answer:
        raise OperationalError(f"server at {name} closed the connection during SSL negotiation")
    raise ProtocolError(f"received invalid response to SSL negotiation from {name}: {answer!r}")


def _refuse_early_bytes(sock: socket.socket, name: str) -> None:
    """CVE-2021-23222: nothing may follow ``S`` before the handshake (a MITM injection)."""
    sock.settimeout(0.0)
    try:
        early = sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return
    except OSError as exc:
        raise OperationalError(f"SSL negotiation with {name} failed: {exc.strerror or exc}")
    finally:
        sock.settimeout(None)
    if not early:
        raise OperationalError(f"server at {name} closed the connection during SSL negotiation")
    raise ProtocolError(
        f"received unencrypted data from {name} after the SSL response "
        "(possible man-in-the-middle attack, CVE-2021-23222)"
    )


def _handshake(
    info: ConnInfo, context: ssl.SSLContext, sock: socket.socket, host: str, port: int,
    *, direct: bool,
) -> Transport:
    name = format_address(host, port)
    server_name = host if info.sslsni and not _is_ip_address(host) else None
    try:
        tls = context.wrap_socket(sock, server_hostname=server_name, do_handshake_on_connect=False)
    except BaseException:
        sock.close()
        raise
    transport = Transport(tls, host, port)
    try:
        _do_handshake(tls, name)
        transport._record_tls(tls)
        if direct:
            _check_alpn(transport.alpn_protocol, name)
        if info.sslmode == "verify-full":
            check_host_name(transport.server_certificate, host, name)
    except BaseException:
        transport.close()
        raise
    return transport


def _do_handshake(tls: ssl.SSLSocket, name: str) -> None:
    try:
        tls.do_handshake()
    except ssl.SSLCertVerificationError as exc:
        problem = _VERIFY_PROBLEMS.get(exc.verify_code, "certificate rejected")
        raise TLSHandshakeError(
            f"TLS certificate verification of {name} failed: {problem} ({exc.verify_message})"
        ) from None
    except ssl.SSLError as exc:
        raise TLSHandshakeError(f"SSL handshake with {name} failed: {exc.reason or exc}") from None
    except OSError as exc:
        raise TLSHandshakeError(
            f"SSL handshake with {name} failed: {exc.strerror or 'connection closed'}"
        ) from None


def _check_alpn(selected: str | None, name: str) -> None:
    if selected is None:
        raise OperationalError(
            f"direct SSL connection to {name} was established without ALPN protocol negotiation"
        )
    if selected != ALPN_PROTOCOL:
        raise ProtocolError(
            f"SSL connection to {name} selected unexpected ALPN protocol {selected!r}"
        )


def _is_ip_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


# -- TLS configuration ---------------------------------------------------------------------


def ssl_context_for(info: ConnInfo, host: str) -> ssl.SSLContext | None:
    """The client TLS context for ``host`` (None where TLS is never used).

    Host names are not checked by OpenSSL here: ``check_host_name`` does it after the
    handshake with libpq's rules (wildcards, the CN when no SAN of the host's kind).
    """
    if info.sslmode == "disable" or is_unix_host(host):
        return None
    context = gevent_ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.minimum_version = _TLS_VERSIONS[info.ssl_min_protocol_version]
    if info.ssl_max_protocol_version:
        context.maximum_version = _TLS_VERSIONS[info.ssl_max_protocol_version]
    context.set_alpn_protocols([ALPN_PROTOCOL])
    verify = _load_trust(context, info)
    context.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    if verify:
        _load_revocations(context, info)
    _load_client_certificate(context, info)
    return context


def _default_file(name: str) -> str:
    return os.path.join(os.path.expanduser("~"), ".postgresql", name)


def _load_trust(context: ssl.SSLContext, info: ConnInfo) -> bool:
    """Load the root certificates; True when the server's chain is to be verified."""
    root = info.sslrootcert or _default_file("root.crt")
    if root == "system":
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        return True
    if os.path.exists(root):
        try:
            context.load_verify_locations(cafile=root)
        except (OSError, ssl.SSLError) as exc:
            raise OperationalError(
                f'could not read root certificate file "{root}": {_reason(exc)}'
            ) from None
        return True
    if info.sslmode in ("verify-ca", "verify-full"):
        raise OperationalError(
            f'root certificate file "{root}" does not exist; either provide the file, use '
            "the system's trusted roots with sslrootcert=system, or change sslmode to "
            "disable server certificate verification"
        )
    return False


def _load_revocations(context: ssl.SSLContext, info: ConnInfo) -> None:
    crl = info.sslcrl or _default_file("root.crl")
    sources = [("cafile", crl)] if os.path.isfile(crl) else []
    if info.sslcrldir:
        sources.append(("capath", info.sslcrldir))
    for kind, path in sources:
        try:
            context.load_verify_locations(**{kind: path})
        except (OSError, ssl.SSLError) as exc:
            raise OperationalError(f'could not load SSL CRL "{path}": {_reason(exc)}') from None
    if sources:
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_CHAIN


def _load_client_certificate(context: ssl.SSLContext, info: ConnInfo) -> None:
    if info.sslcertmode == "disable":
        return
    cert = info.sslcert or _default_file("postgresql.crt")
    if not os.path.exists(cert):
        return
    key = info.sslkey or _default_file("postgresql.key")
    _check_key_file(key)
    secret = (info.sslpassword or "").encode()
    try:
        context.load_cert_chain(cert, key, password=lambda: secret)
    except (OSError, ssl.SSLError) as exc:
        raise OperationalError(
            f'could not load client certificate "{cert}" with key "{key}": {_reason(exc)}'
        ) from None


def _check_key_file(path: str) -> None:
    """libpq's rule: 0600 or less, or 0640 or less when owned by root."""
    try:
        info = os.stat(path)
    except OSError:
        raise OperationalError(f'certificate present, but not private key file "{path}"') from None
    if os.name != "posix":
        return
    loose = 0o037 if info.st_uid == 0 else 0o077
    if info.st_mode & loose:
        raise OperationalError(
            f'private key file "{path}" has group or world access; file must have permissions '
            "u=rw (0600) or less if owned by the current user, or u=rw,g=r (0640) or less "
            "if owned by root"
        )


def _reason(exc: Exception) -> str:
    return getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)


# -- host name check -----------------------------------------------------------------------


def check_host_name(der: bytes | None, host: str, name: str | None = None) -> None:
    """Raise OperationalError unless the certificate ``der`` is valid for ``host``.

    libpq's rules: DNS names match case-insensitively, ``*.`` matches one left-most
    label; IP hosts match IP address entries (and DNS entries spelled the same); the
    subject CN counts only when there is no SAN entry of the host's kind.
    """
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    where = name or host
    if not der:
        raise OperationalError(f"server at {where} sent no certificate")
    cert = x509.load_der_x509_certificate(der)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns_names = sans.get_values_for_type(x509.DNSName)
        ip_names = sans.get_values_for_type(x509.IPAddress)
    except x509.ExtensionNotFound:
        dns_names, ip_names = [], []
    host_ip = ipaddress.ip_address(host) if _is_ip_address(host) else None
    use_cn = not (ip_names if host_ip is not None else dns_names)
    common_names = [
        attr.value for attr in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    ] if use_cn else []
    names = [*dns_names, *(str(ip) for ip in ip_names), *common_names]
    if any(_name_matches(pattern, host) for pattern in [*dns_names, *common_names]):
        return
    if host_ip is not None and host_ip in ip_names:
        return
    if not names:
        raise OperationalError(f"could not get the host name from the certificate of {where}")
    extra = len(names) - 1
    others = f" (and {extra} other name{'s' if extra > 1 else ''})" if extra else ""
    raise OperationalError(
        f"TLS certificate verification of {where} failed: host name mismatch: server "
        f'certificate for "{names[0]}"{others} does not match host name "{host}"'
    )


def _name_matches(pattern: str, host: str) -> bool:
    pattern, host = pattern.lower(), host.lower()
    if pattern == host:
        return True
    if len(pattern) < 3 or not pattern.startswith("*.") or len(pattern) > len(host):
        return False
    stem = host[: len(host) - len(pattern) + 1]
    return host.endswith(pattern[1:]) and "." not in stem
