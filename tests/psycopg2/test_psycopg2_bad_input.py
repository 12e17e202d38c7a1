"""Bad input gets psycopg2's error, with nothing lost: checked against psycopg2 itself on
the same server where both can be asked (a wrong DSN, an unknown keyword, a closed
connection, a cursor after its connection closed, a typecaster that raises, an adapter
that returns garbage, a malformed placeholder), and the handle works on afterwards."""

from __future__ import annotations

import psycopg2 as real_psycopg2
import psycopg2.extensions as real_extensions
import pytest

from pgmux import psycopg2
from pgmux.psycopg2 import extensions


def _kind(error: BaseException) -> tuple[str, ...]:
    """The names of an exception's classes up to Exception (module-independent)."""
    return tuple(cls.__name__ for cls in type(error).__mro__
                 if cls not in (Exception, BaseException, object))


def _raised(call):
    with pytest.raises(BaseException) as caught:
        call()
    return caught.value


def test_a_database_that_does_not_exist(pg):
    dsn = pg.dsn.rsplit("/", 1)[0] + "/no_such_database"
    mine = _raised(lambda: psycopg2.connect(dsn))
    theirs = _raised(lambda: real_psycopg2.connect(dsn))
    assert _kind(mine) == _kind(theirs) == ("OperationalError", "DatabaseError", "Error")
    assert 'database "no_such_database" does not exist' in str(mine)
    assert str(mine).startswith("connection to server at")


def test_an_unknown_keyword_and_a_malformed_dsn():
    for call in (lambda m: m.connect("dbname=x nosuchoption=1"),
                 lambda m: m.connect(dbname="x", nosuchoption=1),
                 lambda m: m.connect("dbname='unterminated")):
        mine = _raised(lambda call=call: call(psycopg2))
        theirs = _raised(lambda call=call: call(real_psycopg2))
        assert _kind(mine) == _kind(theirs) == ("ProgrammingError", "DatabaseError", "Error")
        assert str(mine).startswith("invalid dsn:")


def test_a_refused_connection_hides_the_password():
    dsn = "host=127.0.0.1 port=1 dbname=x user=u password=hunter2 connect_timeout=2"
    error = _raised(lambda: psycopg2.connect(dsn))
    assert isinstance(error, psycopg2.OperationalError)
    assert "hunter2" not in str(error)

    class Keeps(extensions.connection):
        def __init__(self, dsn):
            try:
                super().__init__(dsn)
            finally:
                self.seen = self.dsn

    failed = _raised(lambda: Keeps(dsn))
    assert isinstance(failed, psycopg2.OperationalError)


def test_a_closed_connection_and_its_cursors(connect, real):
    for module, conn in ((psycopg2, connect()), (real_psycopg2, real())):
        cur = conn.cursor()
        conn.close()
        conn.close()  # a second close does nothing, as psycopg2's
        assert conn.closed == 1 and cur.closed
        for call in (lambda cur=cur: cur.execute("SELECT 1"), conn.cursor, conn.commit,
                     lambda conn=conn: conn.set_session(autocommit=True)):
            assert isinstance(_raised(call), module.InterfaceError)


def test_a_closed_cursor(connect):
    conn = connect()
    cur = conn.cursor()
    cur.close()
    assert isinstance(_raised(lambda: cur.execute("SELECT 1")), psycopg2.InterfaceError)
    assert isinstance(_raised(cur.fetchone), psycopg2.InterfaceError)
    other = conn.cursor()
    other.execute("SELECT 1")
    assert other.fetchall() == [(1,)]


def test_a_typecaster_that_raises_reaches_the_caller_and_nothing_else(connect):
    conn = connect()
    bad = conn.cursor()
    extensions.register_type(extensions.new_type((23,), "BAD", lambda s, cur: 1 / 0), bad)
    bad.execute("SELECT 1::int4 UNION ALL SELECT 2")  # read at fetch, as psycopg2 reads
    with pytest.raises(ZeroDivisionError):
        bad.fetchone()
    good = conn.cursor()
    good.execute("SELECT 2::int4, %s", (3,))
    assert good.fetchone() == (2, 3)


class Garbage:
    pass


class Quoted:
    def __init__(self, value):
        self.value = value

    def getquoted(self):
        return self.value


@pytest.mark.parametrize("garbage", [42, None, object()])
def test_an_adapter_that_returns_garbage(connect, real, garbage):
    for module, ext, conn in ((psycopg2, extensions, connect()),
                              (real_psycopg2, real_extensions, real())):
        ext.register_adapter(Garbage, lambda obj: Quoted(garbage))
        try:
            error = _raised(lambda conn=conn: conn.cursor().execute("SELECT %s", (Garbage(),)))
        finally:
            del ext.adapters[(Garbage, ext.ISQLQuote)]
        assert type(error) is ValueError, (module.__name__, error)
        assert str(error) == f"only bytes values expected, got {type(garbage).__name__}"
        conn.rollback()
    cur = conn.cursor()
    cur.execute("SELECT 1")
    assert cur.fetchone() == (1,)


def test_an_adapter_whose_sql_the_server_refuses(connect):
    extensions.register_adapter(Garbage, lambda obj: extensions.AsIs("not sql at all"))
    try:
        conn = connect()
        error = _raised(lambda: conn.cursor().execute("SELECT %s", (Garbage(),)))
    finally:
        del extensions.adapters[(Garbage, extensions.ISQLQuote)]
    assert isinstance(error, psycopg2.errors.SyntaxError)
    assert error.pgcode == "42601" and error.cursor is not None
    conn.rollback()
    cur = conn.cursor()
    cur.execute("SELECT 1")
    assert cur.fetchone() == (1,)


@pytest.mark.parametrize(("sql", "params"), [
    ("SELECT %s", ()), ("SELECT %s", (1, 2)), ("SELECT %s %(a)s", {"a": 1}),
    ("SELECT %(a)s", {}), ("SELECT %d", (1,)), ("SELECT %(a", {"a": 1}),
    ("SELECT %s", 1), ("SELECT %s", ("a\x00b",)), ("SELECT %s", ({"a": 1},)),
])
def test_malformed_parameters_get_psycopg2s_error(connect, real, sql, params):
    mine = _raised(lambda: connect().cursor().execute(sql, params))
    theirs = _raised(lambda: real().cursor().execute(sql, params))
    assert _kind(mine) == _kind(theirs)
    assert str(mine) == str(theirs)


def test_a_caster_for_int4_changes_nothing_pgmux_reads_itself(connect):
    """pgmux's own queries on the drop-in's clients (pooler detection, server version,
    catalog look-ups) read integers, bools and text: a caster claiming those leaves them
    as they were, and the cursors get the caster's values."""
    caster = extensions.new_type((23,), "TAGGED", lambda s, cur: None if s is None else f"<{s}>")
    saved = extensions.string_types.copy()
    extensions.register_type(caster)
    try:
        conn = connect()
        assert isinstance(conn.server_version, int)
        assert isinstance(conn.get_backend_pid(), int)
        cur = conn.cursor()
        cur.execute("SELECT 1::int4, ARRAY[2, 3]::int4[], NULL::int4, %s", (4,))
        assert cur.fetchone() == ("<1>", [2, 3], None, "<4>")
    finally:
        extensions.string_types.clear()
        extensions.string_types.update(saved)
    cur.execute("SELECT 1::int4")
    assert cur.fetchone() == (1,)


def test_a_value_psycopg2_cannot_read_raises_when_its_row_is_fetched(connect, real):
    sql = "SELECT d FROM (VALUES ('2024-01-01'::date), ('10000-01-01'::date)) v(d)"
    for conn in (connect(), real()):
        cur = conn.cursor()
        cur.execute(sql)
        assert cur.fetchone()[0].year == 2024
        with pytest.raises(ValueError, match="year 10000 is out of range"):
            cur.fetchone()
        conn.rollback()
