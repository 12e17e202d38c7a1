"""The pinned connection: one borrower greenlet at a time drives the socket itself.

Theory of operation
-------------------
A pinned connection is lent to one greenlet, so it has no reader or writer
greenlet: each call writes its request and reads until the exchanges it waits
for are complete. The connection's engine builds the requests and interprets the
replies, exactly as for a pipelined connection; this module only moves bytes,
keeps deadlines and cancels.

``wait`` reads until a condition holds. Exchanges keep their own state, so a wait
cut short by the caller's deadline can be resumed: the connection sends
CancelRequest, waits for the cancel connection to close (the signal has then been
delivered, so it can only hit the statement still running), and keeps reading
within ``cancel_grace``; past that the socket is closed.

Any exception that escapes while a reply is being read or a request written marks
the connection ``broken``: the pool then closes it (cancelling what still runs) and
opens another. A stream, a COPY OUT or an explicit pipeline left open between two
calls is not broken: it is the connection's ``active`` reader, finished (drained)
before anything else runs on the connection.

BEGIN and SAVEPOINT are *deferred*: queued as a prefix and written with the next
request, so opening a transaction costs no round trip of its own, and a
transaction that runs nothing costs nothing.

Streams, COPY and explicit pipelines live in ``pinned_stream``, ``pinned_copy`` and
``pinned_pipeline``; they drive the connection through the public methods here
(``start``, ``send``, ``wait``, ``receive_more``, ``raise_first``, ``mark_broken``).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import gevent
from gevent.monkey import get_original

from pgmux._native import adopt
from pgmux.engine import (
    Descriptions,
    RetryBudget,
    ScriptExchange,
    ServerEnded,
    SettingRefused,
)
from pgmux.engine.core import Engine
from pgmux.engine.exchanges import Exchange
from pgmux.engine.outcome import AWAITS, DESCRIBED, RESTART, STALE
from pgmux.engine.outcome import DONE as ANSWERED
from pgmux.engine.result import Result
from pgmux.errors import (
    IndeterminateResultError,
    OperationalError,
    ProtocolError,
    QueryTimeout,
)
from pgmux.io.active import ActiveReader
from pgmux.io.connect import ServerConnection
from pgmux.io.deadline import Deadline
from pgmux.io.wire import Wire
from pgmux.sql.facts import check_parameter_count, remember
from pgmux.sql.session_scope import NO_RESIDUE, residue, statement_facts
from pgmux.types.registry import TypeRegistry

__all__ = ["Expired", "Notify", "PinnedConnection", "is_cancel", "timeout_error"]

log = logging.getLogger("pgmux")

NOTIFICATION_LIMIT = 10_000  # queued notifications; the oldest are dropped beyond
PROBE_TIMEOUT = 0.5  # reading what an idle connection received, at acquire
# The probe's zero-timeout check. Not gevent's select: with timeout 0 it yields to the hub
# every time, so a borrower would let every runnable greenlet run while it holds a connection.
_poll_select = get_original("select", "select")
MIN_CANCEL_GRACE = 0.25  # the least time a cancelled statement gets to answer

Notify = tuple[int, str, str]  # (sender pid, channel, payload)
Deferred = tuple[ScriptExchange, object, str]  # a deferred statement: exchange, tag, SQL
Until = Callable[[], bool]


class Expired(Exception):
    """The caller's deadline passed while waiting for the server."""


def is_cancel(error: BaseException | None) -> bool:
    return getattr(error, "sqlstate", None) == "57014"


def timeout_error(timeout: float | None, cause: BaseException | None) -> QueryTimeout:
    """The QueryTimeout for a statement cancelled after ``timeout``."""
    exc = QueryTimeout(f"no result within {timeout}s: the statement was cancelled")
    if is_cancel(cause):
        exc.sqlstate = "57014"
    return exc


def all_done(exchanges: Sequence[Exchange]) -> Until:
    last = exchanges[-1]
    return lambda: last.done


class PinnedConnection:
    """One exclusive server connection, driven directly by the greenlet that holds it."""

    def __init__(self, server: ServerConnection, registry: TypeRegistry, *,
                 descriptions: Descriptions | None = None,
                 statement_cache_size: int = 512,
                 named_statements: bool = True,
                 on_notice: Callable[[dict[str, str]], None] | None = None,
                 cancel_grace: float = 5.0):
        self.server = server
        self.registry = registry
        self.engine = Engine(server.parameters, registry, shared=False,
                             descriptions=descriptions,
                             statement_cache_size=statement_cache_size,
                             named_statements=named_statements, on_notice=on_notice,
                             on_notification=self._queue_notification)
        self.engine.status = server.transaction_status or "I"
        self.notifications: deque[Notify] = deque()
        self.cancel_grace = cancel_grace
        self.broken: str | None = None  # why the connection must not be used again
        self.active: ActiveReader | None = None  # a stream, COPY OUT or pipeline left open
        self.created = time.monotonic()
        self.used = False  # a request was written since the last reset
        self.waited = 0.0  # seconds its borrower waited for it (the pool's; telemetry's)
        # What the statements since the last reset may have left for the next borrower
        # (``sql.session_scope.residue``): the pool's reset clears that much.
        self.residue = NO_RESIDUE
        self.for_session = False  # lent for a session(): DISCARD ALL on return (the pool's)
        self.pool_generation = 0
        self._sock = server.transport
        self._fileno = server.transport.fileno()
        self._wire = Wire(server.transport, server.frames)
        self._deadline: Deadline | None = None  # of the wait under way
        self._prefix: list[Deferred] = []  # deferred statements, not written yet
        self._written_prefix: list[Deferred] = []  # those the last request carried
        self._dropped_notifications = 0
        self._reply_pending = False  # a request was just written: wait, then read
        # sql.session_scope.statement_facts of the statements run here, looked up in place
        self._facts: dict[str, tuple[int, int]] = {}

    @property
    def pid(self) -> int:
        return self.server.pid

    @property
    def status(self) -> str:
        """The transaction status of the last ReadyForQuery: I, T or E."""
        return self.engine.status

    @property
    def age(self) -> float:
        return time.monotonic() - self.created

    @property
    def clean(self) -> bool:
        """Nothing owed, nothing open, nothing broken: fit to run the next request."""
        return self.broken is None and not self.engine.fifo and self.active is None

    def __repr__(self) -> str:
        state = f"broken ({self.broken})" if self.broken else self.status
        return f"<PinnedConnection pid={self.server.pid} {state}>"

    # -- reading ------------------------------------------------------------------------
    def receive_more(self) -> None:
        """Receive once (within the deadline) and hand every complete message to the engine."""
        timer = None
        deadline = self._deadline
        if deadline is not None:
            remaining = deadline.remaining()
            if not remaining:
                raise Expired()
            timer = gevent.Timeout(remaining, Expired())
            timer.start()
        try:
            if self._reply_pending:
                self._reply_pending = False
                self._sock.wait_readable()
            messages = self._wire.receive()
        except OperationalError as exc:
            raise self._lost(str(exc)) from exc
        finally:
            if timer is not None:
                timer.close()
        engine = self.engine
        try:
            engine.receive(messages)
        except (ServerEnded, SettingRefused) as exc:
            self.mark_broken(str(exc))
            self.server.close(terminate=isinstance(exc, SettingRefused))
            raise
        if engine.outgoing:
            self.send(engine.take_outgoing())

    def _lost(self, reason: str) -> OperationalError:
        self.mark_broken(reason)
        self.server.close(terminate=False)
        if self.engine.fifo:
            return IndeterminateResultError(f"{reason}; the statement may or may not have run")
        return OperationalError(reason)

    def wait(self, until: Until, timeout: float | None) -> bool:
        """Read until ``until()`` holds; True if the deadline passed and we cancelled.

        Any exception that escapes leaves a reply half read: the connection is broken.
        """
        try:
            if timeout is not None:
                self._deadline = Deadline(timeout)
            try:
                while not until():
                    self.receive_more()
                return False
            except Expired:
                self._deadline = None
            self.cancel_and_drain(until, timeout)
            return True
        except BaseException:
            self.mark_broken("interrupted while reading a reply")
            raise
        finally:
            self._deadline = None

    def cancel_and_drain(self, until: Until, timeout: float | None) -> None:
        """CancelRequest, then read until ``until()``, all within one grace period.

        The grace is the caller's timeout again (at least ``MIN_CANCEL_GRACE``), capped
        at ``cancel_grace``: a caller who asked for 0.3 s is not kept waiting for 5 s.
        A cancel whose delivery the server did not confirm in that time could still
        land on a later statement, so the connection is retired after this call.
        """
        grace = self.cancel_grace
        if timeout is not None:
            grace = min(grace, max(MIN_CANCEL_GRACE, timeout))
        deadline = Deadline(grace)
        try:
            confirmed = self.server.send_cancel(timeout=grace)
        except Exception as exc:
            self.mark_broken("a cancel request could not be sent")
            self.close()
            raise QueryTimeout(f"no result within {timeout}s and the cancel request failed "
                               f"({exc}); the connection was closed") from None
        self._deadline = deadline
        try:
            while not until():
                self.receive_more()
        except Expired:
            self.mark_broken("the server did not answer a cancel request")
            self.close()
            raise QueryTimeout(
                f"no result within {timeout}s, and no answer within {grace}s of the "
                "cancel request; the connection was closed") from None
        finally:
            self._deadline = None
        if not confirmed:
            self.mark_broken("a cancel request was not confirmed and could hit a later statement")

    @staticmethod
    def raise_first(exchanges: Iterable[Exchange], timed_out: bool,
                    timeout: float | None) -> None:
        """Raise the first error among ``exchanges``; a cancelled one as QueryTimeout."""
        for exchange in exchanges:
            error = exchange.reply.error
            if error is None:
                continue
            if timed_out and is_cancel(error):
                raise timeout_error(timeout, error) from error
            raise error

    # -- writing ------------------------------------------------------------------------
    def check_usable(self, owner: object = None) -> None:
        if self.broken is not None:
            raise OperationalError(f"the connection is unusable: {self.broken}")
        active = self.active
        if active is not None and active is not owner:
            active.abandon("another statement ran on its connection")

    def start(self, exchanges: Sequence[Exchange], owner: object = None,
              send: bool = True) -> list[Exchange]:
        """Put ``exchanges`` (after any deferred prefix) in flight and write them, unless
        ``send`` is False (the caller writes ``data``-joined bytes itself). Returns the
        exchanges in flight, prefix first."""
        if self.broken is not None or self.active is not None:
            self.check_usable(owner)
        self.used = True
        prefix = self._written_prefix = self._prefix
        started: list[Exchange]
        if prefix:
            self._prefix = []
            started = [exchange for exchange, _, _ in prefix]
            started.extend(exchanges)
        else:
            started = list(exchanges)
        self.engine.fifo.extend(started)
        if send:
            self.send(started[0].data if len(started) == 1
                      else b"".join([exchange.data for exchange in started]))
        return started

    def send(self, data: bytes) -> None:
        """Write ``data``; a write cut short leaves the stream unusable."""
        try:
            sent = self._sock.send(data)  # one call for the usual small request
            if sent < len(data):
                self._sock.sendall(memoryview(data)[sent:])
            self._reply_pending = True
        except OperationalError as exc:
            raise self._lost(str(exc)) from exc
        except BaseException:
            self.mark_broken("interrupted while writing a request")
            raise

    def run(self, exchanges: Sequence[Exchange], timeout: float | None,
            owner: object = None) -> bool:
        """Write ``exchanges`` and read until the last is complete; True if cancelled.
        Raises the first error of a deferred statement written ahead of them."""
        fifo = self.engine.fifo
        alone = timeout is None and not fifo and self.active is None
        started = self.start(exchanges, owner)
        if alone:
            # Nothing else in flight, no deadline: done when the FIFO is empty (the usual
            # case, read without the general wait's closures).
            try:
                while fifo:
                    self.receive_more()
            except BaseException:
                self.mark_broken("interrupted while reading a reply")
                raise
            timed_out = False
        else:
            timed_out = self.wait(all_done(started), timeout)
        prefix = self._written_prefix
        if prefix:
            self.raise_first(started[: len(prefix)], timed_out, timeout)
        if self.registry.unseen and not timed_out:  # (a type lookup in a transaction missed)
            self.registry.learn_unseen(self.engine.settings.server_major >= 14)
        return timed_out

    def mark_broken(self, reason: str) -> None:
        if self.broken is None:
            self.broken = reason

    # -- deferred statements (BEGIN, SAVEPOINT) -------------------------------------------
    def defer(self, sql: str, tag: object) -> None:
        """Queue ``sql`` to be written ahead of the next request."""
        self._prefix.append((self.engine.script(sql), tag, sql))

    def undefer(self, tag: object) -> bool:
        """Drop the last deferred statement if it carries ``tag``: it never reached the server."""
        if self._prefix and self._prefix[-1][1] is tag:
            self._prefix.pop()
            return True
        return False

    @property
    def in_transaction(self) -> bool:
        return self.status != "I" or bool(self._prefix)

    def note(self, sql: str) -> None:
        """Remember what ``sql`` (about to be sent) may leave behind for the next borrower."""
        found = residue(sql)
        if found > self.residue:
            self.residue = found

    # -- statements ---------------------------------------------------------------------
    def command(self, sql: str, timeout: float | None = None) -> Result:
        """Run ``sql`` with a simple Query (several statements allowed): the last result."""
        self.note(sql)
        exchange = self.engine.script(sql)
        timed_out = self.run((exchange,), timeout)
        if exchange.reply.error is not None:
            self.raise_first((exchange,), timed_out, timeout)
        return exchange.result()

    def query(self, sql: str, params: Sequence[Any] = (),
              timeout: float | None = None) -> Result:
        """Run one statement (``Engine.statement`` chooses the simple or the extended
        protocol): its result, the last statement's for a script."""
        facts = self._facts.get(sql)  # (what check_parameter_count and note check)
        if facts is None:
            facts = remember(self._facts, sql, statement_facts(sql))
        allowed, left = facts
        if len(params) > allowed:
            check_parameter_count(sql, len(params))
        if left > self.residue:
            self.residue = left
        exchange, timed_out = self.execute_statement(sql, params, timeout)
        if exchange.reply.error is not None:
            self.raise_first((exchange,), timed_out, timeout)
        return exchange.result()

    def execute_statement(self, sql: str, params: Sequence[Any],
                          timeout: float | None) -> tuple[Exchange, bool]:
        """Run ``sql`` with ``params`` (``Engine.statement``'s exchange), and build it again
        when the engine's outcome says so (after a description, or a statement fault where
        nothing ran)."""
        budget: RetryBudget | None = None
        engine = self.engine
        exchange: Exchange | None = None
        while True:
            if exchange is None:
                exchange = engine.statement(sql, params)
            timed_out = self.run((exchange,), timeout)
            outcome = engine.outcome(exchange)
            if outcome is ANSWERED and not timed_out:
                return exchange, False
            if budget is None:
                budget = RetryBudget()
            while outcome is AWAITS and not timed_out:
                budget.allows(AWAITS)
                outcome, timed_out = self._look_up_types(exchange, timeout)
            if timed_out:
                if outcome is DESCRIBED:  # the caller's time went on the description
                    raise timeout_error(timeout, exchange.error)
                return exchange, True
            if outcome is RESTART:  # the transaction it opened failed before anything ran
                if not budget.allows(STALE) or not self._begin_again():
                    return exchange, False
            elif not budget.allows(outcome):
                return exchange, False
            exchange = None

    def _begin_again(self) -> bool:
        """ROLLBACK the transaction that the last request opened with its deferred BEGIN
        (which the server answered), and defer that BEGIN again; False if that request
        carried none (the user's own BEGIN: nothing to replay)."""
        prefix = self._written_prefix
        if not prefix:
            return False
        self.command("ROLLBACK")
        self._prefix = [(self.engine.script(sql), tag, sql) for _, tag, sql in prefix]
        return True

    def _look_up_types(self, exchange: Exchange, timeout: float | None) -> tuple[Any, bool]:
        """(After AWAITS) look up the types ``exchange``'s result waits for, here; then its
        outcome again, and whether the lookup timed out."""
        engine = self.engine
        lookup = engine.follow_up(exchange)
        timed_out = self.run([lookup], timeout)
        self.raise_first([lookup], timed_out, timeout)
        return engine.outcome(exchange), timed_out

    # -- notifications ----------------------------------------------------------------------
    def _queue_notification(self, note: Notify) -> None:
        queue = self.notifications
        if len(queue) >= NOTIFICATION_LIMIT:
            queue.popleft()
            self._dropped_notifications += 1
            if self._dropped_notifications == 1:
                log.warning("pgmux: more than %d unread notifications; dropping the oldest",
                            NOTIFICATION_LIMIT)
        queue.append(note)

    def wait_notify(self, timeout: float | None) -> Notify | None:
        """The next notification, waiting up to ``timeout`` seconds (None: forever)."""
        if self.notifications:
            return self.notifications.popleft()
        self.check_usable()
        if self._prefix:  # run the deferred statements now, before waiting
            self.run([], None)
        if timeout is not None:
            self._deadline = Deadline(timeout)
        try:
            while not self.notifications:
                self.receive_more()
        except Expired:
            return None
        except BaseException:
            self.mark_broken("interrupted while waiting for a notification")
            raise
        finally:
            self._deadline = None
        return self.notifications.popleft()

    # -- lifecycle --------------------------------------------------------------------------
    def reset(self, timeout: float, statements: Sequence[str]) -> bool:
        """Make the connection fit for the next borrower; False if it is not.

        ROLLBACK if in a transaction, then the pool's reset ``statements`` (none after work
        that left nothing behind), all written at once; every reply must be clean and the
        status idle. The engine forgets the server's prepared statements if they dropped
        them (it watches for DISCARD ALL).
        """
        if self.broken is not None:
            return False
        if not statements and self.clean and self.engine.status == "I":
            self._prefix = []  # deferred statements never reached the server: nothing to undo
            self.used = False
            return True
        timer = gevent.Timeout(timeout)
        timer.start()
        try:
            if self.active is not None:
                self.active.abandon("its session ended")
            self._prefix = []  # deferred statements never reached the server: nothing to undo
            rollback = ["ROLLBACK"] if self.status != "I" else []
            exchanges = [self.engine.script(sql) for sql in (*rollback, *statements)]
            self.run(exchanges, None)
        except gevent.Timeout as exc:
            if exc is not timer:
                raise
            self.mark_broken("the reset did not finish in time")
            return False
        except Exception as exc:
            log.info("pgmux: resetting a pinned connection failed: %s", exc)
            return False
        finally:
            timer.close()
        return self._after_reset(exchanges)

    def end_and_reset(self, sql: str, statements: Sequence[str]) -> Result:
        """Run ``sql`` (the COMMIT or ROLLBACK that ends a session's last transaction) and
        the pool's reset ``statements`` in one round trip: the pool then has nothing left
        to do when the connection comes back. Returns (or raises) what ``sql`` gave."""
        script = self.engine.script
        end = script(sql)
        if statements:
            resets = [script(reset) for reset in statements]
            self.run([end, *resets], None)
        else:  # (after a clean transaction)
            resets = []
            self.run((end,), None)
        self._after_reset(resets)
        if end.reply.error is not None:
            self.raise_first((end,), False, None)
        return end.result()

    def _after_reset(self, exchanges: Sequence[Exchange]) -> bool:
        """Whether the reset ``exchanges`` left the connection fit for the next borrower."""
        for exchange in exchanges:
            if exchange.reply.error is not None:
                return False
        if self.engine.status != "I" or not self.clean:
            return False
        self.notifications.clear()
        self.used = False
        self.residue = NO_RESIDUE
        return True

    def probe(self) -> bool:
        """Whether an idle connection still looks alive (checked without waiting)."""
        if self.broken is not None or self.server.closed:
            return False
        try:
            readable, _, _ = _poll_select([self._fileno], [], [], 0)
        except (OSError, ValueError):
            return False
        if not readable:
            return True
        self._deadline = Deadline(PROBE_TIMEOUT)
        try:
            self.receive_more()  # only asynchronous messages may arrive while idle
        except Expired:
            return True  # e.g. a TLS record with no application data
        except ProtocolError:
            self.mark_broken("the server sent a message while the connection was idle")
            return False
        except Exception:
            return False
        finally:
            self._deadline = None
        return True

    def close(self) -> None:
        """Close the socket, with Terminate when the connection is at a clean point."""
        clean = not self.engine.fifo and self.broken is None
        self.mark_broken("closed")
        self.server.close(terminate=clean)

    def discard(self) -> None:
        """Close a connection being dropped; cancel first what may still run on it."""
        if self.server.closed:
            return
        if self.engine.fifo or self.active is not None:
            self.mark_broken("dropped while busy")
            gevent.spawn(self._cancel_then_close)
        else:
            self.close()

    def _cancel_then_close(self) -> None:
        try:
            self.server.send_cancel(timeout=self.cancel_grace)
        except Exception:
            pass
        finally:
            self.server.close(terminate=False)

    def abandon(self) -> None:
        """In a forked child: drop the socket without a byte on the wire."""
        self.mark_broken("abandoned after fork")
        self.server.close(terminate=False)

adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
