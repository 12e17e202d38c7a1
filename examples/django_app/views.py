"""The endpoints: plain Django ORM code, the same on every backend, each view in a transaction
(ATOMIC_REQUESTS)."""

import os
import random

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from django_app.models import Fortune, World
from django_app.seed import WORLD_ROWS

MAX_QUERIES = 500


def _random_id() -> int:
    return random.randint(1, WORLD_ROWS)


def _count(request: HttpRequest) -> int:
    """The `n` query parameter, clamped to 1..500 like the TechEmpower rules."""
    try:
        n = int(request.GET.get("n", "1"))
    except ValueError:
        n = 1
    return min(max(n, 1), MAX_QUERIES)


def _world(world: World) -> dict[str, int]:
    return {"id": world.id, "randomNumber": world.randomnumber}


def db(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_world(World.objects.get(id=_random_id())))


def queries(request: HttpRequest) -> JsonResponse:
    worlds = [_world(World.objects.get(id=_random_id())) for _ in range(_count(request))]
    return JsonResponse(worlds, safe=False)


def updates(request: HttpRequest) -> JsonResponse:
    """n rows read and rewritten in the request's transaction (ATOMIC_REQUESTS)."""
    ids = sorted(random.sample(range(1, WORLD_ROWS + 1), _count(request)))  # lock order
    worlds = [World.objects.get(id=world_id) for world_id in ids]
    for world in worlds:
        world.randomnumber = _random_id()
    World.objects.bulk_update(worlds, ["randomnumber"])
    return JsonResponse([_world(world) for world in worlds], safe=False)


def fortunes(request: HttpRequest) -> HttpResponse:
    found = list(Fortune.objects.all())
    found.append(Fortune(id=0, message="Additional fortune added at request time."))
    found.sort(key=lambda fortune: fortune.message)
    return render(request, "fortunes.html", {"fortunes": found})


def stats(request: HttpRequest) -> JsonResponse:
    """The worker's pgmux client stats (pgmux backend only)."""
    connection.ensure_connection()
    client = getattr(connection.connection, "client", None)
    return JsonResponse({"pid": os.getpid(), **(client.stats() if client else {})})


def health(request: HttpRequest) -> JsonResponse:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        ok = cursor.fetchone() == (1,)
    return JsonResponse({"status": "ok", "database": ok})
