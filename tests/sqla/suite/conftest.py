"""Set-up of the SQLAlchemy dialect-suite run (a pytest run of its own: see
tests/sqla/test_compliance_suite.py; the main run does not collect this folder).

$PGMUX_SQLA_SDIST is SQLAlchemy's unpacked source distribution: its ``test`` package
gives the PostgreSQL requirements this run builds on. The dialect loads SQLAlchemy's
PostgreSQL provisioning itself (``PGDialect_pgmux.load_provisioning``).
"""

import os
import sys

import pytest

sys.path.insert(0, os.environ["PGMUX_SQLA_SDIST"])  # its "test" package, before the stdlib's

pytest.register_assert_rewrite("sqlalchemy.testing.assertions")

from sqlalchemy.testing.plugin.pytestplugin import *  # noqa: E402,F403
