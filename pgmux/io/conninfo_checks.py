"""The checks a ConnInfo passes when it is made: accepted values, consistent combinations."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pgmux.errors import InterfaceError

if TYPE_CHECKING:
    from pgmux.io.conninfo import ConnInfo

SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
VERIFYING_SSLMODES = ("require", "verify-ca", "verify-full")
TLS_VERSIONS = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")
AUTH_METHODS = frozenset({"password", "md5", "gss", "sspi", "scram-sha-256", "none"})

# ConnInfo field -> the values it accepts.
CHOICES: dict[str, tuple[Any, ...]] = {
    "sslmode": SSLMODES,
    "sslnegotiation": ("postgres", "direct"),
    "sslcertmode": ("disable", "allow"),
    "channel_binding": ("disable", "prefer", "require"),
    "min_protocol_version": ("3.0", "3.2"),
    "max_protocol_version": ("3.0", "3.2"),
    "ssl_min_protocol_version": TLS_VERSIONS,
    "ssl_max_protocol_version": (None, *TLS_VERSIONS),
    "target_session_attrs": (
        "any", "read-write", "read-only", "primary", "standby", "prefer-standby",
    ),
    "load_balance_hosts": ("disable", "random"),
}
# Startup parameters that have their own ConnInfo field or are set by pgmux itself.
RESERVED_STARTUP_PARAMS = frozenset(
    {"user", "database", "options", "application_name", "replication", "client_encoding"}
)


def normalized_hosts(
    hosts: Iterable[str], ports: Iterable[int], hostaddrs: Iterable[str]
) -> tuple[tuple[str, ...], tuple[int, ...], tuple[str, ...]]:
    """(hosts, ports, hostaddrs) as tuples, one port per host; InterfaceError if they do
    not match up."""
    hosts, ports, hostaddrs = tuple(hosts), tuple(ports), tuple(hostaddrs)
    if not hosts or not all(isinstance(h, str) and h for h in hosts):
        raise InterfaceError("at least one host is needed and host names must not be empty")
    if len(ports) == 1:
        ports *= len(hosts)
    if len(ports) != len(hosts):
        raise InterfaceError(f"could not match {len(ports)} port numbers to {len(hosts)} hosts")
    for port in ports:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise InterfaceError(f"invalid port number: {port!r}")
    if hostaddrs and len(hostaddrs) != len(hosts):
        raise InterfaceError(
            f"could not match {len(hosts)} host names to {len(hostaddrs)} hostaddr values"
        )
    return hosts, ports, hostaddrs


def check_fields(info: ConnInfo) -> None:
    """Raise InterfaceError unless every field of ``info`` has a value it may have."""
    _check_choices(info)
    _check_combinations(info)
    _check_numbers(info)
    auth_methods_allowed(info.require_auth)


def _check_choices(info: ConnInfo) -> None:
    for name, allowed in CHOICES.items():
        value = getattr(info, name)
        if value not in allowed:
            shown = ", ".join(repr(a) for a in allowed if a is not None)
            raise InterfaceError(f"invalid {name} value {value!r}: expected one of {shown}")


def _check_combinations(info: ConnInfo) -> None:
    if info.sslnegotiation == "direct" and info.sslmode not in VERIFYING_SSLMODES:
        raise InterfaceError(
            f'weak sslmode "{info.sslmode}" may not be used with sslnegotiation=direct '
            '(use "require", "verify-ca" or "verify-full")'
        )
    if info.sslrootcert == "system" and info.sslmode != "verify-full":
        raise InterfaceError(
            f'weak sslmode "{info.sslmode}" may not be used with sslrootcert=system '
            '(use "verify-full")'
        )
    if info.min_protocol_version > info.max_protocol_version:
        raise InterfaceError(
            f"min_protocol_version {info.min_protocol_version} is greater than "
            f"max_protocol_version {info.max_protocol_version}"
        )
    versions = (info.ssl_min_protocol_version, info.ssl_max_protocol_version)
    if versions[1] and TLS_VERSIONS.index(versions[0]) > TLS_VERSIONS.index(versions[1]):
        raise InterfaceError("invalid SSL protocol version range")


def _check_numbers(info: ConnInfo) -> None:
    if info.connect_timeout is not None and not info.connect_timeout > 0:
        raise InterfaceError("connect_timeout must be positive (or None for no limit)")
    for name in ("keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout"):
        value = getattr(info, name)
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise InterfaceError(f"{name} must be a positive integer or None")


def checked_server_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``settings``; InterfaceError for a non-string or a reserved name."""
    copy = dict(settings)
    for name, value in copy.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InterfaceError("server_settings names and values must be strings")
        if name in RESERVED_STARTUP_PARAMS or name.startswith("_pq_."):
            raise InterfaceError(f"server_settings may not set {name!r}")
    return copy


def auth_methods_allowed(require_auth: str | None) -> frozenset[str]:
    """Parse libpq's ``require_auth`` ("scram-sha-256,md5" or "!password,!md5")."""
    if require_auth is None:
        return AUTH_METHODS
    items = [item.strip() for item in require_auth.split(",")]
    negated = {item.startswith("!") for item in items}
    if len(negated) != 1:
        raise InterfaceError("require_auth may not mix negated and non-negated methods")
    names = [item.lstrip("!") for item in items]
    unknown = [name for name in names if name not in AUTH_METHODS]
    if unknown:
        raise InterfaceError(f"invalid require_auth method: {unknown[0]!r}")
    if len(set(names)) != len(names):
        raise InterfaceError("require_auth names a method more than once")
    return AUTH_METHODS - set(names) if negated.pop() else frozenset(names)
