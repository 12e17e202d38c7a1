"""COPY on a pinned connection: FROM STDIN with an upload watcher, TO STDOUT as a reader."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import gevent

from pgmux.engine import CopyExchange
from pgmux.io.active import ActiveReader
from pgmux.io.deadline import Deadline
from pgmux.io.pinned import PinnedConnection, timeout_error
from pgmux.types import encode_copy_row
from pgmux.types.registry import TypeRegistry

COPY_CHUNK = 64 * 1024  # CopyData messages are filled up to this size
_TIMED_OUT = "canceled: the COPY ran past its timeout"


def _begin(conn: PinnedConnection, exchange: CopyExchange,
           timeout: float | None) -> tuple[CopyExchange, bool]:
    """Send the COPY and read until its data phase begins (or it failed)."""
    started = conn.start([exchange])
    timed_out = conn.wait(lambda: exchange.began or exchange.done, timeout)
    conn.raise_first(started[:-1], timed_out, timeout)
    return exchange, timed_out


def _refuse(conn: PinnedConnection, exchange: CopyExchange, timed_out: bool,
            timeout: float | None) -> None:
    """The statement failed or was not the COPY asked for: raise why."""
    conn.raise_first([exchange], timed_out, timeout)
    raise exchange.not_the_copy()


def _drain(conn: PinnedConnection, exchange: CopyExchange) -> None:
    """Read a COPY that is being ended to its ReadyForQuery, dropping any data."""
    exchange.wanted = False
    exchange.chunks.clear()
    conn.wait(lambda: exchange.done, conn.cancel_grace)


def run_copy_in(conn: PinnedConnection, sql: str, source: Iterable[Any],
                timeout: float | None) -> int:
    """Run ``COPY ... FROM STDIN`` with data from ``source``; the rows copied."""
    deadline = Deadline(timeout)
    conn.note(sql)
    exchange, timed_out = _begin(conn, conn.engine.copy_in(sql), timeout)
    if timed_out and exchange.copying:  # cancelled as the COPY began: end it for certain
        conn.send(conn.engine.copy_fail(_TIMED_OUT))
        _drain(conn, exchange)
        raise timeout_error(timeout, exchange.error)
    if not exchange.copying:
        _refuse(conn, exchange, timed_out, timeout)
    try:
        failure, expired = _upload(conn, exchange, source, deadline)
    except BaseException:
        conn.mark_broken("interrupted during COPY FROM STDIN")
        raise
    timed_out = conn.wait(lambda: exchange.done, deadline.remaining()) or expired
    if failure is not None:
        raise failure
    conn.raise_first([exchange], timed_out, timeout)
    return exchange.result().rowcount


def _upload(conn: PinnedConnection, exchange: CopyExchange, source: Iterable[Any],
            deadline: Deadline) -> tuple[BaseException | None, bool]:
    """Send the COPY data while a helper greenlet reads, in case the server ends the COPY
    early; then CopyDone, or CopyFail for a producer that raised or a deadline that passed.

    Returns (the producer's exception, whether the deadline passed).
    """
    watcher = gevent.spawn(_watch, conn, exchange)
    try:
        failure, expired = _send_copy_data(conn, exchange, source, deadline)
        if not exchange.copying:  # the server answered while we were still sending
            return failure, expired
        engine = conn.engine
        if failure is not None:
            conn.send(engine.copy_fail(f"the data source raised {type(failure).__name__}"))
        elif expired:
            conn.send(engine.copy_fail(_TIMED_OUT))
        else:
            conn.send(engine.copy_done())
        return failure, expired
    finally:
        if not watcher.ready():
            watcher.kill()
        elif watcher.exception is not None:
            raise watcher.exception


def _watch(conn: PinnedConnection, exchange: CopyExchange) -> None:
    """Read while the data goes out, until the server ends the COPY (by an error)."""
    while exchange.copying:
        conn.receive_more()


def _send_copy_data(conn: PinnedConnection, exchange: CopyExchange, source: Iterable[Any],
                    deadline: Deadline) -> tuple[BaseException | None, bool]:
    registry = conn.registry
    copy_data = conn.engine.copy_data
    buffer = bytearray()
    items = iter(source)
    end = object()
    while True:
        try:
            item = next(items, end)
            if item is end:
                break
            buffer += _copy_bytes(item, registry)
        except Exception as exc:  # the producer (or a value in it) failed
            return exc, False
        if deadline.expired:
            return None, True
        if len(buffer) < COPY_CHUNK:
            continue
        conn.send(copy_data(bytes(buffer)))
        buffer.clear()
        gevent.sleep(0)  # let the watcher see an early answer even if no write blocked
        if not exchange.copying:
            return None, False
    if buffer:
        conn.send(copy_data(bytes(buffer)))
    return None, False


def _copy_bytes(item: Any, registry: TypeRegistry) -> Any:
    if isinstance(item, (bytes, bytearray, memoryview)):
        return item
    if isinstance(item, str):
        return item.encode()
    return encode_copy_row(item, registry)


def start_copy_out(conn: PinnedConnection, sql: str, timeout: float | None) -> CopyOutReader:
    """Start ``COPY ... TO STDOUT``; the reader yields the data in chunks."""
    conn.note(sql)
    exchange, timed_out = _begin(conn, conn.engine.copy_out(sql), timeout)
    if timed_out and exchange.began:  # cancelled as the COPY began: read it to its end
        _drain(conn, exchange)
        raise timeout_error(timeout, exchange.error)
    if not exchange.began:
        _refuse(conn, exchange, timed_out, timeout)
    reader = CopyOutReader(conn, exchange, timeout)
    reader.attach()
    return reader


class CopyOutReader(ActiveReader):
    """The data of a ``COPY ... TO STDOUT``, read chunk by chunk."""

    WHAT = "COPY"

    def __init__(self, conn: PinnedConnection, exchange: CopyExchange, timeout: float | None):
        super().__init__(conn)
        self.exchange = exchange
        self.timeout = timeout

    def fetch(self) -> bytes | None:
        """The next chunk (every CopyData already received, joined); None at the end."""
        if self.ended():
            return None
        conn = self.conn
        exchange = self.exchange
        try:
            timed_out = conn.wait(lambda: exchange.chunks or exchange.done, self.timeout)
            if timed_out:
                _drain(conn, exchange)
        except BaseException:
            conn.mark_broken("interrupted during COPY TO STDOUT")
            self.detach()
            raise
        if timed_out:
            self.detach()
            raise timeout_error(self.timeout, exchange.error) from exchange.error
        if exchange.chunks:
            chunk = b"".join(exchange.chunks)
            exchange.chunks.clear()
            return chunk
        self.detach()
        conn.raise_first([exchange], False, None)
        return None

    def close(self) -> None:
        """Stop early: cancel the COPY and drain the rest of it."""
        if self.finished:
            return
        exchange = self.exchange
        exchange.wanted = False
        exchange.chunks.clear()
        try:
            self.conn.cancel_and_drain(lambda: exchange.done, None)
        except BaseException:
            self.conn.mark_broken("interrupted while ending a COPY TO STDOUT")
            raise
        finally:
            self.detach()
