"""TLS for a server connection: negotiation as libpq does it, client contexts, host names.

What ``sslmode`` asks for on one TCP connection:

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

import ipaddress
import os
import ssl

from gevent import socket
from gevent import ssl as gevent_ssl

from pgmux.errors import InterfaceError, OperationalError, ProtocolError
from pgmux.io.conninfo import ConnInfo, format_address, is_unix_host
from pgmux.io.conninfo_checks import VERIFYING_SSLMODES
from pgmux.protocol import startup

ALPN_PROTOCOL = "postgresql"

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


def plan_for(info: ConnInfo, force_tls: bool | None) -> str:
    """How to negotiate (PLAIN, REQUEST, REQUIRE or DIRECT) under ``info.sslmode``;
    ``force_tls`` as for ``open_transport``."""
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


# -- TLS negotiation -----------------------------------------------------------------------


def negotiate_tls(
    info: ConnInfo, context: ssl.SSLContext, sock: socket.socket, host: str, port: int,
    plan: str,
) -> ssl.SSLSocket | None:
    """Ask for TLS (unless direct) and do the handshake: the TLS socket, or None when the
    server declined and ``plan`` lets the connection go on in plaintext over ``sock``.

    On an exception ``sock`` is closed. A failed handshake is TLSHandshakeError.
    """
    name = format_address(host, port)
    try:
        if plan != DIRECT and not _request_tls(sock, name):
            if plan == REQUIRE:
                raise OperationalError(
                    f"server at {name} does not support SSL, but SSL was required"
                )
            return None
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
) -> ssl.SSLSocket:
    name = format_address(host, port)
    server_name = host if info.sslsni and not _is_ip_address(host) else None
    try:
        tls = context.wrap_socket(sock, server_hostname=server_name, do_handshake_on_connect=False)
    except BaseException:
        sock.close()
        raise
    try:
        _do_handshake(tls, name)
        if direct:
            _check_alpn(tls.selected_alpn_protocol(), name)
        if info.sslmode == "verify-full":
            check_host_name(tls.getpeercert(binary_form=True), host, name)
    except BaseException:
        _close_quietly(tls)
        raise
    return tls


def _close_quietly(tls: ssl.SSLSocket) -> None:
    try:
        tls.close()
    except Exception:
        pass


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
    common_names = [  # (a common name is a string; only a few other attributes are bytes)
        attr.value for attr in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        if isinstance(attr.value, str)
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
