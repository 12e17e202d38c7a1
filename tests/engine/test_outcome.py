"""The engine's decision after a reply (``Engine.outcome``), the attempts it allows
(``RetryBudget``) and the server-time model, byte by byte with no socket."""

from __future__ import annotations

import pytest
from support.fakeserver import (
    command_complete,
    data_row,
    error,
    message,
    ready,
    row_description,
)

from pgmux.engine import Engine, Exchange, RetryBudget
from pgmux.engine.costs import ServerTimes, StatementCosts
from pgmux.engine.outcome import (
    CLASH,
    DESCRIBED,
    DESCRIBED_LIMIT,
    DESCRIPTION_LIMIT,
    DONE,
    LOST,
    POOLER_RETRIES,
    STALE,
    UNSENT,
)
from pgmux.engine.statements import Description, Descriptions, Statement
from pgmux.errors import IndeterminateResultError, NotDispatchedError, OperationalError
from pgmux.protocol.framing import FrameBuffer
from pgmux.types import TypeRegistry

PARAMETERS = {"client_encoding": "UTF8", "DateStyle": "ISO, MDY", "IntervalStyle": "postgres",
              "standard_conforming_strings": "on", "integer_datetimes": "on"}
PARSE, BIND, NO_DATA = message(b"1"), message(b"2"), message(b"n")
DESCRIPTION = message(b"t", b"\x00\x01\x00\x00\x00\x19") + row_description(["c1"])


def engine(shared: bool = True) -> Engine:
    return Engine(dict(PARAMETERS), TypeRegistry(), shared=shared)


def answer(e: Engine, exchange, data: bytes) -> None:
    e.fifo.append(exchange)
    frames = FrameBuffer()
    frames.feed(data)
    e.receive(frames.read_messages())


def query(e: Engine, value: bytes = b"x"):
    return e.query("SELECT $1::text", (25,), (0,), [value])


def described(e: Engine):
    answer(e, query(e), PARSE + DESCRIPTION + ready())
    return query(e)


def test_a_description_says_build_again_and_an_answer_says_done():
    e = engine()
    first = query(e)
    answer(e, first, PARSE + DESCRIPTION + ready())
    assert e.outcome(first) is DESCRIBED
    run = query(e)
    answer(e, run, BIND + data_row([b"x"]) + command_complete("SELECT 1") + ready())
    assert e.outcome(run) is DONE and run.result().rows == [("x",)]


def test_an_ordinary_server_error_is_the_answer():
    e = engine()
    run = described(e)
    answer(e, run, error("22012", "division by zero") + ready())
    assert e.outcome(run) is DONE


def test_a_statement_the_server_lost_is_stale_once_and_its_description_a_clash():
    e = engine()
    run = described(e)
    answer(e, run, error("26000", "gone") + ready())
    assert e.outcome(run) is STALE
    clash = query(e)  # forgotten: parsed and run again, no description needed
    answer(e, clash, error("42P05", "already exists") + ready())
    assert e.outcome(clash) is CLASH


def test_no_retry_inside_a_transaction_block():
    e = engine(shared=False)
    run = described(e)
    answer(e, run, error("26000", "gone") + ready(b"E"))
    assert e.outcome(run) is DONE  # the error aborted the transaction: nothing to redo


def test_connection_failures():
    e = engine()
    unsent, lost = e.sync(), e.sync()
    unsent.lose(NotDispatchedError("not sent"))
    lost.lose(IndeterminateResultError("lost"))
    assert e.outcome(unsent) is UNSENT and e.outcome(lost) is LOST
    assert not lost.done


def test_the_budget_bounds_every_kind_of_attempt():
    budget = RetryBudget(connections=3)
    assert [budget.allows(UNSENT) for _ in range(3)] == [True, True, False]
    budget = RetryBudget()
    assert budget.allows(STALE, "a") and budget.allows(STALE, "b")
    assert [budget.allows(STALE, "a") for _ in range(POOLER_RETRIES + 1)] == (
        [True] * POOLER_RETRIES + [False])
    assert not RetryBudget().allows(DONE) and not RetryBudget().allows(LOST)
    budget = RetryBudget()
    for _ in range(DESCRIPTION_LIMIT):
        assert budget.allows(DESCRIBED)
    with pytest.raises(OperationalError, match="description changed"):
        budget.allows(DESCRIBED)


def test_only_a_description_that_changed_counts_towards_the_limit_of_changes():
    """A description made again because a cache dropped the last one says the same: it is
    not schema churn (the request, which keeps what each said, tells the budget whether it
    ``changed``); one that says something else is."""
    budget = RetryBudget()
    for _ in range(DESCRIBED_LIMIT - DESCRIPTION_LIMIT):
        assert budget.allows(DESCRIBED, changed=False)
    for _ in range(DESCRIPTION_LIMIT):
        assert budget.allows(DESCRIBED, changed=True)
    with pytest.raises(OperationalError, match="description changed 16 times"):
        budget.allows(DESCRIBED, changed=True)


def test_descriptions_that_never_change_are_bounded_too():
    """A request described again and again with the same answer (a bug: it should have
    run) ends in an error, not a loop."""
    budget = RetryBudget()
    for _ in range(DESCRIBED_LIMIT):
        assert budget.allows(DESCRIBED, changed=False)
    with pytest.raises(OperationalError, match="described 64 times"):
        budget.allows(DESCRIBED, changed=False)


def test_a_request_keeps_what_its_description_said_when_the_caches_drop_it():
    """The statement cache (2) and the descriptions (4) hold fewer statements than come:
    the description answered is dropped before its request is built again. ``learned``
    gives what it said, ``recall`` makes it known again: the request then runs (Parse with
    its Bind), it is not described once more."""
    e = Engine(dict(PARAMETERS), TypeRegistry(), shared=True, statement_cache_size=2,
               descriptions=Descriptions(limit=4))
    first = query(e)
    answer(e, first, PARSE + DESCRIPTION + ready())
    key, description = said = e.learned(first)
    assert key == ("SELECT $1::text", (25,)) and description.param_types == (25,)
    for n in range(8):  # other statements described meanwhile
        other = e.query(f"SELECT $1::text || '{n}'", (25,), (0,), [b"x"])
        answer(e, other, PARSE + DESCRIPTION + ready())
    assert e.descriptions.get(key) is None and e.statements.get(key) is None
    e.recall(dict([said]))
    again = query(e)
    assert not again.DESCRIBES and again.parses
    answer(e, again, PARSE + BIND + row_description(["c1"]) + data_row([b"x"])
           + command_complete("SELECT 1") + ready())
    assert e.outcome(again) is DONE and again.result().rows == [("x",)]
    assert e.learned(again) is None  # (not a description)


def test_the_descriptions_drop_the_oldest_one_at_a_time():
    """A hit moves nothing (a plain look-up, per query on the unnamed path); a description
    put again is new."""
    descriptions = Descriptions(limit=3)
    for n in range(3):
        descriptions.put((f"SELECT {n}", ()), Description((), ()))
    assert descriptions.get(("SELECT 0", ())) is not None  # used: still the oldest
    descriptions.put(("SELECT 1", ()), Description((), ()))  # made again: now the newest
    descriptions.put(("SELECT 3", ()), Description((), ()))
    assert len(descriptions) == 3 and descriptions.get(("SELECT 0", ())) is None
    descriptions.put(("SELECT 4", ()), Description((), ()))
    assert descriptions.get(("SELECT 2", ())) is None
    assert all(descriptions.get((f"SELECT {n}", ())) is not None for n in (1, 3, 4))


def test_server_times_tell_the_round_trip_from_a_slow_statement():
    costs = StatementCosts(slow_after=0.01)
    times = ServerTimes(costs)
    fast, slow = ("SELECT 1", ()), ("SELECT pg_sleep(1)", ())
    now = 0.0
    for _ in range(50):  # alone on the wire: 5 ms round trips
        times.answered_all([sent(now, fast)], now + 0.005)
        now += 0.01
    assert not costs.known  # a round trip is not server time
    times.answered_all([sent(now, slow)], now + 0.5)  # then one the server takes 0.5 s for
    assert costs.is_slow(slow) and not costs.is_slow(fast)


def sent(sent_at: float, key: tuple[str, tuple[int, ...]]) -> Exchange:
    """An answered exchange of the statement ``key``, written at ``sent_at``."""
    exchange = Exchange(b"", statement=Statement(b"", *key))
    exchange.sent_at = sent_at
    return exchange


def test_a_unit_costs_the_pipeline_its_round_trip_once_and_each_statement_server_time():
    times = ServerTimes(StatementCosts())
    assert times.slots(1) == 1 and times.slots(5) == 5  # no round trip measured yet: per statement
    times.answered_all([sent(0.0, ("SELECT 1", ()))], 0.010)  # a 10 ms round trip
    now = 0.010
    for _ in range(200):  # queries answered back to back, 100 us of server time each
        times.answered_all([sent(now - 0.0101, ("SELECT 1", ()))], now + 0.0001)
        now += 0.0001
    assert times.slots(1) == 1
    assert times.slots(5) == 1  # over a slow network a unit costs what a query costs
    assert times.slots(1000) == 10  # 10 ms of round trip + 100 ms of server time
    local = ServerTimes(StatementCosts())
    local.answered_all([sent(0.0, ("SELECT 1", ()))], 0.0001)  # a 100 us round trip
    now = 0.0001
    for _ in range(500):  # 100 us of server time each
        local.answered_all([sent(now - 0.00011, ("SELECT 1", ()))], now + 0.0001)
        now += 0.0001
    assert local.slots(5) == 3 and local.slots(20) == 10  # where the server time dominates


def test_a_result_of_a_type_dropped_before_its_lookup_fails_clearly():
    """The type of a column was dropped between the result and its lookup (it came from a
    description learned elsewhere): its values cannot be read as their type, and the
    caller is told so, not handed the text as if it were the value."""
    from pgmux.engine.exchanges import TypeLookupExchange
    from pgmux.engine.outcome import AWAITS
    from pgmux.errors import DataError

    e = engine()
    user_type = 20000
    run = e.query("SELECT $1::text", (25,), (0,), [b"x"])
    assert run.DESCRIBES
    answer(e, run, PARSE + message(b"t", b"\x00\x01\x00\x00\x00\x19")
           + row_description(["c1"]) + ready())  # described as text
    run = e.query("SELECT $1::text", (25,), (0,), [b"x"])
    answer(e, run, BIND + row_description(["c1"], oid=user_type)  # the schema moved
           + data_row([b"{a,b}"]) + command_complete("SELECT 1") + ready())
    assert e.outcome(run) is AWAITS
    lookup = e.follow_up(run)
    assert isinstance(lookup, TypeLookupExchange) and lookup.asked == (user_type,)
    answer(e, lookup, row_description(["oid"]) + command_complete("SELECT 0") + ready())
    assert e.outcome(run) is DONE
    with pytest.raises(DataError, match="dropped before pgmux could look it up"):
        run.result()
