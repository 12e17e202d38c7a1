"""A small Django project with the TechEmpower-style endpoints, on pgmux.contrib.django.

    PGMUX_DSN=postgresql://user:pw@localhost/db \
        gunicorn -c examples/gunicorn.conf.py django_app.wsgi:application

examples/gunicorn.conf.py's hooks call this app's get_client() (after the fork: seeds the
tables, opens the worker's pgmux client) and close_client() (in worker_exit). Without
--preload: the settings name each worker's connections after its pid (application_name).

Endpoints: /db (one random row), /queries?n=20 (n lookups, one after another, as Django code
does), /updates?n=5 (n rows read and rewritten), /fortunes (a rendered template), /stats
(the worker's pgmux stats), /health. Every view runs in a transaction (ATOMIC_REQUESTS =
True). On pgmux the views that only read take no pinned connection: their transaction never
needs one, so their queries are multiplexed on the worker's pipelined connections and its
end sends nothing; /updates takes one at its first write, until its COMMIT. The settings
switch the database backend with DJANGO_APP_BACKEND: "pgmux" (default), "psycopg2"
(Django's own backend on psycopg2 + psycogreen) or "psycopg" (psycopg 3); nothing else
differs.
"""
