"""pytest plugin of the backend-suite run against postgresql+pgmux (backend_suite.py).

SQLAlchemy names the drivers some tests run on. This plugin, each time with its reason:

* runs for pgmux too the tests named for psycopg (or psycopg and others) that test
  behaviour pgmux has (``ALSO_FOR_PGMUX``: test functions; ``CLASSES_ALSO_FOR_PGMUX``:
  whole classes, of which ``NOT_FOR_PGMUX`` lists the tests of psycopg's own API, left
  uncollected);
* skips the single tests pgmux deliberately fails (``SKIPPED``).

``PSYCOPG_ONLY`` names the tests SQLAlchemy runs for psycopg only that stay so: they use
psycopg's own modules or expect what psycopg's own choices give. The plugin does nothing
with it; backend_suite.py accepts a test psycopg passed and pgmux did not only when it is
named here or above.

Tests are named by file, SQLAlchemy's class name (before its plugin appends the database)
and test function (all its parametrisations).
"""

from __future__ import annotations

import pytest

PGMUX = "+pgmux"

ALSO_FOR_PGMUX = {
    "test/dialect/postgresql/test_dialect.py::BackendDialectTest::"
    "test_multiple_host_real_connect": (
        "several hosts in the URL: pgmux connects through them as libpq does"),
    "test/sql/test_insert_exec.py::IMVSentinelTest::test_failure_mode_if_i_dont_send_value": (
        "a primary key not sent raises IntegrityError through insertmanyvalues"),
    "test/dialect/postgresql/test_dialect.py::MiscBackendTest::test_notice_logging": (
        "the dialect logs the server's notices on sqlalchemy.dialects.postgresql"),
}

CLASSES_ALSO_FOR_PGMUX = {
    ("test/dialect/postgresql/test_dialect.py", "TwoPhaseCommitTest"): (
        "two-phase commit with SQLAlchemy's ids, given ids and the driver's xid(): "
        "pgmux.dbapi's tpc_* methods and psycopg2's Xid"),
    ("test/dialect/postgresql/test_dialect.py", "Psycopg3Test"): (
        "json_serializer/json_deserializer and use_native_hstore per engine"),
}

NOT_FOR_PGMUX = {
    "test/dialect/postgresql/test_dialect.py::Psycopg3Test::test_get_dialect":
        "psycopg's dialect classes",
    "test/dialect/postgresql/test_dialect.py::Psycopg3Test::test_async_version":
        "psycopg's async dialect",
    "test/dialect/postgresql/test_dialect.py::Psycopg3Test::test_client_side_cursor":
        "psycopg's ClientCursor",
    "test/dialect/postgresql/test_dialect.py::Psycopg3Test::test_async_client_side_cursor":
        "psycopg's AsyncClientCursor",
}

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


PSYCOPG_ONLY = {  # (file::Class::test, with fnmatch's wildcards; in its parameters): why
    ("test/dialect/postgresql/test_types.py::ArrayEnum::*", "_ArrayOfEnum"): (
        "_ArrayOfEnum parses an enum array's text, which psycopg returns for an array type it "
        "was not told of; pgmux returns arrays of enums as lists"),
    ("test/dialect/postgresql/test_dialect.py::MiscBackendTest::test_psycopg_non_standard_err",
     ""): "it imports psycopg.errors / psycopg2.extensions",
    ("test/dialect/postgresql/test_dialect.py::MiscBackendTest::test_psycopg_version", ""): (
        "psycopg's version attribute"),
    ("test/dialect/postgresql/test_dialect.py::MiscBackendTest::"
     "test_initial_transaction_state_psycopg", ""): "psycopg.pq.TransactionStatus",
}


def _name(item: pytest.Item) -> str:
    cls = getattr(item, "cls", None)
    cls_name = getattr(cls, "_sa_orig_cls_name", None) or (cls.__name__ if cls else "")
    function = getattr(item, "originalname", None) or item.name.split("[")[0]
    return f"{item.nodeid.split('::')[0]}::{cls_name}::{function}"


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> None:
    """Before SQLAlchemy's plugin makes a class's tests per database: add pgmux to the
    drivers of the classes listed."""
    path = collector.nodeid.split("::")[0]
    if isinstance(obj, type) and (path, name) in CLASSES_ALSO_FOR_PGMUX:
        only_on = getattr(obj, "__only_on__", ())
        only_on = (only_on,) if isinstance(only_on, str) else tuple(only_on)
        if PGMUX not in only_on:
            obj.__only_on__ = (*only_on, PGMUX)


def _widen(function: object) -> None:
    """Let the driver-name rules of a test function (``only_on`` and requirements such as
    ``any_psycopg_compatibility``) admit pgmux."""
    from sqlalchemy.testing import exclusions  # not at import: SQLAlchemy's plugin
    # loads sqlalchemy.testing itself, after this plugin is imported

    rules = getattr(function, "_sa_exclusion_extend", None)
    if rules is None:
        return
    admit = exclusions.Predicate.as_predicate(PGMUX)
    rules.skips = {exclusions.NotPredicate(exclusions.OrPredicate([rule.predicate, admit]))
                   if isinstance(rule, exclusions.NotPredicate) else rule
                   for rule in rules.skips}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """After SQLAlchemy's plugin made the tests per database (pluggy calls this plugin's
    hook after the conftest's)."""
    dropped = [item for item in items if _name(item) in NOT_FOR_PGMUX]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if _name(item) not in NOT_FOR_PGMUX]
    for item in items:
        name = _name(item)
        if name in ALSO_FOR_PGMUX:
            _widen(getattr(item, "function", None))
        reason = SKIPPED.get(name)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"pgmux: {reason}"))
