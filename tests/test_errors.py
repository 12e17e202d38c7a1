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


def test_generated_names_do_not_shadow_base_classes_or_builtins():
    generated = set(_sqlstate.CLASS_NAMES.values()) | set(_sqlstate.CODE_NAMES.values())
    hand_written = _hand_written_classes()
    assert "OperationalError" in hand_written and "DatabaseError" in hand_written
    assert not generated & hand_written
    assert not generated & set(dir(builtins))
    for name in hand_written - {"DatabaseError"}:
        assert not issubclass(getattr(errors, name), DatabaseError), name


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
    class_names, code_names = generator.build(generator.parse(text))
    assert class_names == {"7Q": "FirstThing", "7R": "SecondThingException"}
    assert code_names == {"7Q001": "SameName", "7R001": "SecondThingSameName"}
