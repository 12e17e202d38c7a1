"""pytest plugin of the backend-suite run against postgresql+pgmux (backend_suite.py): the
single tests pgmux deliberately fails, skipped with their reason.

Tests are named by file, SQLAlchemy's class name (before the plugin appends the database)
and test function (all its parametrisations).
"""

from __future__ import annotations

import pytest

SKIPPED = {
    "test/dialect/postgresql/test_dialect.py::MiscBackendTest::test_client_encoding": (
        "pgmux speaks UTF-8 only: a client_encoding other than UTF8 is refused (README, "
        "'One answer on every path')"),
    "test/dialect/postgresql/test_types.py::InetRoundTripTests::test_default_native_inet_types": (
        "it expects str from the drivers it does not name; pgmux returns ipaddress objects, "
        "as psycopg does (native_inet_types=False gives str: test_str_based_inet_handlers)"),
    "test/engine/test_reconnect.py::PrePingRealTest::test_pre_ping_db_stays_shutdown": (
        "it asserts QueuePool's default size (5); the dialect's HandlePool keeps 64 idle "
        "handles (README, 'With SQLAlchemy')"),
}


def _name(item: pytest.Item) -> str:
    cls = getattr(item, "cls", None)
    cls_name = getattr(cls, "_sa_orig_cls_name", None) or (cls.__name__ if cls else "")
    function = getattr(item, "originalname", None) or item.name.split("[")[0]
    return f"{item.nodeid.split('::')[0]}::{cls_name}::{function}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        reason = SKIPPED.get(_name(item))
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"pgmux: {reason}"))
