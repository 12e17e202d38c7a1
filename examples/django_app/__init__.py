"""A small Django project with the TechEmpower-style endpoints, on pgmux.contrib.django.

    PGMUX_DSN=postgresql://user:pw@localhost/db gunicorn -c examples/django_app/gunicorn.conf.py

Endpoints: /db (one random row), /queries?n=20 (n lookups, one after another, as Django code
does), /updates?n=5 (n rows read and rewritten in one atomic() block), /fortunes (a
rendered template), /stats (the worker's pgmux stats), /health. The settings switch the
database backend with DJANGO_APP_BACKEND: "pgmux" (default), "psycopg2" (Django's own
backend on psycopg2 + psycogreen) or "psycopg" (psycopg 3); nothing else differs.
"""
