"""psycopg2.errorcodes: the SQLSTATE codes and classes by name, and ``lookup(code)``."""

from __future__ import annotations

from pgmux.psycopg2._sqlstates import CLASSES, CODES

_names: dict[str, str] = {}


def _define() -> None:
    module = globals()
    for code, name in CLASSES:
        module[name] = code
        _names[code] = name
    for code, name, _ in CODES:
        earlier = module.get(name)
        if earlier is not None:  # a name met twice: the earlier code keeps it with "_"
            module[name + "_"] = earlier
        module[name] = code
        _names[code] = name


_define()
__all__ = list(dict.fromkeys(["lookup", *_names.values(), *(
    name + "_" for name in _names.values() if name + "_" in globals())]))


def lookup(code: str) -> str:
    """The symbolic name of an error code or class (``"42P01"`` -> ``UNDEFINED_TABLE``);
    KeyError for an unknown one."""
    return _names[code]
