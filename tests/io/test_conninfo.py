"""Connection parameters: DSN parsing, environment, defaults, the password file, secrecy."""

from __future__ import annotations

import getpass
import logging
import os

import pytest
from support.connect import isolate_environment

from pgmux.errors import InterfaceError
from pgmux.io import conninfo, passfile
from pgmux.io.conninfo import ConnInfo, Endpoint, make_conninfo
from pgmux.io.conninfo_checks import AUTH_METHODS
from pgmux.io.dsn import parse_dsn
from pgmux.io.passfile import lookup_password, split_line

SECRET = "hunter2-secret"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    """No PG* variables, a fresh HOME, and no local socket directories."""
    return isolate_environment(monkeypatch, tmp_path, home=tmp_path / "home")


def write_passfile(path, text, mode=0o600):
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


# -- parse_dsn ---------------------------------------------------------------------------

URL_CASES = [
    ("postgresql://", {}),
    ("postgresql://localhost", {"host": "localhost"}),
    ("postgresql://localhost:5433", {"host": "localhost", "port": "5433"}),
    ("postgresql://localhost/mydb", {"host": "localhost", "dbname": "mydb"}),
    ("postgresql://user@localhost", {"user": "user", "host": "localhost"}),
    (
        "postgresql://user:secret@localhost",
        {"user": "user", "password": "secret", "host": "localhost"},
    ),
    ("postgresql://user:@h", {"user": "user", "password": "", "host": "h"}),
    (
        "postgres://other@localhost/otherdb?connect_timeout=10&application_name=myapp",
        {
            "user": "other", "host": "localhost", "dbname": "otherdb",
            "connect_timeout": "10", "application_name": "myapp",
        },
    ),
    (
        "postgresql://host1:123,host2:456/somedb?target_session_attrs=any",
        {"host": "host1,host2", "port": "123,456", "dbname": "somedb",
         "target_session_attrs": "any"},
    ),
    ("postgresql://h1,h2:5433", {"host": "h1,h2", "port": ",5433"}),
    ("postgresql://[::1]:5433/db", {"host": "::1", "port": "5433", "dbname": "db"}),
    ("postgresql://[2001:db8::1234]/database", {"host": "2001:db8::1234", "dbname": "database"}),
    ("postgresql://[::1],[fe80::2]:6000", {"host": "::1,fe80::2", "port": ",6000"}),
    ("postgresql://%2Fvar%2Flib%2Fpostgresql/dbname",
     {"host": "/var/lib/postgresql", "dbname": "dbname"}),
    ("postgresql:///dbname?host=/var/lib/postgresql",
     {"dbname": "dbname", "host": "/var/lib/postgresql"}),
    ("postgresql://:5433", {"port": "5433"}),
    (
        "postgresql://us%40r:p%40ss%3Aw%2Fd%20x@h/db%20name",
        {"user": "us@r", "password": "p@ss:w/d x", "host": "h", "dbname": "db name"},
    ),
    ("postgresql://h?ssl=true", {"host": "h", "sslmode": "require"}),
    ("postgresql://h?sslmode=verify-full&host=other", {"host": "other", "sslmode": "verify-full"}),
    ("postgresql://h/db?options=-c%20geqo%3Doff", {"host": "h", "dbname": "db",
                                                 "options": "-c geqo=off"}),
]


@pytest.mark.parametrize(("dsn", "expected"), URL_CASES)
def test_parse_url(dsn, expected):
    assert parse_dsn(dsn) == expected


KEYVALUE_CASES = [
    ("", {}),
    ("host=localhost port=5432 dbname=mydb",
     {"host": "localhost", "port": "5432", "dbname": "mydb"}),
    ("  host = localhost\tport= 5432  dbname =mydb  ",
     {"host": "localhost", "port": "5432", "dbname": "mydb"}),
    (r"password='a b\'c\\d'", {"password": "a b'c\\d"}),
    (r"password=a\ b", {"password": "a b"}),
    ("dbname=''", {"dbname": ""}),
    ("dbname= user=bob", {"dbname": "user=bob"}),
    ("application_name='x=y z'", {"application_name": "x=y z"}),
    ("host=h1,h2 port=5432,5433", {"host": "h1,h2", "port": "5432,5433"}),
    ("host=/tmp", {"host": "/tmp"}),
    ("host=a host=b", {"host": "b"}),
]


@pytest.mark.parametrize(("dsn", "expected"), KEYVALUE_CASES)
def test_parse_keyvalue(dsn, expected):
    assert parse_dsn(dsn) == expected


@pytest.mark.parametrize(
    "dsn", ["host=h sslmdoe=require", "postgresql://h/db?sslmdoe=require"]
)
def test_unknown_keyword_is_named(dsn):
    with pytest.raises(InterfaceError, match='invalid connection option "sslmdoe"'):
        parse_dsn(dsn)


MALFORMED = [
    f"password={SECRET} host",                     # missing "="
    f"password='{SECRET}",                         # unterminated quote
    f"password={SECRET[:7]} {SECRET[7:]}=x",      # an unquoted space in the password
    f"postgresql://u:{SECRET}%zz@h/db",            # bad percent escape
    f"postgresql://u:{SECRET}%00@h/db",            # %00
    f"postgresql://u:{SECRET}@[::1/db",            # missing "]"
    f"postgresql://u:{SECRET}@h/db?sslmode",       # query parameter without "="
    f"postgresql://u:{SECRET}@h/db?{SECRET[:7]}=1",  # unknown key inside the secret
]


@pytest.mark.parametrize("dsn", MALFORMED)
def test_malformed_dsn_never_echoes_the_password(dsn):
    with pytest.raises(InterfaceError) as caught:
        make_conninfo(dsn)
    message = str(caught.value)
    assert SECRET not in message
    assert SECRET[:7] not in message and SECRET[7:] not in message


# -- make_conninfo: precedence, environment, defaults ---------------------------------------


def test_defaults():
    info = make_conninfo()
    user = getpass.getuser()
    assert (info.hosts, info.ports, info.hostaddrs) == (("localhost",), (5432,), ())
    assert (info.user, info.dbname, info.password) == (user, user, None)
    assert info.sslmode == "prefer" and info.sslnegotiation == "postgres"
    assert info.channel_binding == "prefer" and info.max_protocol_version == "3.0"
    assert info.min_protocol_version == "3.0"
    assert (info.keepalives, info.keepalives_idle, info.keepalives_interval,
            info.keepalives_count) == (True, 60, 10, 5)
    assert info.connect_timeout is None and info.sslsni is True
    assert info.allow_cleartext_password is False and dict(info.server_settings) == {}


def test_default_host_is_a_socket_directory_with_a_server(monkeypatch, tmp_path):
    empty, serving = tmp_path / "empty", tmp_path / "serving"
    empty.mkdir()
    serving.mkdir()
    (serving / ".s.PGSQL.6543").touch()
    monkeypatch.setattr(conninfo, "LOCAL_SOCKET_DIRS", (str(empty), str(serving)))
    assert make_conninfo(port=6543).hosts == (str(serving),)
    assert make_conninfo(port=6544).hosts == ("localhost",)


def test_precedence_kwargs_over_dsn_over_environment(monkeypatch):
    monkeypatch.setenv("PGHOST", "envhost")
    monkeypatch.setenv("PGPORT", "1111")
    monkeypatch.setenv("PGUSER", "envuser")
    monkeypatch.setenv("PGDATABASE", "envdb")
    info = make_conninfo("host=dsnhost dbname=dsndb", port=2222)
    assert (info.hosts, info.ports, info.user, info.dbname) == (
        ("dsnhost",), (2222,), "envuser", "dsndb",
    )


ENVIRONMENT_CASES = [
    ("PGHOST", "db.example", "hosts", ("db.example",)),
    ("PGHOSTADDR", "10.1.2.3", "hostaddrs", ("10.1.2.3",)),
    ("PGPORT", "6000", "ports", (6000,)),
    ("PGUSER", "alice", "user", "alice"),
    ("PGDATABASE", "shop", "dbname", "shop"),
    ("PGPASSWORD", SECRET, "password", SECRET),
    ("PGSSLMODE", "require", "sslmode", "require"),
    ("PGSSLROOTCERT", "/etc/ca.pem", "sslrootcert", "/etc/ca.pem"),
    ("PGSSLCERT", "/etc/client.pem", "sslcert", "/etc/client.pem"),
    ("PGSSLKEY", "/etc/client.key", "sslkey", "/etc/client.key"),
    ("PGSSLSNI", "0", "sslsni", False),
    ("PGAPPNAME", "worker", "application_name", "worker"),
    ("PGCONNECT_TIMEOUT", "7", "connect_timeout", 7.0),
    ("PGOPTIONS", "-c geqo=off", "options", "-c geqo=off"),
    ("PGCHANNELBINDING", "require", "channel_binding", "require"),
    ("PGREQUIREAUTH", "scram-sha-256", "require_auth", "scram-sha-256"),
    ("PGTARGETSESSIONATTRS", "read-write", "target_session_attrs", "read-write"),
    ("PGMAXPROTOCOLVERSION", "3.0", "max_protocol_version", "3.0"),
    ("PGMINPROTOCOLVERSION", "3.2", "min_protocol_version", "3.2"),
    ("PGSSLMINPROTOCOLVERSION", "TLSv1.3", "ssl_min_protocol_version", "TLSv1.3"),
    ("PGLOADBALANCEHOSTS", "random", "load_balance_hosts", "random"),
]


@pytest.mark.parametrize(("variable", "value", "attribute", "expected"), ENVIRONMENT_CASES)
def test_environment_variables(monkeypatch, variable, value, attribute, expected):
    monkeypatch.setenv(variable, value)
    assert getattr(make_conninfo(), attribute) == expected


def test_sslnegotiation_from_environment(monkeypatch):
    monkeypatch.setenv("PGSSLNEGOTIATION", "direct")
    monkeypatch.setenv("PGSSLMODE", "require")
    assert make_conninfo().sslnegotiation == "direct"


def test_keyword_arguments_accept_python_types():
    info = make_conninfo(
        host=["a", "b"], port=[5432, 5433], sslsni=False, keepalives=0,
        connect_timeout=2.5, database="db", server_settings={"DateStyle": "ISO"},
    )
    assert info.hosts == ("a", "b") and info.ports == (5432, 5433)
    assert info.sslsni is False and info.keepalives is False
    assert info.connect_timeout == 2.5 and info.dbname == "db"
    assert dict(info.server_settings) == {"DateStyle": "ISO"}


def test_none_keyword_means_not_given(monkeypatch):
    monkeypatch.setenv("PGHOST", "envhost")
    assert make_conninfo(host=None).hosts == ("envhost",)


def test_unknown_keyword_argument():
    with pytest.raises(InterfaceError, match='"sslmdoe"'):
        make_conninfo(sslmdoe="require")


@pytest.mark.parametrize(
    ("value", "expected"), [("10", 10.0), ("2.5", 2.5), ("1", 1.0), ("0", None), ("-3", None)]
)
def test_connect_timeout_is_not_clamped(value, expected):
    assert make_conninfo(connect_timeout=value).connect_timeout == expected


def test_keepalive_zero_means_os_default():
    info = make_conninfo("keepalives_idle=0 keepalives_interval=3 tcp_user_timeout=9000")
    assert (info.keepalives_idle, info.keepalives_interval, info.tcp_user_timeout) == (
        None, 3, 9000,
    )


def test_fallback_application_name():
    assert make_conninfo(fallback_application_name="fb").application_name == "fb"
    info = make_conninfo(application_name="app", fallback_application_name="fb")
    assert info.application_name == "app"


def test_latest_protocol_version():
    assert make_conninfo(max_protocol_version="latest").max_protocol_version == "3.2"
    assert make_conninfo(max_protocol_version="3.2").max_protocol_version == "3.2"


def test_minimum_3_2_implies_the_latest_as_in_libpq_18():
    info = make_conninfo(min_protocol_version="3.2")
    assert (info.min_protocol_version, info.max_protocol_version) == ("3.2", "3.2")
    with pytest.raises(InterfaceError, match="min_protocol_version"):
        make_conninfo(min_protocol_version="3.2", max_protocol_version="3.0")


# -- hosts and ports --------------------------------------------------------------------------


def test_one_port_applies_to_every_host():
    info = make_conninfo(host="a,b,c", port=6000)
    assert info.ports == (6000, 6000, 6000)


def test_empty_port_entries_take_the_default():
    assert make_conninfo("postgresql://h1,h2:5433").ports == (5432, 5433)


def test_port_count_must_match_hosts():
    with pytest.raises(InterfaceError, match="could not match 2 port numbers to 3 hosts"):
        make_conninfo(host="a,b,c", port="1,2")


@pytest.mark.parametrize("port", ["abc", "0", "70000", "-1"])
def test_invalid_port(port):
    with pytest.raises(InterfaceError, match="invalid port number"):
        make_conninfo(port=port)


def test_hostaddr_alone_is_the_host():
    info = make_conninfo(hostaddr="127.0.0.1,::1")
    assert info.hosts == ("127.0.0.1", "::1") and info.hostaddrs == ("127.0.0.1", "::1")


def test_hostaddr_count_must_match_hosts():
    with pytest.raises(InterfaceError, match="hostaddr"):
        make_conninfo(host="a,b", hostaddr="127.0.0.1")


def test_empty_host_entry_takes_the_default():
    assert make_conninfo(host="a,,b").hosts == ("a", "localhost", "b")


def test_unix_socket_host_and_describe():
    info = make_conninfo(host="/run/pg", port=5433, user="u", dbname="d")
    assert info.describe() == "/run/pg:5433/d as u"
    assert conninfo.unix_socket_path("/run/pg", 5433) == "/run/pg/.s.PGSQL.5433"
    assert conninfo.unix_socket_path("@abstract", 5433) == "\0abstract/.s.PGSQL.5433"
    assert Endpoint("/run/pg", 5433).is_unix and Endpoint("@pg", 1).is_unix
    assert not Endpoint("localhost", 1).is_unix


def test_describe_brackets_ipv6():
    info = make_conninfo("postgresql://[::1]:5433,h:5434/db?user=u")
    assert info.describe() == "[::1]:5433,h:5434/db as u"


def test_endpoints_in_order_and_shuffled():
    info = make_conninfo(host="a,b,c", port="1,2,3", password=SECRET)
    assert info.endpoints() == [
        Endpoint("a", 1, None, SECRET),
        Endpoint("b", 2, None, SECRET),
        Endpoint("c", 3, None, SECRET),
    ]
    shuffled = make_conninfo(host="a,b,c", load_balance_hosts="random")
    orders = {tuple(e.host for e in shuffled.endpoints()) for _ in range(200)}
    assert all(sorted(order) == ["a", "b", "c"] for order in orders)
    assert len(orders) > 1


# -- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sslmode": "maybe"}, "invalid sslmode"),
        ({"sslnegotiation": "fast"}, "invalid sslnegotiation"),
        ({"channel_binding": "always"}, "invalid channel_binding"),
        ({"target_session_attrs": "writable"}, "invalid target_session_attrs"),
        ({"ssl_min_protocol_version": "SSLv3"}, "invalid ssl_min_protocol_version"),
        ({"ssl_min_protocol_version": "TLSv1.3", "ssl_max_protocol_version": "TLSv1.2"},
         "SSL protocol version range"),
        ({"sslnegotiation": "direct"}, 'weak sslmode "prefer"'),
        ({"sslnegotiation": "direct", "sslmode": "allow"}, 'weak sslmode "allow"'),
        ({"sslrootcert": "system", "sslmode": "require"}, "sslrootcert=system"),
        ({"keepalives": "maybe"}, "invalid boolean"),
        ({"keepalives_count": "x"}, "invalid integer"),
        ({"require_auth": "password,!md5"}, "mix"),
        ({"require_auth": "kerberos"}, "invalid require_auth"),
        ({"require_auth": "md5,md5"}, "more than once"),
        ({"service": "mydb"}, "service"),
        ({"replication": "database"}, "replication"),
        ({"gssencmode": "require"}, "GSSAPI"),
        ({"sslcertmode": "require"}, "sslcertmode=require"),
        ({"client_encoding": "LATIN1"}, "UTF8"),
        ({"server_settings": {"user": "x"}}, "may not set 'user'"),
        ({"server_settings": {"_pq_.x": "1"}}, "_pq_"),
    ],
)
def test_invalid_settings(kwargs, match):
    with pytest.raises(InterfaceError, match=match):
        make_conninfo(**kwargs)


def test_direct_negotiation_with_a_verifying_mode():
    info = make_conninfo(sslnegotiation="direct", sslmode="verify-ca")
    assert (info.sslnegotiation, info.sslmode) == ("direct", "verify-ca")


def test_system_root_store_implies_verify_full():
    assert make_conninfo(sslrootcert="system").sslmode == "verify-full"


def test_accepted_but_ignored_keywords():
    info = make_conninfo("krbsrvname=postgres gsslib=gssapi sslcompression=0 gssencmode=prefer")
    assert info.sslmode == "prefer"


@pytest.mark.parametrize(
    ("rule", "allowed"),
    [
        (None, AUTH_METHODS),
        ("scram-sha-256", {"scram-sha-256"}),
        ("scram-sha-256, md5", {"scram-sha-256", "md5"}),
        ("!password,!md5", AUTH_METHODS - {"password", "md5"}),
        ("none", {"none"}),
    ],
)
def test_require_auth(rule, allowed):
    assert make_conninfo(require_auth=rule).auth_methods_allowed() == allowed


def test_direct_construction_is_validated_too():
    info = ConnInfo(user="u", dbname="d", hosts=["a", "b"], ports=[5])
    assert info.hosts == ("a", "b") and info.ports == (5, 5)
    with pytest.raises(InterfaceError):
        ConnInfo(user="u", dbname="d", sslmode="nope")
    with pytest.raises(InterfaceError):
        ConnInfo(user="u", dbname="d", connect_timeout=0)


def test_server_settings_are_read_only():
    info = make_conninfo(server_settings={"DateStyle": "ISO"})
    with pytest.raises(TypeError):
        info.server_settings["TimeZone"] = "UTC"


# -- secrets ---------------------------------------------------------------------------------


def test_repr_and_describe_hide_secrets():
    info = make_conninfo(
        f"postgresql://u:{SECRET}@h/db", sslpassword=SECRET + "-key", application_name="app"
    )
    assert info.password == SECRET
    text = repr(info)
    assert SECRET not in text and "password=***" in text and "sslpassword=***" in text
    assert "application_name='app'" in text
    assert SECRET not in info.describe() and info.describe() == "h:5432/db as u"
    assert SECRET not in repr(info.endpoints()) and SECRET not in str(info)


def test_repr_shows_unset_secrets_as_none():
    text = repr(make_conninfo())
    assert "password=None" in text and "sslpassword=None" in text


def test_repr_hides_passwords_from_the_password_file(tmp_path):
    path = write_passfile(tmp_path / "pgpass", f"h:*:*:*:{SECRET}\nother:*:*:*:{SECRET}x\n")
    info = make_conninfo(host="h,other", passfile=path)
    assert info.password is None  # two hosts, two passwords
    assert SECRET not in repr(info)


# -- the password file -----------------------------------------------------------------------

PASSFILE = r"""# comment line: host:port:db:user:password
db.example:5432:shop:alice:alice-shop
db.example:5432:*:alice:alice-any
*:5433:*:*:port-5433
localhost:5432:*:bob:bob-local
/srv/sock:5432:*:bob:bob-socket
esc\:aped:5432:*:carol:colon\:pass\\word
star\*:*:*:dave:literal-star
*:*:*:erin:first:extra-field-ignored
*:*:*:*:catch-all
"""

LOOKUPS = [
    (("db.example", 5432, "shop", "alice"), "alice-shop"),
    (("db.example", 5432, "other", "alice"), "alice-any"),
    (("anything", 5433, "x", "y"), "port-5433"),
    (("localhost", 5432, "x", "bob"), "bob-local"),
    (("", 5432, "x", "bob"), "bob-local"),
    (("/srv/sock", 5432, "x", "bob"), "bob-socket"),
    (("esc:aped", 5432, "x", "carol"), "colon:pass\\word"),
    (("star*", 1, "x", "dave"), "literal-star"),
    (("starX", 1, "x", "dave"), "catch-all"),  # \* is a literal star, not a wildcard
    (("h", 1, "x", "erin"), "first"),
    (("nowhere", 1, "x", "zed"), "catch-all"),
]


@pytest.mark.parametrize(("args", "expected"), LOOKUPS)
def test_passfile_lookup(tmp_path, args, expected):
    path = write_passfile(tmp_path / "pgpass", PASSFILE)
    assert lookup_password(path, *args) == expected


def test_passfile_default_socket_directory_is_localhost(tmp_path, monkeypatch):
    path = write_passfile(tmp_path / "pgpass", "localhost:5432:*:*:via-localhost\n")
    monkeypatch.setattr(passfile, "LOCAL_SOCKET_DIRS", ("/var/run/postgresql",))
    assert lookup_password(path, "/var/run/postgresql", 5432, "d", "u") == "via-localhost"
    assert lookup_password(path, "/elsewhere", 5432, "d", "u") is None


def test_passfile_without_a_match_or_file(tmp_path):
    path = write_passfile(tmp_path / "pgpass", "h:1:d:u:p\n")
    assert lookup_password(path, "h", 2, "d", "u") is None
    assert lookup_password(str(tmp_path / "missing"), "h", 1, "d", "u") is None


def test_split_line_handles_short_lines_and_trailing_backslash():
    assert split_line("a:b:c") is None
    assert split_line("a:b:c:d:pw\\") == ["a", "b", "c", "d", "pw\\"]
    assert split_line("*:b:c:d:pw")[0] is passfile.WILDCARD
    assert split_line("\\*:b:c:d:pw")[0] is not passfile.WILDCARD


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
def test_insecure_passfile_is_ignored_with_a_quiet_warning(tmp_path, caplog, mode):
    path = write_passfile(tmp_path / "pgpass", f"*:*:*:*:{SECRET}\n", mode=mode)
    with caplog.at_level(logging.WARNING, logger="pgmux"):
        assert lookup_password(path, "h", 1, "d", "u") is None
    assert "group or world access" in caplog.text and SECRET not in caplog.text


def test_passfile_that_is_not_a_plain_file(tmp_path, caplog):
    directory = tmp_path / "dir"
    directory.mkdir(mode=0o700)
    with caplog.at_level(logging.WARNING, logger="pgmux"):
        assert lookup_password(str(directory), "h", 1, "d", "u") is None
    assert "not a plain file" in caplog.text


def test_make_conninfo_reads_the_password_file(tmp_path, monkeypatch, clean_environment):
    write_passfile(clean_environment / ".pgpass", f"h:5432:db:u:{SECRET}\n")
    assert make_conninfo(host="h", dbname="db", user="u").password == SECRET
    other = write_passfile(tmp_path / "other", "h:5432:db:u:from-env\n")
    monkeypatch.setenv("PGPASSFILE", other)
    assert make_conninfo(host="h", dbname="db", user="u").password == "from-env"
    assert make_conninfo(host="h", dbname="db", user="u", password="given").password == "given"


def test_password_per_host_from_the_password_file(tmp_path):
    path = write_passfile(tmp_path / "pgpass", "a:*:*:*:pw-a\nb:*:*:*:pw-b\n")
    info = make_conninfo(host="a,b,c", passfile=path)
    assert info.password is None
    assert [info.password_for(i) for i in range(3)] == ["pw-a", "pw-b", None]
    assert [e.password for e in info.endpoints()] == ["pw-a", "pw-b", None]
    same = make_conninfo(host="a,b", passfile=write_passfile(tmp_path / "p2", "*:*:*:*:pw\n"))
    assert same.password == "pw"


def test_empty_password_consults_the_password_file(tmp_path):
    path = write_passfile(tmp_path / "pgpass", "*:*:*:*:from-file\n")
    assert make_conninfo(password="", passfile=path).password == "from-file"
