"""pgmux.psycopg2's modules have psycopg2 2.9's public names; its errors and errorcodes
modules name every SQLSTATE as psycopg2's do, on the same bases."""

from __future__ import annotations

import importlib

import psycopg2.errorcodes as real_errorcodes
import psycopg2.errors as real_errors
import pytest

from pgmux.psycopg2 import errorcodes, errors

MODULES = ["", ".extensions", ".extras", ".sql", ".errors", ".errorcodes", ".pool", ".tz",
           "._psycopg", "._range", "._json", "._ipaddress"]


@pytest.mark.parametrize("suffix", MODULES)
def test_every_public_name_of_psycopg2s_module_is_there(suffix):
    real = importlib.import_module("psycopg2" + suffix)
    mine = importlib.import_module("pgmux.psycopg2" + suffix)
    public = {name for name in dir(real) if not name.startswith("_")}
    public -= {"psycopg2", "ext", "namedtuple", "re"}  # modules psycopg2 happens to import
    assert sorted(name for name in public if not hasattr(mine, name)) == []


def _codes():
    return sorted(value for name, value in vars(real_errorcodes).items()
                  if name.isupper() and not name.startswith("CLASS_"))


def test_errorcodes_name_every_code_and_class_as_psycopg2():
    for name, value in vars(real_errorcodes).items():
        if name.isupper():
            assert getattr(errorcodes, name) == value, name
    for code in _codes():
        assert errorcodes.lookup(code) == real_errorcodes.lookup(code)


def test_errors_have_psycopg2s_classes_and_bases():
    for code in _codes():
        try:
            theirs = real_errors.lookup(code)
        except KeyError:
            continue
        mine = errors.lookup(code)
        assert mine.__name__ == theirs.__name__, code
        assert [c.__name__ for c in mine.__mro__[1:-2]] == [
            c.__name__ for c in theirs.__mro__[1:-2]], code
    with pytest.raises(KeyError):
        errors.lookup("XXXXX")
