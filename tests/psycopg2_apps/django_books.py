"""Run by test_django.py: Django's own PostgreSQL backend on psycopg2, ORM work from N greenlets.

    python -m psycopg2_apps.django_books DRIVER DSN GREENLETS OPERATIONS

psycopg 3 is made unimportable first, so ``django.db.backends.postgresql`` takes psycopg2
(the real one with psycogreen, or pgmux's through register()). Each greenlet has its own
Django connection (Django keeps one per thread; under gevent, per greenlet) and runs its
operations (psycopg2_apps.books): lookups and totals in autocommit, notes written, transfers
in ``transaction.atomic()`` with both rows locked by ``select_for_update()``, read and
written back. Prints one JSON line (books.Tally).
"""

# ruff: noqa: E402  -- psycopg 3 hidden, gevent patched and psycopg2 chosen before Django loads
import sys

sys.modules["psycopg"] = None  # `import psycopg` fails: Django takes psycopg2

from psycopg2_apps.green import module_name, setup

setup(sys.argv[1])

import json
import time
from urllib.parse import parse_qsl, unquote, urlsplit

import django
import gevent
from django.conf import settings

from psycopg2_apps.books import ACCOUNTS, OPENING_BALANCE, Tally, operations


def database(dsn: str) -> dict:
    """DATABASES["default"] for a libpq URL, on Django's own PostgreSQL backend."""
    url = urlsplit(dsn)
    return {"ENGINE": "django.db.backends.postgresql", "NAME": url.path.lstrip("/"),
            "USER": unquote(url.username or ""), "PASSWORD": unquote(url.password or ""),
            "HOST": url.hostname, "PORT": str(url.port or 5432),
            "OPTIONS": dict(parse_qsl(url.query))}


def main(dsn: str, greenlets: int, count: int) -> None:
    settings.configure(DATABASES={"default": database(dsn)},
                       INSTALLED_APPS=["psycopg2_apps.djbooks"], USE_TZ=True)
    django.setup()
    from django.db import connection, transaction
    from django.db.models import Sum

    from psycopg2_apps.djbooks.models import Account, Note, Transfer

    assert connection.vendor == "postgresql" and connection.Database.__name__ == module_name()
    with connection.schema_editor() as editor:
        for model in (Account, Note, Transfer):
            editor.create_model(model)
    Account.objects.bulk_create(Account(id=i, owner=f"owner-{i}", balance=OPENING_BALANCE)
                                for i in range(1, ACCOUNTS + 1))
    connection.close()
    tally = Tally()

    def transfer(source: int, target: int, amount: int) -> None:
        with transaction.atomic():
            locked = {account.id: account for account in Account.objects.select_for_update()
                      .filter(id__in=(source, target)).order_by("id")}
            locked[source].balance -= amount
            locked[target].balance += amount
            for account in locked.values():
                account.save(update_fields=["balance"])
            Transfer.objects.create(source_id=source, target_id=target, amount=amount)
        tally.transfers.append((source, target, amount))

    def work(worker: int) -> None:
        try:
            for op in operations(worker, count):
                if op[0] == "lookup":
                    tally.looked_up(op[1], Account.objects.get(pk=op[1]).owner)
                elif op[0] == "total":
                    tally.totals.add(Account.objects.aggregate(total=Sum("balance"))["total"])
                elif op[0] == "note":
                    Note.objects.create(key=op[1], note=f"note {op[1]}")
                    tally.notes.append(op[1])
                else:
                    transfer(*op[1:])
                tally.operations += 1
        finally:
            connection.close()  # this greenlet's

    started = time.monotonic()
    gevent.joinall([gevent.spawn(work, worker) for worker in range(greenlets)],
                   raise_error=True)
    print(json.dumps(tally.result(module_name(), time.monotonic() - started)))


if __name__ == "__main__":
    main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
