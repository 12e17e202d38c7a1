"""``connection.info`` (psycopg2's ConnectionInfo), ``Notify``, ``Column`` and the table
of PostgreSQL encoding names."""

from __future__ import annotations

from typing import Any

from pgmux.psycopg2._handle import lease_of, pin

# PostgreSQL encoding name (as psycopg2 normalises it) -> Python codec.
encodings: dict[str, str] = {
    "ABC": "cp1258", "ALT": "cp866", "BIG5": "big5", "EUCCN": "euccn",
    "EUCJIS2004": "euc_jis_2004", "EUCJP": "euc_jp", "EUCKR": "euc_kr", "GB18030": "gb18030",
    "GBK": "gbk", "ISO88591": "iso8859_1", "ISO885910": "iso8859_10",
    "ISO885913": "iso8859_13", "ISO885914": "iso8859_14", "ISO885915": "iso8859_15",
    "ISO885916": "iso8859_16", "ISO88592": "iso8859_2", "ISO88593": "iso8859_3",
    "ISO88595": "iso8859_5", "ISO88596": "iso8859_6", "ISO88597": "iso8859_7",
    "ISO88598": "iso8859_8", "ISO88599": "iso8859_9", "JOHAB": "johab", "KOI8": "koi8_r",
    "KOI8R": "koi8_r", "KOI8U": "koi8_u", "LATIN1": "iso8859_1", "LATIN10": "iso8859_16",
    "LATIN2": "iso8859_2", "LATIN3": "iso8859_3", "LATIN4": "iso8859_4",
    "LATIN5": "iso8859_9", "LATIN6": "iso8859_10", "LATIN7": "iso8859_13",
    "LATIN8": "iso8859_14", "LATIN9": "iso8859_15", "MSKANJI": "cp932", "SHIFTJIS": "cp932",
    "SHIFTJIS2004": "shift_jis_2004", "SJIS": "cp932", "SQLASCII": "ascii",
    "TCVN": "cp1258", "TCVN5712": "cp1258", "UHC": "cp949", "UNICODE": "utf_8",
    "UTF8": "utf_8", "VSCII": "cp1258", "WIN": "cp1251", "WIN1250": "cp1250",
    "WIN1251": "cp1251", "WIN1252": "cp1252", "WIN1253": "cp1253", "WIN1254": "cp1254",
    "WIN1255": "cp1255", "WIN1256": "cp1256", "WIN1257": "cp1257", "WIN1258": "cp1258",
    "WIN866": "cp866", "WIN874": "cp874", "WIN932": "cp932", "WIN936": "gbk",
    "WIN949": "cp949", "WIN950": "cp950", "WINDOWS932": "cp932", "WINDOWS936": "gbk",
    "WINDOWS949": "cp949", "WINDOWS950": "cp950",
}


class Notify:
    """A notification received on a LISTENing connection: ``pid``, ``channel``,
    ``payload``; compares and unpacks as ``(pid, channel)``."""

    __slots__ = ("pid", "channel", "payload")

    def __init__(self, pid: int, channel: str, payload: str = "") -> None:
        self.pid, self.channel, self.payload = pid, channel, payload

    def __getitem__(self, index: int) -> Any:
        return (self.pid, self.channel)[index]

    def __len__(self) -> int:
        return 2

    def __iter__(self) -> Any:
        return iter((self.pid, self.channel))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Notify):
            return (self.pid, self.channel, self.payload) == (
                other.pid, other.channel, other.payload)
        if isinstance(other, tuple):
            return (self.pid, self.channel) == other
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        if self.payload:
            return hash((self.pid, self.channel, self.payload))
        return hash((self.pid, self.channel))

    def __repr__(self) -> str:
        return f"Notify({self.pid!r}, {self.channel!r}, {self.payload!r})"


class Column:
    """One item of ``cursor.description``: a 7-item sequence with names, plus
    ``table_oid`` and ``table_column``."""

    __slots__ = ("name", "type_code", "display_size", "internal_size", "precision", "scale",
                 "null_ok", "table_oid", "table_column")

    def __init__(self, name: Any = None, type_code: Any = None, display_size: Any = None,
                 internal_size: Any = None, precision: Any = None, scale: Any = None,
                 null_ok: Any = None, table_oid: Any = None, table_column: Any = None) -> None:
        self.name, self.type_code, self.display_size = name, type_code, display_size
        self.internal_size, self.precision, self.scale = internal_size, precision, scale
        self.null_ok, self.table_oid, self.table_column = null_ok, table_oid, table_column

    def _seq(self) -> tuple[Any, ...]:
        return (self.name, self.type_code, self.display_size, self.internal_size,
                self.precision, self.scale, self.null_ok)

    def __getitem__(self, index: Any) -> Any:
        return self._seq()[index]

    def __len__(self) -> int:
        return 7

    def __iter__(self) -> Any:
        return iter(self._seq())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Column):
            return self._seq() == other._seq()
        if isinstance(other, tuple):
            return self._seq() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._seq())

    def __repr__(self) -> str:
        return f"Column(name={self.name!r}, type_code={self.type_code!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)


class ConnectionInfo:
    """``connection.info``: what libpq's connection tells, for a pgmux handle."""

    def __init__(self, connection: Any) -> None:
        self._conn = connection

    @property
    def pgmux_handle(self) -> Any:
        conn = self._conn
        return conn.pgmux_handle if not conn.closed else None

    def _conninfo(self, name: str) -> Any:
        dbconn = self.pgmux_handle
        return None if dbconn is None else getattr(dbconn.client.conninfo, name)

    @property
    def dbname(self) -> str | None:
        return self._conninfo("dbname")

    @property
    def user(self) -> str | None:
        return self._conninfo("user")

    @property
    def password(self) -> str | None:
        dbconn = self.pgmux_handle
        if dbconn is None:
            return None
        return dbconn.client.conninfo.password_for(0) or ""

    @property
    def host(self) -> str | None:
        hosts = self._conninfo("hosts")
        return hosts[0] if hosts else None

    @property
    def port(self) -> int | None:
        ports = self._conninfo("ports")
        return int(ports[0]) if ports else None

    @property
    def options(self) -> str | None:
        dbconn = self.pgmux_handle
        return None if dbconn is None else (dbconn.client.conninfo.options or "")

    @property
    def dsn_parameters(self) -> dict[str, str]:
        from pgmux.psycopg2._dsn import parse_dsn

        conn = self._conn
        if self.pgmux_handle is None:
            return {}
        params = {"user": self.user or "", "dbname": self.dbname or "",
                  "host": self.host or "", "port": str(self.port or ""),
                  "options": self.options or "", "sslmode": "prefer"}
        params.update({k: v for k, v in parse_dsn(conn.dsn or "").items()
                       if k not in ("password",)})
        return params

    @property
    def status(self) -> int:
        return 0 if self.pgmux_handle is not None and not self._conn.closed else 1

    @property
    def transaction_status(self) -> int:
        dbconn = self.pgmux_handle
        if dbconn is None:
            return 4
        return int(dbconn.info.transaction_status)

    def parameter_status(self, name: str) -> str | None:
        dbconn = self.pgmux_handle
        if dbconn is None:
            return None
        return self._conn.pgmux_call(lambda: dbconn.info.parameter_status(name))

    @property
    def protocol_version(self) -> int:
        return 3 if self.pgmux_handle is not None else 0

    @property
    def server_version(self) -> int:
        return self._conn.server_version if self.pgmux_handle is not None else 0

    @property
    def error_message(self) -> str | None:
        if self.pgmux_handle is None:
            return "connection pointer is NULL\n"
        return self._conn.last_error

    @property
    def socket(self) -> int:
        if self.pgmux_handle is None:
            return -1
        return self._conn.fileno()

    @property
    def backend_pid(self) -> int:
        """The server process of the handle's pinned connection; a handle holding none
        takes one now and keeps it until close() (see ``get_backend_pid``)."""
        dbconn = self.pgmux_handle
        if dbconn is None:
            return 0
        return int(self._conn.pgmux_call(lambda: pin(dbconn, "the backend pid was asked")
                                         and dbconn.on_lease(lambda lease: lease.pid)))

    @property
    def needs_password(self) -> bool:
        return False

    @property
    def used_password(self) -> bool:
        return bool(self.password)

    @property
    def ssl_in_use(self) -> bool:
        lease = lease_of(self.pgmux_handle)
        if lease is None:
            return bool(self._conninfo("sslmode") in ("require", "verify-ca", "verify-full"))
        return bool(lease.tls)

    def ssl_attribute(self, name: str) -> str | None:
        return None

    @property
    def ssl_attribute_names(self) -> list[str]:
        return ["library", "protocol", "key_bits", "cipher", "compression"]
