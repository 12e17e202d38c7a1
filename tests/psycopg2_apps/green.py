"""A script's first step: gevent's monkey-patching, then the chosen psycopg2 made cooperative."""

from __future__ import annotations


def setup(driver: str) -> None:
    """Patch, then "psycopg2": psycogreen's wait callback on the real psycopg2, or "pgmux":
    ``pgmux.psycopg2.register()`` (``import psycopg2`` resolves to pgmux's from here on)."""
    from gevent import monkey

    monkey.patch_all()
    if driver == "pgmux":
        import pgmux.psycopg2

        pgmux.psycopg2.register()
    elif driver == "psycopg2":
        from psycogreen.gevent import patch_psycopg

        patch_psycopg()
    else:
        raise ValueError(f"unknown driver {driver!r}")


def module_name() -> str:
    """The name of the module ``import psycopg2`` gives ("pgmux.psycopg2" for the drop-in)."""
    import psycopg2

    return psycopg2.__name__
