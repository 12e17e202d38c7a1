"""Factory fixtures: a maker that a test calls for as many objects as it wants, each closed
at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def closed_after(make: Callable[..., T],
                 close: Callable[[list[T]], Iterable[Any] | None] | None = None,
                 ) -> Iterator[Callable[..., T]]:
    """For ``yield from`` in a fixture: yields a maker calling ``make``, then closes what
    it made (``close(made)``, or each one's ``close()``), whatever the test did."""
    made: list[T] = []

    def maker(*args: Any, **options: Any) -> T:
        thing = make(*args, **options)
        made.append(thing)
        return thing

    try:
        yield maker
    finally:
        if close is not None:
            close(made)
        else:
            for thing in made:
                thing.close()  # type: ignore[attr-defined]


def close_clients_of(connections: list[Any]) -> None:
    """Close the clients of DB-API connections (several connections may share one)."""
    for client in {conn.client for conn in connections}:
        client.close()
