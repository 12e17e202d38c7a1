"""The SQLSTATE -> exception class mapping of pgmux.errors and its generated table."""

from __future__ import annotations

import ast
import builtins
import importlib.util
import pickle
import sys
from pathlib import Path

import pytest

from pgmux import _sqlstate, errors
from pgmux.errors import DatabaseError, class_for_sqlstate

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_sqlstate", TOOLS / "gen_sqlstate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def _hand_written_classes() -> set[str]:
    tree = ast.parse((ROOT / "pgmux" / "errors.py").read_text())
    return {node.name for node in tree.body if isinstance(node, ast.ClassDef)}


@pytest.mark.parametrize(
    ("code", "name", "class_name"),
    [
        ("23505", "UniqueViolation", "IntegrityError"),
        ("22012", "DivisionByZero", "DataError"),
        ("40001", "SerializationFailure", "TransactionRollback"),
        ("57014", "QueryCanceled", "OperatorIntervention"),
        ("0A000", "FeatureNotSupported", "FeatureNotSupported"),
        ("26000", "InvalidSqlStatementName", "InvalidSqlStatementName"),
        ("25P02", "InFailedSqlTransaction", "InvalidTransactionState"),
        ("57P01", "AdminShutdown", "OperatorIntervention"),
        ("42P01", "UndefinedTable", "SyntaxErrorOrAccessRuleViolation"),
        ("28P01", "InvalidPassword", "InvalidAuthorizationSpecification"),
        ("42601", "SqlSyntaxError", "SyntaxErrorOrAccessRuleViolation"),
        ("XX000", "InternalError", "InternalError"),
    ],
)
def test_lookup_by_exact_code(code, name, class_name):
    cls = class_for_sqlstate(code)
    assert cls is getattr(errors, name)
    assert cls.__name__ == name
    assert issubclass(cls, getattr(errors, class_name))
    assert issubclass(cls, DatabaseError)


@pytest.mark.parametrize(
    ("code", "class_name"),
    [
        ("23999", "IntegrityError"),
        ("22ZZZ", "DataError"),
        ("42Q99", "SyntaxErrorOrAccessRuleViolation"),
    ],
)
def test_unknown_code_falls_back_to_its_class(code, class_name):
    assert class_for_sqlstate(code) is getattr(errors, class_name)


@pytest.mark.parametrize("code", ["ZZ999", "01000", "00000", "", None])
def test_unknown_class_is_database_error(code):
    assert class_for_sqlstate(code) is DatabaseError


def test_generic_000_code_is_its_class():
    for class_code, name in _sqlstate.CLASS_NAMES.items():
        generic = class_code + "000"
        if generic in _sqlstate.CODE_NAMES:
            assert _sqlstate.CODE_NAMES[generic] == name
            assert class_for_sqlstate(generic) is getattr(errors, name)


def test_every_code_maps_to_a_subclass_of_its_class():
    for code, name in _sqlstate.CODE_NAMES.items():
        cls = class_for_sqlstate(code)
        assert cls.__name__ == name
        assert issubclass(cls, getattr(errors, _sqlstate.CLASS_NAMES[code[:2]]))
        assert name in errors.__all__


def test_every_field_lands_on_its_attribute():
    fields = {code: f"value of {code}" for code in errors.FIELD_NAMES}
    fields["C"] = "23505"
    exc = DatabaseError.from_fields(fields)
    assert type(exc) is errors.UniqueViolation
    for code, attribute in errors.FIELD_NAMES.items():
        assert getattr(exc, attribute) == fields[code], attribute
    assert exc.fields == fields


def test_missing_fields_are_none():
    exc = DatabaseError.from_fields({"C": "22012", "M": "division by zero"})
    assert isinstance(exc, errors.DivisionByZero)
    assert exc.message == "division by zero"
    assert exc.detail is None and exc.constraint_name is None


def test_pickle_round_trip_keeps_subclass_and_fields():
    fields = {"S": "ERROR", "C": "23505", "M": "duplicate key", "D": "Key (id)=(1)", "n": "t_pkey"}
    original = DatabaseError.from_fields(fields)
    copy = pickle.loads(pickle.dumps(original))
    assert type(copy) is errors.UniqueViolation
    assert copy.fields == fields
    assert (copy.sqlstate, copy.message, copy.detail, copy.constraint_name) == (
        "23505",
        "duplicate key",
        "Key (id)=(1)",
        "t_pkey",
    )
    assert str(copy) == str(original)


# The SQLSTATE classes that are their own PEP 249 parent (the DB-API names of psycopg).
OWN_PARENTS = {"DataError", "IntegrityError", "InternalError"}


def test_generated_names_do_not_shadow_base_classes_or_builtins():
    generated = set(_sqlstate.CLASS_NAMES.values()) | set(_sqlstate.CODE_NAMES.values())
    hand_written = _hand_written_classes()
    assert "OperationalError" in hand_written and "DatabaseError" in hand_written
    assert generated & hand_written == OWN_PARENTS
    assert not (generated - OWN_PARENTS) & set(dir(builtins))
    for code, name in _sqlstate.CLASS_NAMES.items():
        if name in OWN_PARENTS:
            assert _sqlstate.CLASS_PARENTS[code] == name
            assert class_for_sqlstate(code + "999") is getattr(errors, name)


def test_class_and_code_names_are_unique():
    class_names = list(_sqlstate.CLASS_NAMES.values())
    assert len(set(class_names)) == len(class_names)
    specific = [n for c, n in _sqlstate.CODE_NAMES.items() if not c.endswith("000")]
    assert len(set(specific)) == len(specific)
    assert not set(specific) & set(class_names)


def test_tables_are_sorted():
    assert list(_sqlstate.CLASS_NAMES) == sorted(_sqlstate.CLASS_NAMES)
    assert list(_sqlstate.CODE_NAMES) == sorted(_sqlstate.CODE_NAMES)


def test_generated_file_is_up_to_date(tmp_path):
    out = tmp_path / "_sqlstate.py"
    generator = _load_generator()
    argv = [str(TOOLS / "errcodes.txt"), "--pg-version", _sqlstate.PG_VERSION, "-o", str(out)]
    assert generator.main(argv) == 0
    assert out.read_text() == (ROOT / "pgmux" / "_sqlstate.py").read_text()


def test_generator_refuses_a_name_that_shadows_a_builtin():
    generator = _load_generator()
    text = "Section: Class 7Q - Test\n7Q001    E    ERRCODE_X    syntax_error\n"
    with pytest.raises(ValueError, match="SyntaxError"):
        generator.generate(text, "0")


def test_generator_qualifies_a_repeated_condition_name():
    generator = _load_generator()
    text = (
        "Section: Class 7Q - First Thing\n7Q001    E    ERRCODE_A    same_name\n"
        "Section: Class 7R - Second Thing Exception\n7R001    E    ERRCODE_B    same_name\n"
        "7R002    W    ERRCODE_C    a_warning\n"
    )
    class_names, code_names, parents = generator.build(generator.parse(text))
    assert class_names == {"7Q": "FirstThing", "7R": "SecondThingException"}
    assert code_names == {"7Q001": "SameName", "7R001": "SecondThingSameName"}
    assert parents == {"7Q": "DatabaseError", "7R": "DatabaseError"}


def test_generator_refuses_a_dbapi_name_on_the_wrong_parent():
    generator = _load_generator()
    text = "Section: Class 7Q - Data Error\n7Q001    E    ERRCODE_X    something_odd\n"
    with pytest.raises(ValueError, match="named DataError but derives from DatabaseError"):
        generator.generate(text, "0")


# -- the PEP 249 tree --------------------------------------------------------------------

PEP249_TREE = {
    "Warning": Exception,
    "Error": Exception,
    "InterfaceError": errors.Error,
    "DatabaseError": errors.Error,
    "DataError": errors.DatabaseError,
    "OperationalError": errors.DatabaseError,
    "IntegrityError": errors.DatabaseError,
    "InternalError": errors.DatabaseError,
    "ProgrammingError": errors.DatabaseError,
    "NotSupportedError": errors.DatabaseError,
}


@pytest.mark.parametrize(("name", "parent"), PEP249_TREE.items())
def test_pep249_tree(name, parent):
    cls = getattr(errors, name)
    assert cls.__bases__ == (parent,)
    assert cls.__module__ == "pgmux.errors"
    assert name in errors.__all__


def test_warning_is_not_an_error():
    assert not issubclass(errors.Warning, errors.Error)
    assert errors.Warning is not Warning  # the PEP 249 class, not the builtin


@pytest.mark.parametrize(
    ("name", "parents"),
    [
        ("UnsafeMultiplexError", (errors.InterfaceError,)),
        ("ProtocolError", (errors.OperationalError,)),
        ("NotDispatchedError", (errors.OperationalError,)),
        ("IndeterminateResultError", (errors.OperationalError,)),
        ("QueryTimeout", (errors.OperationalError, TimeoutError)),
        ("PoolTimeout", (errors.OperationalError, TimeoutError)),
        ("PipelineAborted", (errors.OperationalError,)),
    ],
)
def test_pgmux_errors_in_the_tree(name, parents):
    """Where SQLAlchemy's wrapping (first PEP 249 name in the MRO) puts them."""
    cls = getattr(errors, name)
    assert cls.__bases__ == parents
    assert issubclass(cls, errors.Error)


@pytest.mark.parametrize(
    ("code", "parent"),
    [
        ("42P01", "ProgrammingError"),
        ("42601", "ProgrammingError"),
        ("26000", "ProgrammingError"),
        ("3D000", "ProgrammingError"),
        ("P0001", "ProgrammingError"),
        ("23505", "IntegrityError"),
        ("23502", "IntegrityError"),
        ("22012", "DataError"),
        ("22P02", "DataError"),
        ("0A000", "NotSupportedError"),
        ("08006", "OperationalError"),
        ("08P01", "OperationalError"),
        ("57P01", "OperationalError"),
        ("57P02", "OperationalError"),
        ("57P03", "OperationalError"),
        ("57014", "OperationalError"),
        ("40001", "OperationalError"),
        ("40P01", "OperationalError"),
        ("53300", "OperationalError"),
        ("28P01", "OperationalError"),
        ("F0000", "OperationalError"),
        ("HV000", "OperationalError"),
        ("25P02", "InternalError"),
        ("24000", "InternalError"),
        ("XX000", "InternalError"),
        ("XX001", "InternalError"),
        ("03000", "DatabaseError"),
    ],
)
def test_sqlstate_has_its_pep249_parent(code, parent):
    cls = class_for_sqlstate(code)
    assert issubclass(cls, getattr(errors, parent))
    for other in set(PEP249_TREE) - {parent, "DatabaseError", "Error", "Warning"}:
        assert not issubclass(cls, getattr(errors, other)), other


def test_every_code_has_the_pep249_parent_psycopg_gives_it():
    psycopg_errors = pytest.importorskip("psycopg.errors")
    names = [n for n in PEP249_TREE if n not in ("Warning", "Error", "InterfaceError")]
    for code in [*_sqlstate.CODE_NAMES, *(c + "999" for c in _sqlstate.CLASS_NAMES)]:
        theirs = psycopg_errors.lookup(code) if code in _sqlstate.CODE_NAMES else None
        if theirs is None:
            theirs = psycopg_errors._base_exc_map.get(code[:2]) or psycopg_errors._base_exc_map.get(
                code[0]) or psycopg_errors.DatabaseError
        ours = class_for_sqlstate(code)
        expected = {n for n in names if issubclass(theirs, getattr(psycopg_errors, n))}
        assert {n for n in names if issubclass(ours, getattr(errors, n))} == expected, code


def test_own_failures_read_as_their_message():
    exc = errors.OperationalError("the server closed the connection")
    assert str(exc) == "the server closed the connection"
    assert exc.sqlstate is None and exc.fields == {}
    assert isinstance(errors.QueryTimeout("no result within 1s"), TimeoutError)
    assert str(errors.PoolTimeout("no pinned connection")) == "no pinned connection"


@pytest.mark.parametrize("cls", [errors.QueryTimeout, errors.NotDispatchedError,
                                 errors.OperationalError, errors.InterfaceError])
def test_pickle_round_trip_of_own_failures(cls):
    original = cls("it went wrong")
    if isinstance(original, DatabaseError):
        original.sqlstate = "57014"
    copy = pickle.loads(pickle.dumps(original))
    assert type(copy) is cls
    assert str(copy) == "it went wrong"
    assert getattr(copy, "sqlstate", None) == getattr(original, "sqlstate", None)
