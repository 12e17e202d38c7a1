"""psycopg2's names on pgmux's server errors: ``pgcode``, ``pgerror`` and ``diag``, checked
against what psycopg2 itself gives for the same errors from the same server."""

from __future__ import annotations

import pickle
import uuid

import psycopg2
import pytest

from pgmux import errors
from pgmux.errors import DIAGNOSTIC_FIELDS, DatabaseError

FIELDS = {"S": "ERROR", "V": "ERROR", "C": "23505", "M": "duplicate key value",
          "D": "Key (id)=(1) already exists.", "H": "a hint", "s": "public", "t": "items",
          "n": "items_pkey", "F": "nbtinsert.c", "L": "664", "R": "_bt_check_unique"}


def test_pgcode_is_sqlstate_and_pgerror_is_libpq_text():
    error = DatabaseError.from_fields(FIELDS)
    assert isinstance(error, errors.UniqueViolation)
    assert error.pgcode == error.sqlstate == "23505"
    assert error.pgerror == ("ERROR:  duplicate key value\nDETAIL:  Key (id)=(1) already "
                             "exists.\nHINT:  a hint\n")


def test_diag_names_every_field():
    diag = DatabaseError.from_fields(FIELDS).diag
    assert (diag.sqlstate, diag.message_primary, diag.message_detail, diag.message_hint) == (
        "23505", "duplicate key value", "Key (id)=(1) already exists.", "a hint")
    assert (diag.schema_name, diag.table_name, diag.constraint_name) == (
        "public", "items", "items_pkey")
    assert (diag.source_file, diag.source_line, diag.source_function) == (
        "nbtinsert.c", "664", "_bt_check_unique")
    assert diag.column_name is None and diag.statement_position is None
    assert diag.context is None and diag.datatype_name is None
    with pytest.raises(AttributeError):
        diag.not_a_field  # noqa: B018
    assert sorted(dir(diag)) == sorted(DIAGNOSTIC_FIELDS)


def test_own_failures_have_no_server_error():
    error = errors.NotDispatchedError("no connection")
    assert error.pgcode is None and error.pgerror is None
    assert error.diag.message_primary is None
    timeout = errors.QueryTimeout("gave up")
    timeout.sqlstate = "57014"  # as a confirmed cancel sets it
    assert timeout.pgcode == "57014"


def test_the_aliases_survive_pickling():
    error = pickle.loads(pickle.dumps(DatabaseError.from_fields(FIELDS)))
    assert error.pgcode == "23505" and error.diag.constraint_name == "items_pkey"
    assert error.pgerror.startswith("ERROR:  duplicate key value\n")


FAILING = [
    # (setup, failing statement): no error position, so libpq prints no LINE part
    ("CREATE TABLE {t} (id int PRIMARY KEY, n int CHECK (n > 0)); INSERT INTO {t} VALUES (1, 1)",
     "INSERT INTO {t} VALUES (1, 1)"),
    ("CREATE TABLE {t} (id int PRIMARY KEY, n int CHECK (n > 0))",
     "INSERT INTO {t} VALUES (2, -1)"),
    ("CREATE TABLE {t} (id int PRIMARY KEY, n int NOT NULL)",
     "INSERT INTO {t} (id) VALUES (3)"),
    ("", "SELECT 1/0"),
    ("", "DO $$ BEGIN RAISE EXCEPTION 'boom' USING DETAIL = 'the detail', HINT = 'the hint', "
         "ERRCODE = '22023'; END $$"),
]


@pytest.mark.parametrize(("setup", "statement"), FAILING)
def test_same_names_and_values_as_psycopg2(pg, clients, setup, statement):
    table = f"errs_{uuid.uuid4().hex[:8]}"
    if setup:
        pg.admin(setup.format(t=table))
    sql = statement.format(t=table)
    theirs = psycopg2.connect(pg.dsn)
    try:
        with pytest.raises(psycopg2.Error) as caught, theirs.cursor() as cur:
            cur.execute(sql)
    finally:
        theirs.close()
    expected = caught.value
    db = clients()
    with pytest.raises(DatabaseError) as mine, db.session() as session:
        session.execute(sql)
    error = mine.value
    assert error.pgcode == expected.pgcode
    assert error.pgerror == expected.pgerror
    for name in DIAGNOSTIC_FIELDS:
        assert getattr(error.diag, name) == getattr(expected.diag, name), name
    if setup:
        pg.admin(f"DROP TABLE {table}")


def test_statement_position_of_a_syntax_error(clients):
    db = clients()
    with pytest.raises(errors.ProgrammingError) as caught:
        db.query("SELECT * FROM nowhere_at_all")
    error = caught.value
    assert error.pgcode == "42P01" and error.diag.statement_position == "15"
    assert error.pgerror == 'ERROR:  relation "nowhere_at_all" does not exist\n'
