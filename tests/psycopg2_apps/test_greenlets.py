"""200 greenlets, a psycopg2 connection each, a read transaction per request: the real psycopg2
holds a server connection per greenlet; the drop-in, pipeline_size + pinned_size at most."""

from __future__ import annotations

from psycopg2_apps.kit import (
    DROP_IN,
    DROP_IN_BOUND,
    MODULE,
    ConnectionSampler,
    fresh_database,
    need_connections,
    run_script,
    with_application_name,
)

GREENLETS = 200
REQUESTS = 20  # read transactions per greenlet


def test_a_connection_per_greenlet_read_transactions(apps_pg, driver):
    need_connections(apps_pg, driver, GREENLETS + 1)
    dsn = fresh_database(apps_pg, f"greenlets_{driver}")
    app_name = f"greenlet-reads-{driver}"
    with ConnectionSampler(apps_pg.dsn, app_name) as sampler:
        result = run_script("greenlet_reads", driver, with_application_name(dsn, app_name),
                            str(GREENLETS), str(REQUESTS))
    assert result["module"] == MODULE[driver]
    assert result["requests"] == GREENLETS * REQUESTS
    peak = sampler.peak()
    print(f"{driver}: {result['requests']} read transactions from {GREENLETS} greenlets in "
          f"{result['seconds']}s ({result['requests'] / result['seconds']:.0f}/s), at most "
          f"{peak} server connections in {sampler.samples} samples")
    if driver == DROP_IN:
        assert 0 < peak <= DROP_IN_BOUND, (peak, DROP_IN_BOUND)
    else:  # every greenlet held its own, all at once
        assert peak == GREENLETS
