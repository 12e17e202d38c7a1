"""Which psycopg2 the worker runs: the real one made cooperative, or pgmux's drop-in.

Call ``use_chosen_psycopg2()`` once, at the top of the module ``celery -A`` names, before
anything imports psycopg2. That module is the first thing a worker imports after Celery's
gevent monkey-patching (``--pool=gevent`` patches before the app is loaded), and it is
imported before the task modules. Celery's signals come too late for ``register()``:
``worker_init`` is sent after the app's task modules (``include``) were imported, and
``worker_process_init`` only in prefork's child processes, never with the gevent pool.
"""

from __future__ import annotations

import os

DRIVERS = ("psycopg2", "pgmux")


def chosen() -> str:
    """``PSYCOPG2_DRIVER``: "psycopg2" (the default) or "pgmux"."""
    name = os.environ.get("PSYCOPG2_DRIVER", "psycopg2").strip().lower()
    if name not in DRIVERS:
        raise ValueError(f"PSYCOPG2_DRIVER must be one of {', '.join(DRIVERS)}, not {name!r}")
    return name


def use_chosen_psycopg2() -> str:
    """Make ``import psycopg2`` cooperative under gevent, the chosen way; returns the choice.

    * "pgmux": ``pgmux.psycopg2.register()``: ``import psycopg2`` and its submodules resolve
      to pgmux's (always cooperative; psycogreen's patch is then harmless, not needed);
    * "psycopg2": psycogreen's wait callback, so a query waits in the gevent hub.
    """
    name = chosen()
    if name == "pgmux":
        import pgmux.psycopg2

        pgmux.psycopg2.register()
    else:
        from psycogreen.gevent import patch_psycopg

        patch_psycopg()
    return name
