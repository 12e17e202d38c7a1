"""A session's explicit pipeline: statements queued, sent in groups, each its own answer.

``Session.pipeline()`` makes a ``Pipeline`` over the session's pinned connection
(``io.pinned_pipeline.ExplicitPipeline`` drives it); each queued statement gives an
``Operation`` handle whose result is known once its group is synced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pgmux.errors import InterfaceError
from pgmux.io.pinned import PinnedConnection
from pgmux.io.pinned_pipeline import ExplicitPipeline, PipelineOp
from pgmux.telemetry import PINNED, Observer, active, claim_wait
from pgmux.telemetry import Operation as Observed

Params = Sequence[Any]


class Pipeline:
    """Explicit batches on a session: operations run in order, ``sync()`` ends a group.

    An error aborts the rest of its group (those handles raise ``PipelineAborted``);
    the next group runs normally. Results are available from a handle once its group
    is synced. Leaving the block sends a final Sync and reads every reply, whether
    it exits normally or by an exception; queued operations are sent then. Only a
    kill or gevent.Timeout leaves without waiting (the connection is then replaced).
    Without an explicit BEGIN each group is one implicit transaction: an error rolls
    back the whole group.
    """

    def __init__(self, timeout: float | None, use: Callable[[], PinnedConnection],
                 check: Callable[[], PinnedConnection],
                 hold: Callable[[Pipeline | None], None], observer: Observer | None):
        """(Made by ``Session.pipeline``) ``use``: the session's connection, checked as for a
        statement; ``check``: the connection, if the session is still open here; ``hold``:
        tell the session that this pipeline holds its connection (None: no longer);
        ``observer``: the session's telemetry, if on."""
        self._timeout = timeout
        self._use = use
        self._check = check
        self._hold = hold
        self._observer = observer
        self._impl: ExplicitPipeline | None = None
        self._op: Observed | None = None  # its telemetry, if on
        self._ops: list[PipelineOp] | None = None  # what it ran, kept for telemetry alone

    def __enter__(self) -> Pipeline:
        if self._impl is not None:
            raise InterfaceError("a pipeline can be entered only once")
        conn = self._use()
        self._impl = ExplicitPipeline(conn, self._timeout)
        self._hold(self)
        observer = self._observer
        if observer is not None:
            self._ops = []
            self._op = observer.begin("", PINNED, exclusive=False, wait=claim_wait(conn))
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        impl = self._impl
        self._hold(None)
        if impl is None:
            return
        op = self._op
        ops = self._ops
        if op is not None and ops is not None:
            query_text = op.observer.query_text
            op.batch_of([query_text(item.sql, bool(item.params[2])) for item in ops])
        try:
            if exc is None or isinstance(exc, Exception):
                impl.finish()
            else:
                impl.discard(type(exc).__name__)
        except BaseException as error:
            if op is not None:
                op.failed(error)
            raise
        if ops is None:  # telemetry off
            return
        failure, commands = _outcome(ops)
        if op is None:  # part of the operation running (a DB-API executemany): its tags
            outer = active()
            if outer is not None:
                outer.ran(commands)
            return
        failure = exc or failure  # (an operation's error shows only through its handle)
        if failure is not None:
            op.failed(failure)
        else:
            op.succeeded(operations=commands)

    def _open(self) -> ExplicitPipeline:
        impl = self._impl
        if impl is None or impl.finished:
            raise InterfaceError("the pipeline is not open: use it inside its block")
        self._check()
        return impl

    def query(self, sql: str, params: Params = ()) -> Operation:
        """Queue a statement; its handle's ``result()`` is a Result."""
        return Operation(self, self._add(sql, params), rowcount=False)

    def execute(self, sql: str, params: Params = ()) -> Operation:
        """Queue a command; its handle's ``result()`` is the row count."""
        return Operation(self, self._add(sql, params), rowcount=True)

    def _add(self, sql: str, params: Params) -> PipelineOp:
        op = self._open().add(sql, params)
        if self._ops is not None:  # (telemetry on)
            self._ops.append(op)
        return op

    def sync(self) -> None:
        """End the current group (a Sync boundary)."""
        self._open().sync()

    def flush(self) -> None:
        """Send everything queued and read every reply now."""
        self._open().flush()


def _outcome(ops: list[PipelineOp]) -> tuple[BaseException | None, list[str | None]]:
    """(Telemetry, at a pipeline's end) the first error among ``ops``, and their command
    tags."""
    for op in ops:
        error = op.error or (op.exchange.error if op.exchange is not None else None)
        if error is not None:
            return error, []
    return None, [op.exchange.reply.command for op in ops if op.exchange is not None]


class Operation:
    """The handle of one pipelined operation."""

    __slots__ = ("_pipeline", "_op", "_rowcount")

    def __init__(self, pipeline: Pipeline, op: PipelineOp, rowcount: bool):
        self._pipeline = pipeline
        self._op = op
        self._rowcount = rowcount

    @property
    def done(self) -> bool:
        """Whether the outcome is known (its group was synced and read)."""
        return self._op.synced or (self._op.finished and self._op.error is not None)

    def result(self) -> Any:
        """The Result (or row count); raises the operation's own error or PipelineAborted."""
        op = self._op
        if not op.synced:
            impl = self._pipeline._impl
            if impl is None or impl.finished:
                if op.error is not None:
                    raise op.error
                raise InterfaceError("the operation never completed")
            self._pipeline._check()
            result = impl.result(op)
        else:
            result = op.outcome()
        return result.rowcount if self._rowcount else result

    def __repr__(self) -> str:
        state = "done" if self.done else "pending"
        return f"<pgmux.Operation {state}>"
