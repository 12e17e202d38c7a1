"""Create and fill the example's tables unless they are there (one process at a time)."""

from django.db import connection, transaction

from django_app.models import Fortune, World

WORLD_ROWS = 10_000
SEED_LOCK = 4243  # advisory lock key: one worker seeds, the others wait for it
FORTUNES = [
    "fortune: No such file or directory",
    "A computer scientist is someone who fixes things that aren't broken.",
    "After enough decimal places, nobody gives a damn.",
    "A bad random number generator: 1, 1, 1, 1, 1, 4.33e+67, 1, 1, 1",
    "A computer program does what you tell it to do, not what you want it to do.",
    "Emacs is a nice operating system, but I prefer UNIX. — Tom Christaensen",
    "Any program that runs right is obsolete.",
    "A list is only as strong as its weakest link. — Donald Knuth",
    "Feature: A bug with seniority.",
    "Computers make very fast, very accurate mistakes.",
    '<script>alert("This should not be displayed in a browser alert box.");</script>',
    "フレームワークのベンチマーク",
]


def seed() -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SEED_LOCK])
        tables = connection.introspection.table_names(cursor)
        with connection.schema_editor() as editor:
            for model in (World, Fortune):
                if model._meta.db_table not in tables:
                    editor.create_model(model)
        if not World.objects.exists():
            cursor.execute("INSERT INTO world (id, randomnumber) SELECT i, "
                           "1 + floor(random() * %s)::int FROM generate_series(1, %s) i",
                           [WORLD_ROWS, WORLD_ROWS])
        if not Fortune.objects.exists():
            Fortune.objects.bulk_create(Fortune(id=i, message=message)
                                        for i, message in enumerate(FORTUNES, 1))
