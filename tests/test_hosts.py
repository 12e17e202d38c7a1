"""Host health (io/hosts.py) without a server: ordering, backoff, roles, ranking."""

from __future__ import annotations

import gevent
import pytest
from gevent.event import Event
from support.mux import join_all, wait_until

from pgmux.errors import OperationalError
from pgmux.io.conninfo import Endpoint, make_conninfo
from pgmux.io.hosts import (
    HostHealth,
    HostSkipped,
    Placement,
    is_host_failure,
    passes_for,
    unsuitable,
)

A, B, C = Endpoint("a", 5432), Endpoint("b", 5432), Endpoint("c", 5433)
PRIMARY = {"in_hot_standby": "off", "default_transaction_read_only": "off"}
STANDBY = {"in_hot_standby": "on", "default_transaction_read_only": "off"}
READ_ONLY_PRIMARY = {"in_hot_standby": "off", "default_transaction_read_only": "on"}


def network_error() -> OperationalError:
    return OperationalError("connection refused")


def server_error(sqlstate: str) -> OperationalError:
    error = OperationalError("FATAL")
    error.sqlstate = sqlstate
    return error


# libpq's target_session_attrs -------------------------------------------------------------


@pytest.mark.parametrize("target, primary, standby, read_only_primary", [
    ("any", True, True, True),
    ("read-write", True, False, False),
    ("read-only", False, True, True),
    ("primary", True, False, True),
    ("standby", False, True, False),
])
def test_which_servers_suit_each_target(target, primary, standby, read_only_primary):
    assert (unsuitable(PRIMARY, target) is None) is primary
    assert (unsuitable(STANDBY, target) is None) is standby
    assert (unsuitable(READ_ONLY_PRIMARY, target) is None) is read_only_primary


def test_prefer_standby_is_a_standby_pass_then_any():
    assert passes_for("prefer-standby") == ["standby", "any"]
    assert passes_for("read-write") == ["read-write"]


@pytest.mark.parametrize("error, down", [
    (network_error(), True), (server_error("57P03"), True),
    (server_error("28P01"), False), (server_error("3D000"), False),
    (server_error("53300"), False),
])
def test_only_unreachable_hosts_count_as_down(error, down):
    assert is_host_failure(error) is down


# ordering ---------------------------------------------------------------------------------


def test_a_host_that_failed_is_tried_last_for_the_backoff_period():
    health = HostHealth(backoff=0.2)
    assert health.order([A, B, C], "any") == [A, B, C]
    assert health.failed(A, network_error())
    assert health.is_down(A) and "refused" in health.down_reason(A)
    assert health.order([A, B, C], "any") == [B, C, A]
    wait_until(lambda: not health.is_down(A), what="the backoff to pass")
    assert health.order([A, B, C], "any") == [A, B, C]
    assert health.marked_down == 1


def test_a_refused_login_does_not_mark_the_host_down():
    health = HostHealth(backoff=60)
    assert not health.failed(A, server_error("28P01"))
    assert not health.is_down(A)
    assert health.order([A, B], "any") == [A, B]


def probe_outcomes(health: HostHealth, *, succeed: bool) -> list[str]:
    """Three attempts at A at once: the first probes it and succeeds or fails."""
    outcomes: list[str] = []
    release = Event()

    def first() -> None:
        with health.attempt(A):
            outcomes.append("probed")
            release.wait()
            if succeed:
                health.succeeded(A, PRIMARY)
            else:
                health.failed(A, network_error())

    def other() -> None:
        try:
            with health.attempt(A):
                outcomes.append("attempted")
        except HostSkipped:
            outcomes.append("skipped")

    jobs = [gevent.spawn(first), gevent.spawn(other), gevent.spawn(other)]
    gevent.sleep(0.01)
    assert outcomes == ["probed"]  # the others wait for the probe
    release.set()
    join_all(jobs)
    return outcomes


def test_one_probe_at_a_time_at_an_unproven_host_and_the_others_skip_it_if_down():
    assert probe_outcomes(HostHealth(backoff=60), succeed=False) == [
        "probed", "skipped", "skipped"]


def test_the_others_attempt_a_host_the_probe_found_up():
    health = HostHealth(backoff=60)
    assert probe_outcomes(health, succeed=True) == ["probed", "attempted", "attempted"]
    with health.attempt(A), health.attempt(A):  # proven: attempts go in parallel
        pass


def test_a_host_known_unsuitable_goes_after_the_others():
    health = HostHealth()
    health.succeeded(A, STANDBY)
    assert health.order([A, B], "read-write") == [B, A]
    assert health.order([A, B], "standby") == [A, B]
    assert health.order([A, B], "any") == [A, B]
    health.observe(A, PRIMARY)  # promoted: ParameterStatus reported the new role
    assert health.order([A, B], "read-write") == [A, B]


def test_down_forgets_the_role_the_host_may_come_back_in():
    health = HostHealth(backoff=0.05)
    health.succeeded(A, STANDBY)
    health.failed(A, network_error())
    wait_until(lambda: not health.is_down(A), what="the backoff to pass")
    assert health.order([A, B], "read-write") == [A, B]


def test_zero_backoff_remembers_nothing_down():
    health = HostHealth(backoff=0)
    health.failed(A, network_error())
    assert not health.is_down(A)
    with pytest.raises(ValueError):
        HostHealth(backoff=-1)


# ranking ----------------------------------------------------------------------------------


class Conn:
    def __init__(self, endpoint, parameters):
        self.endpoint, self.parameters = endpoint, parameters


def test_rank_follows_the_host_list_and_the_passes():
    health = HostHealth()
    info = make_conninfo(host="a,b", port=5432, target_session_attrs="prefer-standby")
    assert health.rank(info, A, STANDBY) == (0, 0)
    assert health.rank(info, B, STANDBY) == (0, 1)
    assert health.rank(info, A, PRIMARY) == (1, 0)  # only the second pass takes it
    strict = make_conninfo(host="a,b", port=5432, target_session_attrs="standby")
    assert health.rank(strict, A, PRIMARY) == (1, 0)  # suits no pass at all


def test_random_load_balancing_has_no_preferred_position():
    health = HostHealth()
    info = make_conninfo(host="a,b", port=5432, load_balance_hosts="random")
    assert health.rank(info, A, PRIMARY) == health.rank(info, B, PRIMARY) == (0, 0)


def test_a_connection_is_misplaced_when_a_better_host_may_be_up():
    health = HostHealth(backoff=60)
    info = make_conninfo(host="a,b", port=5432)
    placement = Placement(health, info)
    on_b = Conn(B, PRIMARY)
    assert placement.misplaced(on_b)  # a is not known down: worth a try
    assert not placement.misplaced(on_b, proven_only=True)  # but not known up either
    health.failed(A, network_error())
    assert not placement.misplaced(on_b)
    health.succeeded(A, PRIMARY)
    assert placement.misplaced(on_b, proven_only=True)
    assert not placement.misplaced(Conn(A, PRIMARY))


def test_a_promoted_standby_is_misplaced_for_prefer_standby():
    health = HostHealth()
    info = make_conninfo(host="a,b", port=5432, target_session_attrs="prefer-standby")
    placement = Placement(health, info)
    health.succeeded(B, STANDBY)
    on_a = Conn(A, PRIMARY)
    placement.observe(on_a)
    assert placement.misplaced(on_a)  # b is a standby: the first pass prefers it
    health.observe(B, PRIMARY)  # b promoted too: nothing better
    assert not placement.misplaced(on_a)


def test_snapshot_names_hosts_and_what_is_known():
    health = HostHealth(backoff=60)
    health.succeeded(A, STANDBY)
    health.failed(B, network_error())
    shot = health.snapshot()
    assert shot["a:5432"] == {"down_for": 0.0, "standby": True}
    assert 59 < shot["b:5432"]["down_for"] <= 60 and shot["b:5432"]["standby"] is None
