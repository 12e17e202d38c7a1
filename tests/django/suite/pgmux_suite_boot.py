"""Run Django's tests/runtests.py under gevent.monkey.patch_all(), as a gevent app runs.

    python pgmux_suite_boot.py DJANGO_TESTS_DIR [runtests.py's arguments]

With PGMUX_SUITE_BACKEND=control, Django's own PostgreSQL backend runs on psycopg2 with
psycogreen's gevent wait callback (psycopg 3 is hidden, or Django would pick it). Async
tests leave their event loop visible to later tests under gevent, so Django's async
safety check is turned off (DJANGO_ALLOW_ASYNC_UNSAFE), as a gevent deployment needs.
"""

from gevent import monkey

monkey.patch_all()

import os  # noqa: E402
import runpy  # noqa: E402
import sys  # noqa: E402

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "1")
if os.environ.get("PGMUX_SUITE_BACKEND") == "control":
    sys.modules["psycopg"] = None  # type: ignore[assignment]  (Django falls back to psycopg2)
    from psycogreen.gevent import patch_psycopg

    patch_psycopg()

tests_dir = sys.argv[1]
sys.argv = [os.path.join(tests_dir, "runtests.py"), *sys.argv[2:]]
sys.path.insert(0, tests_dir)
os.chdir(tests_dir)
runpy.run_path(sys.argv[0], run_name="__main__")
