"""Connection parameters as libpq understands them: the model, PG* variables, defaults.

Precedence is keyword arguments > DSN > PG* environment variables > defaults. Keyword
names are libpq's (``host``, ``port``, ``sslmode``, ...). Choices that differ from libpq:

* ``connect_timeout`` may be fractional and is not raised to libpq's old 2 s minimum;
  zero or negative means no limit.
* keepalives default to idle 60 s, interval 10 s, count 5 (a dead peer is noticed in
  about two minutes instead of the OS's two hours); 0 leaves the OS default.
* The default host is the first of ``LOCAL_SOCKET_DIRS`` that holds the server's socket
  when the connection info is made, else ``localhost``.
* Default TLS files (``~/.postgresql/root.crt``, ``postgresql.crt``, ``postgresql.key``,
  ``root.crl``) are looked up when connecting, as libpq does; None in a field means that.
* GSSAPI, service files and replication connections are not supported.

As in libpq 18, protocol 3.0 is requested unless ``max_protocol_version`` says otherwise
(3.2 only on request, or when ``min_protocol_version`` is 3.2): a pooler such as PgBouncer
1.18 refuses the 3.2 startup packet instead of negotiating it down.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pgmux.errors import InterfaceError
from pgmux.io.conninfo_checks import (
    auth_methods_allowed,
    check_fields,
    checked_server_settings,
    normalized_hosts,
)
from pgmux.io.dsn import KEYWORDS, SECRET_FIELDS, parse_dsn
from pgmux.io.passfile import LOCAL_SOCKET_DIRS, default_passfile, lookup_password

DEFAULT_PORT = 5432
KWARG_ALIASES = {"database": "dbname"}


def is_unix_host(host: str) -> bool:
    """A socket directory ("/path") or a Linux abstract socket ("@name")."""
    return host.startswith(("/", "@"))


def unix_socket_path(host: str, port: int) -> str:
    """The socket file of a server: ``<dir>/.s.PGSQL.<port>`` ("@" means abstract)."""
    name = f".s.PGSQL.{port}"
    if host.startswith("@"):
        return "\0" + host[1:] + "/" + name
    return os.path.join(host, name)


def format_address(host: str, port: int) -> str:
    """``host:port`` for messages, with IPv6 literals in brackets."""
    if ":" in host and not is_unix_host(host):
        return f"[{host}]:{port}"
    return f"{host}:{port}"


@dataclass(frozen=True)
class Endpoint:
    """One server to try: host (or socket directory), port, optional address, password."""

    host: str
    port: int
    hostaddr: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def is_unix(self) -> bool:
        return is_unix_host(self.host)

    def describe(self) -> str:
        return format_address(self.host, self.port)


@dataclass(frozen=True, kw_only=True, repr=False)
class ConnInfo:
    """Validated connection parameters. Build it with :func:`make_conninfo`."""

    user: str
    dbname: str
    hosts: tuple[str, ...] = ("localhost",)
    ports: tuple[int, ...] = (DEFAULT_PORT,)  # one per host after validation
    hostaddrs: tuple[str, ...] = ()
    password: str | None = field(default=None, repr=False)
    passfile: str | None = None
    application_name: str | None = None
    options: str | None = None
    connect_timeout: float | None = None
    sslmode: str = "prefer"
    sslnegotiation: str = "postgres"
    sslrootcert: str | None = None  # None: ~/.postgresql/root.crt if it exists
    sslcert: str | None = None  # None: ~/.postgresql/postgresql.crt if it exists
    sslkey: str | None = None  # None: ~/.postgresql/postgresql.key
    sslpassword: str | None = field(default=None, repr=False)
    sslcrl: str | None = None  # None: ~/.postgresql/root.crl if it exists
    sslcrldir: str | None = None
    sslsni: bool = True
    sslcertmode: str = "allow"
    ssl_min_protocol_version: str = "TLSv1.2"
    ssl_max_protocol_version: str | None = None
    channel_binding: str = "prefer"
    require_auth: str | None = None
    min_protocol_version: str = "3.0"
    max_protocol_version: str = "3.0"  # libpq 18's default; "3.2" (or "latest") opts in
    keepalives: bool = True
    keepalives_idle: int | None = 60
    keepalives_interval: int | None = 10
    keepalives_count: int | None = 5
    tcp_user_timeout: int | None = None  # milliseconds
    target_session_attrs: str = "any"
    load_balance_hosts: str = "disable"
    requirepeer: str | None = None
    allow_cleartext_password: bool = False  # pgmux: allow a cleartext password over plain TCP
    server_settings: Mapping[str, str] = field(default_factory=dict)
    # Passwords found in the password file, one per host (used when `password` is None).
    passfile_passwords: tuple[str | None, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        hosts, ports, hostaddrs = normalized_hosts(self.hosts, self.ports, self.hostaddrs)
        object.__setattr__(self, "hosts", hosts)
        object.__setattr__(self, "ports", ports)
        object.__setattr__(self, "hostaddrs", hostaddrs)
        check_fields(self)
        settings = checked_server_settings(self.server_settings)
        object.__setattr__(self, "server_settings", MappingProxyType(settings))

    def __repr__(self) -> str:
        parts = []
        for spec in dataclasses.fields(self):
            if spec.name == "passfile_passwords":
                continue
            value = getattr(self, spec.name)
            if spec.name in SECRET_FIELDS:
                value = None if value is None else "***"
                parts.append(f"{spec.name}={value}")
            elif spec.name == "server_settings":
                parts.append(f"server_settings={dict(value)!r}")
            else:
                parts.append(f"{spec.name}={value!r}")
        return f"ConnInfo({', '.join(parts)})"

    def describe(self) -> str:
        """``host:port/dbname as user`` (all hosts, comma separated); no secrets."""
        pairs = zip(self.hosts, self.ports, strict=True)
        addresses = ",".join(format_address(host, port) for host, port in pairs)
        return f"{addresses}/{self.dbname} as {self.user}"

    def password_for(self, index: int) -> str | None:
        """The password for the host at ``index``: explicit, else from the password file."""
        if self.password is not None:
            return self.password
        if index < len(self.passfile_passwords):
            return self.passfile_passwords[index]
        return None

    def endpoints(self) -> list[Endpoint]:
        """The hosts to try, in order (shuffled when ``load_balance_hosts="random"``)."""
        result = [
            Endpoint(
                host,
                self.ports[index],
                self.hostaddrs[index] if self.hostaddrs else None,
                self.password_for(index),
            )
            for index, host in enumerate(self.hosts)
        ]
        if self.load_balance_hosts == "random":
            random.shuffle(result)
        return result

    def auth_methods_allowed(self) -> frozenset[str]:
        """The authentication methods ``require_auth`` lets the server ask for."""
        return auth_methods_allowed(self.require_auth)


# -- building a ConnInfo ---------------------------------------------------------------


def make_conninfo(dsn: str | None = None, **kwargs: Any) -> ConnInfo:
    """Combine keyword arguments > ``dsn`` > PG* environment > defaults into a ConnInfo.

    Keyword arguments use libpq names (plus ``server_settings``, a mapping of extra
    startup parameters, and the alias ``database``); None means "not given".
    """
    server_settings = kwargs.pop("server_settings", None) or {}
    settings = _from_environment()
    if dsn:
        settings.update(parse_dsn(dsn))
    settings.update(_from_kwargs(kwargs))
    return _build(settings, server_settings)


def _from_environment() -> dict[str, str]:
    return {
        key: os.environ[var]
        for key, var in KEYWORDS.items()
        if var is not None and os.environ.get(var)
    }


def _from_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    settings = {}
    for key, value in kwargs.items():
        key = KWARG_ALIASES.get(key, key)
        if key not in KEYWORDS:
            raise InterfaceError(f'invalid connection option "{key}"')
        if value is None:
            continue
        if isinstance(value, (list, tuple)) and key in ("host", "hostaddr", "port"):
            value = ",".join(str(item) for item in value)
        settings[key] = value
    return settings


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("on", "true", "yes", "t", "y"):
        return True
    if text in ("off", "false", "no", "f", "n"):
        return False
    try:
        return int(text) != 0
    except ValueError:
        raise InterfaceError(f"invalid boolean value {value!r} for {name}") from None


def _as_int(name: str, value: Any) -> int:
    try:
        if isinstance(value, bool):
            raise ValueError
        return int(value)
    except (TypeError, ValueError):
        raise InterfaceError(f"invalid integer value {value!r} for {name}") from None


def _as_positive_int_or_none(name: str, value: Any) -> int | None:
    number = _as_int(name, value)
    if number < 0:
        raise InterfaceError(f"{name} must not be negative")
    return number or None  # 0 means "the OS default"


def _as_timeout(name: str, value: Any) -> float | None:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise InterfaceError(f"invalid value {value!r} for {name}") from None
    return seconds if seconds > 0 else None


def _as_protocol_version(name: str, value: Any) -> str:
    text = str(value)
    return "3.2" if text == "latest" else text


def _as_text(name: str, value: Any) -> str:
    return str(value)


def _as_text_or_none(name: str, value: Any) -> str | None:
    return str(value) or None


def _as_path(name: str, value: Any) -> str:
    return os.fspath(value)


# ConnInfo fields set straight from a keyword, with their converters.
CONVERTERS: dict[str, Callable[[str, Any], Any]] = {
    "application_name": _as_text,
    "options": _as_text,
    "connect_timeout": _as_timeout,
    "sslnegotiation": _as_text,
    "sslrootcert": _as_path,
    "sslcert": _as_path,
    "sslkey": _as_path,
    "sslpassword": _as_text,
    "sslcrl": _as_path,
    "sslcrldir": _as_path,
    "sslsni": _as_bool,
    "sslcertmode": _as_text,
    "ssl_min_protocol_version": _as_text,
    "ssl_max_protocol_version": _as_text_or_none,
    "channel_binding": _as_text,
    "require_auth": _as_text_or_none,
    "min_protocol_version": _as_protocol_version,
    "max_protocol_version": _as_protocol_version,
    "keepalives": _as_bool,
    "keepalives_idle": _as_positive_int_or_none,
    "keepalives_interval": _as_positive_int_or_none,
    "keepalives_count": _as_positive_int_or_none,
    "tcp_user_timeout": _as_positive_int_or_none,
    "target_session_attrs": _as_text,
    "load_balance_hosts": _as_text,
    "requirepeer": _as_text_or_none,
    "allow_cleartext_password": _as_bool,
}


def _check_unsupported(settings: Mapping[str, Any]) -> None:
    if settings.get("service"):
        raise InterfaceError("connection service files (service=, PGSERVICE) are not supported")
    if "replication" in settings and str(settings["replication"]).lower() not in (
        "", "0", "false", "off", "no",
    ):
        raise InterfaceError("replication connections are not supported")
    if str(settings.get("sslcertmode", "allow")) == "require":
        raise InterfaceError(
            "sslcertmode=require is not supported (Python's ssl module cannot tell whether "
            "the server asked for a client certificate)"
        )
    if str(settings.get("gssencmode", "prefer")) not in ("disable", "prefer"):
        raise InterfaceError("GSSAPI encryption is not supported (gssencmode must not be require)")
    encoding = str(settings.get("client_encoding", "UTF8")).upper().replace("-", "")
    if encoding not in ("UTF8", "UNICODE", "AUTO"):
        raise InterfaceError("pgmux always uses client_encoding UTF8")


def _build(settings: dict[str, Any], server_settings: Mapping[str, str]) -> ConnInfo:
    _check_unsupported(settings)
    ports = _parse_ports(settings.get("port"))
    hostaddrs = tuple(_split(settings.get("hostaddr")))
    hosts = _resolve_hosts(_split(settings.get("host")), hostaddrs, ports[0])
    if len(ports) == 1:
        ports = ports * len(hosts)
    user = str(settings.get("user") or _os_user())
    dbname = str(settings.get("dbname") or user)
    values = {name: convert(name, settings[name]) for name, convert in CONVERTERS.items()
              if name in settings}
    if "application_name" not in values and settings.get("fallback_application_name"):
        values["application_name"] = str(settings["fallback_application_name"])
    if "max_protocol_version" not in values and values.get("min_protocol_version") == "3.2":
        values["max_protocol_version"] = "3.2"  # libpq: a higher minimum implies the latest
    if "sslmode" in settings:
        values["sslmode"] = str(settings["sslmode"])
    elif values.get("sslrootcert") == "system":
        values["sslmode"] = "verify-full"  # libpq: the system store implies verify-full
    password = str(settings.get("password") or "") or None
    passfile = str(settings.get("passfile") or default_passfile())
    found: tuple[str | None, ...] = ()
    if password is None and len(ports) == len(hosts):
        pairs = zip(hosts, ports, strict=True)
        found = tuple(lookup_password(passfile, h, p, dbname, user) for h, p in pairs)
        if len(set(found)) == 1:
            password = found[0]
    return ConnInfo(
        hosts=hosts, ports=ports, hostaddrs=hostaddrs, user=user, dbname=dbname,
        password=password, passfile=passfile, passfile_passwords=found,
        server_settings=server_settings, **values,
    )


def _split(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    return [item.strip() for item in str(value).split(",")]


def _parse_ports(value: Any) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    items = _split(value) or [""]
    ports = []
    for item in items:
        if not item:
            ports.append(DEFAULT_PORT)
        elif item.isdigit() and 0 < int(item) < 65536:
            ports.append(int(item))
        else:
            raise InterfaceError(f'invalid port number: "{item}"')
    return tuple(ports)


def _resolve_hosts(hosts: list[str], hostaddrs: Iterable[str], port: int) -> tuple[str, ...]:
    """Fill empty host entries: from hostaddr when given, else the default host."""
    addrs = list(hostaddrs)
    if not hosts:
        hosts = [""] * max(len(addrs), 1)
    if addrs and len(addrs) != len(hosts):
        raise InterfaceError(
            f"could not match {len(hosts)} host names to {len(addrs)} hostaddr values"
        )
    return tuple(
        host or (addrs[index] if addrs else default_host(port))
        for index, host in enumerate(hosts)
    )


def default_host(port: int = DEFAULT_PORT) -> str:
    """The first local socket directory with a server on ``port``, else ``localhost``."""
    for directory in LOCAL_SOCKET_DIRS:
        if os.path.exists(unix_socket_path(directory, port)):
            return directory
    return "localhost"


def _os_user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        raise InterfaceError("could not determine the OS user name; pass user=") from None
