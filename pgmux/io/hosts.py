"""Host health shared by all of a client's connections: which hosts are down, which are standbys.

Theory of operation
-------------------
Every connection a client opens (pipelined, pinned, a ``with_target`` view's) goes
through ``connect()`` with the client's one ``HostHealth``, so what one attempt learns
spares every later one:

* A host whose attempt failed at the network level (refused, unreachable, timed out,
  closed during startup) or that said it cannot take connections now (57P03) is *down*
  for ``backoff`` seconds. Attempts try it only after every other host, so a pool pays a
  dead or black-hole host's ``connect_timeout`` once per backoff period, not once per
  connection.
* A host with no success since it was last down is *unproven*: one attempt at a time
  probes it, and the others wait for that probe (bounded by its connect_timeout), then
  skip the host if it failed. A pool opening eight connections at once sends one
  probe to a black hole, not eight, and still puts all eight on the preferred host when
  it answers.
* Each host's role (hot standby or not, read-only by default or not) is remembered
  from the parameters its connections report, at startup and on every ParameterStatus
  (PostgreSQL 14 and later report ``in_hot_standby`` and
  ``default_transaction_read_only``). A host known not to suit the target is tried after
  the others.

Otherwise the order is libpq's: the hosts as listed (shuffled once per attempt with
``load_balance_hosts=random``), and for ``prefer-standby`` a pass over standbys first.
The same facts rank a live connection against the best host available (``rank`` and
``best_rank``), which is how the pools notice a connection worth moving (a preferred
host back, a standby promoted).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from gevent.event import Event

from pgmux.errors import OperationalError
from pgmux.io.conninfo import ConnInfo, Endpoint

DEFAULT_BACKOFF = 10.0
# SQLSTATEs of a startup failure that mean "this host cannot serve anyone right now".
HOST_DOWN_SQLSTATES = frozenset({"57P03"})  # cannot_connect_now (starting up, shutting down)

HostKey = tuple[str, int, "str | None"]
Rank = tuple[int, int]


def passes_for(target: str) -> list[str]:
    """The ``target_session_attrs`` passes libpq makes over the hosts."""
    return ["standby", "any"] if target == "prefer-standby" else [target]


def unsuitable(parameters: Mapping[str, str], target: str) -> str | None:
    """Why a server reporting ``parameters`` does not meet ``target`` (None when it does).

    Uses the ``in_hot_standby`` and ``default_transaction_read_only`` parameters that
    PostgreSQL 14 and later report.
    """
    if target == "any":
        return None
    standby = parameters.get("in_hot_standby") == "on"
    read_only = standby or parameters.get("default_transaction_read_only") == "on"
    if target == "read-write" and read_only:
        return "session is read-only"
    if target == "read-only" and not read_only:
        return "session is read-write"
    if target == "primary" and standby:
        return "server is in hot standby mode"
    if target == "standby" and not standby:
        return "server is not in hot standby mode"
    return None


def endpoint_key(endpoint: Endpoint) -> HostKey:
    return (endpoint.host, endpoint.port, endpoint.hostaddr)


def is_host_failure(exc: BaseException) -> bool:
    """Whether a failed attempt says the host is unreachable (not: we were refused entry)."""
    sqlstate = getattr(exc, "sqlstate", None)
    return sqlstate is None or sqlstate in HOST_DOWN_SQLSTATES


class HostSkipped(OperationalError):
    """Not attempted: another attempt just found the host down."""


class _Host:
    """What is known about one host."""

    __slots__ = ("down_until", "reason", "proven", "probe", "parameters")

    def __init__(self) -> None:
        self.down_until = 0.0
        self.reason = ""
        self.proven = False  # a connection succeeded since it was last down
        self.probe: Event | None = None  # set when the attempt probing it (unproven) ends
        self.parameters: dict[str, str] | None = None  # its role, as last reported


class HostHealth:
    """The health and roles of a client's hosts, shared by all its connections."""

    def __init__(self, backoff: float = DEFAULT_BACKOFF):
        if backoff < 0:
            raise ValueError("backoff must not be negative")
        self.backoff = backoff
        self.marked_down = 0  # how many times a host was found down (for stats)
        self._hosts: dict[HostKey, _Host] = {}

    def _host(self, endpoint: Endpoint) -> _Host:
        key = endpoint_key(endpoint)
        host = self._hosts.get(key)
        if host is None:
            host = self._hosts[key] = _Host()
        return host

    # -- choosing ---------------------------------------------------------------------
    def order(self, endpoints: Sequence[Endpoint], target: str) -> list[Endpoint]:
        """``endpoints`` in the order to try for ``target``: usable ones first, as given;
        then hosts known unsuitable, then hosts down."""
        now = time.monotonic()
        return sorted(endpoints, key=lambda endpoint: self._demotion(endpoint, target, now))

    def _demotion(self, endpoint: Endpoint, target: str, now: float) -> int:
        host = self._hosts.get(endpoint_key(endpoint))
        if host is None:
            return 0
        if host.down_until > now:
            return 2
        if host.parameters is not None and unsuitable(host.parameters, target):
            return 1
        return 0

    def is_down(self, endpoint: Endpoint) -> bool:
        host = self._hosts.get(endpoint_key(endpoint))
        return host is not None and host.down_until > time.monotonic()

    def down_reason(self, endpoint: Endpoint) -> str | None:
        """Why ``endpoint`` is down (None when it is not)."""
        host = self._hosts.get(endpoint_key(endpoint))
        return host.reason if host is not None and host.down_until > time.monotonic() else None

    # -- learning ---------------------------------------------------------------------
    @contextmanager
    def attempt(self, endpoint: Endpoint) -> Iterator[None]:
        """Bracket one connection attempt. At an unproven host only one attempt probes at
        a time: the others wait for it (it is bounded by its own connect_timeout) and
        raise ``HostSkipped`` if it found the host down."""
        host = self._host(endpoint)
        while not host.proven and host.probe is not None:
            host.probe.wait()
            if host.down_until > time.monotonic():
                raise HostSkipped(f"{endpoint.describe()} is down: {host.reason}")
        mine = None
        if not host.proven and host.probe is None:
            mine = host.probe = Event()
        try:
            yield
        finally:
            if mine is not None:
                host.probe = None
                mine.set()

    def succeeded(self, endpoint: Endpoint, parameters: Mapping[str, str]) -> None:
        host = self._host(endpoint)
        host.proven = True
        host.down_until = 0.0
        host.parameters = dict(parameters)

    def failed(self, endpoint: Endpoint, exc: BaseException) -> bool:
        """Record a failed attempt; True when it marked the host down."""
        if not is_host_failure(exc):
            return False
        host = self._host(endpoint)
        host.proven = False
        host.down_until = time.monotonic() + self.backoff
        host.reason = str(exc)
        host.parameters = None  # it may come back in another role
        self.marked_down += 1
        return True

    def observe(self, endpoint: Endpoint, parameters: Mapping[str, str]) -> None:
        """Note the role a live connection reports (ParameterStatus keeps it current)."""
        host = self._host(endpoint)
        host.parameters = dict(parameters)

    # -- ranking ----------------------------------------------------------------------
    def rank(self, info: ConnInfo, endpoint: Endpoint,
             parameters: Mapping[str, str] | None) -> Rank:
        """How good a host is for ``info``'s target (lower is better): (pass, position).

        The pass is the first of libpq's passes the host suits (one past the last when it
        suits none); the position is its place in the host list (0 for every host under
        ``load_balance_hosts=random``). Unknown parameters count as suiting the first pass.
        """
        passes = passes_for(info.target_session_attrs)
        if parameters is None:
            first = 0
        else:
            first = next((index for index, target in enumerate(passes)
                          if unsuitable(parameters, target) is None), len(passes))
        return first, self._position(info, endpoint)

    def _position(self, info: ConnInfo, endpoint: Endpoint) -> int:
        if info.load_balance_hosts == "random":
            return 0
        key = endpoint_key(endpoint)
        for index, candidate in enumerate(_listed(info)):
            if endpoint_key(candidate) == key:
                return index
        return len(info.hosts)

    def best_rank(self, info: ConnInfo, *, proven_only: bool = False) -> Rank | None:
        """The best rank a new connection could get now: hosts down are left out, and with
        ``proven_only`` so are hosts without a connection since they were last down."""
        now = time.monotonic()
        best = None
        for endpoint in _listed(info):
            host = self._hosts.get(endpoint_key(endpoint))
            if host is not None and host.down_until > now:
                continue
            if proven_only and (host is None or not host.proven):
                continue
            rank = self.rank(info, endpoint, host.parameters if host is not None else None)
            if best is None or rank < best:
                best = rank
        return best

    def snapshot(self) -> dict[str, dict[str, object]]:
        """Per host ``host:port``: down (seconds left, or 0) and role, for stats()."""
        now = time.monotonic()
        out: dict[str, dict[str, object]] = {}
        for (host, port, _), state in self._hosts.items():
            params = state.parameters or {}
            out[Endpoint(host, port).describe()] = {
                "down_for": round(max(state.down_until - now, 0.0), 3),
                "standby": None if not params else params.get("in_hot_standby") == "on",
            }
        return out


def _listed(info: ConnInfo) -> list[Endpoint]:
    """The hosts in their listed order (no shuffling)."""
    return [Endpoint(host, info.ports[index], info.hostaddrs[index] if info.hostaddrs else None)
            for index, host in enumerate(info.hosts)]


class Placement:
    """Ranks connections for one target (a ConnInfo) against the best host available now."""

    def __init__(self, health: HostHealth, info: ConnInfo):
        self.health = health
        self.info = info

    def observe(self, conn: Any) -> None:
        """Record the role a live connection (``.endpoint``, ``.parameters``) reports."""
        self.health.observe(conn.endpoint, conn.parameters)

    def rank(self, conn: Any) -> Rank:
        return self.health.rank(self.info, conn.endpoint, conn.parameters)

    def misplaced(self, conn: Any, *, proven_only: bool = False) -> bool:
        """Whether a new connection could land on a better host than ``conn``'s.

        ``proven_only`` counts only hosts connected to since they were last down (no
        guess: what a pinned connection checks before it is lent, with no network)."""
        best = self.health.best_rank(self.info, proven_only=proven_only)
        return best is not None and best < self.rank(conn)
