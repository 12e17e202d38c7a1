"""Exchanges: one request written to the server, and the state of its reply.

The engine (``pgmux.engine.core``) routes every backend message to the exchange at
the head of a connection's FIFO and calls the hooks below; an exchange only keeps
state. Two kinds of ending:

* ``ENDS_AT_READY``: the request ends with Sync (or is a simple Query), and the
  exchange is complete at its ReadyForQuery: one query, a description, a script,
  a COPY, a bare Sync;
* open: one operation inside a larger extended-protocol batch (an explicit
  pipeline's statement, a stream's batch), complete at its CommandComplete,
  EmptyQueryResponse, PortalSuspended or ErrorResponse. After an error the server
  skips everything up to the next Sync, so the engine aborts the open exchanges
  queued before it.

An exchange's progress is one ``state``: ``NEW`` (built; in flight once the I/O layer
put it in the FIFO), ``COPYING`` (a COPY's data phase), ``COPIED`` (the COPY's
CommandComplete came), then ``DONE`` (the server answered it in full),
``SUSPENDED`` (an open operation stopped at its row limit: done, the portal still open)
or ``LOST`` (the connection failed under it; ``failure`` says how). What the caller does
next is the engine's ``outcome()``.
"""

from __future__ import annotations

from typing import Any

from pgmux._native import adopt
from pgmux.engine.result import DecodeError, Result
from pgmux.engine.rowshape import EMPTY_SHAPE, RowShape
from pgmux.engine.statements import Description, Statement
from pgmux.errors import DatabaseError, InterfaceError, PipelineAborted, ProtocolError
from pgmux.protocol import backend as msg

NEW = "new"
COPYING = "copying"
COPIED = "copied"
DONE = "done"
SUSPENDED = "suspended"
LOST = "lost"
_ANSWERED = frozenset((DONE, SUSPENDED))

COPY_IN_MISUSE = "COPY ... FROM STDIN needs a session's copy_in()"
COPY_OUT_MISUSE = "COPY ... TO STDOUT needs a session's copy_out()"


class Reply:
    """Accumulates the messages answering one statement into a ``Result`` or an error."""

    __slots__ = ("shape", "rows", "command", "error", "undecoded")

    def __init__(self, shape: RowShape | None = None):
        self.shape = shape
        self.rows: list[tuple[Any, ...]] = []
        self.command = ""
        self.error: BaseException | None = None
        self.undecoded: tuple[int, ...] = ()  # columns whose values wait (engine.late)

    @staticmethod
    def new(shape: RowShape | None) -> Reply:
        """``Reply(shape)`` for the request path: compiled, a C call that allocates it
        directly (no arguments parsed, no ``__init__`` dispatched). Sets what ``__init__``
        sets."""
        reply = Reply.__new__(Reply)
        reply.shape = shape
        reply.rows = []
        reply.command = ""
        reply.error = None
        reply.undecoded = ()
        return reply

    def add_row(self, payload: bytes) -> None:
        """Decode one DataRow (the slow path, which names what went wrong)."""
        if self.error is not None:
            return
        shape = self.shape
        if shape is None:
            raise ProtocolError("DataRow before any RowDescription")
        try:
            self.rows.append(shape.decode(payload))
        except ProtocolError:  # the row itself is malformed
            raise
        except Exception as exc:  # a codec rejected the value: the caller gets the reason
            self.error = DecodeError(f"could not decode a result value: {exc}")

    def fail(self, fields: dict[str, str]) -> None:
        """Record a server error; the first one wins."""
        if self.error is None:
            self.error = DatabaseError.from_fields(fields)

    def misuse(self, text: str) -> None:
        if self.error is None:
            self.error = InterfaceError(text)

    def result(self) -> Result:
        if self.error is not None:
            raise self.error
        shape = self.shape or EMPTY_SHAPE
        return Result(self.rows, shape.names, self.command, shape.columns)


class Exchange:
    """The base: a request's bytes, its reply, and whether the caller still wants it."""

    __slots__ = ("data", "reply", "statement", "parses", "wanted", "state", "failure", "token",
                 "sent_at", "slow", "undecoded", "weight", "statements", "plain", "describes")
    ENDS_AT_READY = True
    EXTENDED = True  # sent with the extended protocol (matters after a CopyFail)
    DESCRIBES = False  # only a description: the request itself is built next
    # One statement answered by the base hooks and completed at its ReadyForQuery: the
    # engine's receive loop handles its CommandComplete and ReadyForQuery inline.
    PLAIN = False

    def __init__(self, data: bytes, reply: Reply | None = None,
                 statement: Statement | None = None, parses: bool = False):
        self.data = data
        self.reply = reply if reply is not None else Reply()
        self.statement = statement
        self.parses = parses  # this request carries the Parse of ``statement``
        self.wanted = True  # False once its caller gave up: rows are dropped
        self.state = NEW
        self.failure: BaseException | None = None  # the connection failed under it
        self.token: Any = None  # the I/O layer's attachment (a waiter)
        self.sent_at = 0.0  # when it was written (a pipelined connection's clock)
        self.slow = False  # known to be slow: routed away from the fast lanes
        self.undecoded = False  # a reply of it has values waiting to be decoded
        self.weight = 1  # the pipeline slots it takes (the router's load counts them)
        self.statements = 1  # the statements it carries
        # The class's PLAIN and DESCRIBES, read once: the engine and the drivers read these
        # for every query (compiled, C fields).
        kind = type(self)
        self.plain = kind.PLAIN
        self.describes = kind.DESCRIBES

    @staticmethod
    def new(kind: type[Exchange], data: bytes, reply: Reply, statement: Statement | None,
            parses: bool) -> Exchange:
        """``kind(data, reply, statement, parses)`` for the request path, ``kind`` a class
        built by this ``__init__`` (``QueryExchange``, ``PortalExchange``, a unit's piece):
        compiled, a C call that allocates it directly (a ``QueryExchange``, the common one,
        without a call of ``__new__``). Sets what ``__init__`` sets."""
        exchange: Exchange
        if kind is QueryExchange:
            exchange = QueryExchange.__new__(QueryExchange)
            exchange.plain = True
            exchange.describes = False
        else:
            exchange = kind.__new__(kind)
            exchange.plain = kind.PLAIN
            exchange.describes = kind.DESCRIBES
        exchange.data = data
        exchange.reply = reply
        exchange.statement = statement
        exchange.parses = parses
        exchange.wanted = True
        exchange.state = NEW
        exchange.failure = None
        exchange.token = None
        exchange.sent_at = 0.0
        exchange.slow = False
        exchange.undecoded = False
        exchange.weight = 1
        exchange.statements = 1
        return exchange

    @property
    def error(self) -> BaseException | None:
        return self.reply.error

    @property
    def done(self) -> bool:
        """The server answered it in full (DONE or SUSPENDED)."""
        return self.state in _ANSWERED

    @property
    def suspended(self) -> bool:
        """An open operation stopped at its row limit; the portal is still open."""
        return self.state is SUSPENDED

    def lose(self, failure: BaseException) -> None:
        """(The I/O layer) the connection failed before its answer was complete."""
        self.failure = failure
        self.state = LOST

    # hooks called by the engine ------------------------------------------------------------
    def command_complete(self, tag: str) -> bool:
        """Record the command tag; True if that ends this exchange (an open operation)."""
        self.reply.command = tag
        return False

    def row_description(self, shape: RowShape) -> None:
        self.reply.shape = shape

    def no_data(self) -> None:
        self.reply.shape = EMPTY_SHAPE

    def parameter_description(self, oids: tuple[int, ...]) -> None:
        pass

    def empty_query(self) -> None:
        self.reply.command = ""

    def portal_suspended(self) -> None:
        raise ProtocolError("PortalSuspended in reply to a request without a row limit")

    def copy_response(self, kind: int) -> bool:
        """A CopyIn/Out/BothResponse; False if this exchange did not ask for COPY."""
        self.reply.misuse(COPY_OUT_MISUSE if kind == msg.COPY_OUT_RESPONSE else COPY_IN_MISUSE)
        return False

    def copy_data(self, payload: bytes) -> None:
        pass  # data of a COPY nobody asked for: dropped

    def abort(self, error: BaseException) -> None:
        """An earlier error made the server skip this open exchange."""
        self.reply.error = error
        self.state = DONE

    def result(self) -> Result:
        return self.reply.result()

    def answers(self) -> list[Reply]:
        """The replies that hold results (a script's: its last statement's)."""
        return [self.reply]

    def skipped(self) -> list[Statement]:
        """Statements whose Parse the server skipped after this exchange's error."""
        return []

    def mutes(self, fields: dict[str, str]) -> bool:
        """Whether a notice that came while this exchange was answered is expected (of
        pgmux's own doing) and not for the user."""
        return False


class QueryExchange(Exchange):
    """One statement: [Parse] Bind [Describe] Execute Sync."""

    __slots__ = ()
    PLAIN = True


class DescribeExchange(Exchange):
    """[Parse] Describe-statement Sync: what a statement takes and returns, before it runs."""

    __slots__ = ("param_types", "columns", "description")
    DESCRIBES = True

    def __init__(self, data: bytes, statement: Statement, parses: bool):
        super().__init__(data, None, statement, parses)
        self.param_types: tuple[int, ...] | None = None
        self.columns: tuple[Any, ...] | None = None
        self.description: Description | None = None  # what it said, once answered

    def parameter_description(self, oids: tuple[int, ...]) -> None:
        self.param_types = oids

    def row_description(self, shape: RowShape) -> None:
        self.columns = shape.columns

    def no_data(self) -> None:
        self.columns = ()


class ScriptExchange(Exchange):
    """A simple Query (one statement or several): keeps the last statement's result."""

    __slots__ = ("last",)
    EXTENDED = False

    def __init__(self, data: bytes):
        super().__init__(data)
        self.last: Reply | None = None

    def row_description(self, shape: RowShape) -> None:
        error = self.reply.error
        self.reply = Reply(shape)
        self.reply.error = error

    def command_complete(self, tag: str) -> bool:
        reply = self.reply
        reply.command = tag
        self.last = reply
        self.reply = Reply()
        self.reply.error = reply.error
        return False

    def empty_query(self) -> None:
        self.last = Reply()
        self.last.error = self.reply.error

    @property
    def error(self) -> BaseException | None:
        return self.reply.error

    def result(self) -> Result:
        if self.reply.error is not None:
            raise self.reply.error
        return (self.last or self.reply).result()

    def answers(self) -> list[Reply]:
        return [self.last or self.reply]


class TextExchange(QueryExchange):
    """Binary values of one column the client cannot read in binary (``column`` of the
    ``target`` reply), sent back for the server to give their text: a request run before
    the exchange of ``target`` is complete."""

    __slots__ = ("target", "column", "rows")
    DESCRIBES = True
    PLAIN = False

    def __init__(self, data: bytes, target: Reply, column: int, rows: list[int]):
        super().__init__(data)
        self.target = target
        self.column = column
        self.rows = rows  # the target's rows whose value is not NULL, in parameter order


class TypeLookupExchange(ScriptExchange):
    """A look at ``pg_type`` for the types ``asked`` (``pgmux.types.introspect``): like a
    description, a request run before the one that needs it."""

    __slots__ = ("asked",)
    DESCRIBES = True

    def __init__(self, data: bytes, asked: tuple[int, ...]):
        super().__init__(data)
        self.asked = asked


class CopyExchange(ScriptExchange):
    """``COPY`` through a simple Query: the data phase, then CommandComplete, ReadyForQuery."""

    __slots__ = ("direction", "began", "chunks")

    def __init__(self, data: bytes, direction: int):
        super().__init__(data)
        self.direction = direction  # COPY_IN_RESPONSE or COPY_OUT_RESPONSE
        self.began = False  # the server accepted the COPY (it stays true once it ended)
        self.chunks: list[bytes] = []  # COPY OUT data received and not yet handed out

    @property
    def copying(self) -> bool:
        """The server is in the COPY's data phase."""
        return self.state is COPYING and self.reply.error is None

    def copy_response(self, kind: int) -> bool:
        if kind != self.direction:
            self._wrong()
            return False
        self.state = COPYING
        self.began = True
        return True

    def copy_data(self, payload: bytes) -> None:
        if self.copying and self.direction == msg.COPY_OUT_RESPONSE and self.wanted:
            self.chunks.append(payload)

    def row_description(self, shape: RowShape) -> None:
        self._wrong()
        super().row_description(shape)

    def empty_query(self) -> None:
        self._wrong()
        super().empty_query()

    def command_complete(self, tag: str) -> bool:
        if self.state is COPYING:
            self.state = COPIED
        return ScriptExchange.command_complete(self, tag)  # (no super() in a C method)

    def not_the_copy(self) -> InterfaceError:
        """The error for a statement that is not the COPY asked for."""
        text = "FROM STDIN" if self.direction == msg.COPY_IN_RESPONSE else "TO STDOUT"
        return InterfaceError(f"the statement is not a COPY ... {text}")

    def _wrong(self) -> None:
        if self.reply.error is None:
            self.reply.error = self.not_the_copy()


class SyncExchange(Exchange):
    """A bare Sync (a probe, the end of a stream or of an explicit pipeline's group)."""

    __slots__ = ()
    PLAIN = True


class PortalExchange(Exchange):
    """One open operation: complete at its CommandComplete, EmptyQuery, PortalSuspended
    or ErrorResponse (the server then skips to the next Sync)."""

    __slots__ = ()
    ENDS_AT_READY = False

    def portal_suspended(self) -> None:
        self.state = SUSPENDED

    def command_complete(self, tag: str) -> bool:
        self.reply.command = tag
        return True


ABORTED = "an earlier operation of this pipeline group failed"


def aborted_by(error: BaseException) -> PipelineAborted:
    message = getattr(error, "message", None) or str(error)
    return PipelineAborted(f"{ABORTED}: {message}")

adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
