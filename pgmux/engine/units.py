"""Atomic units: several statements and one Sync, which PostgreSQL runs as one implicit
transaction (all or nothing), sent as one exchange on a pipelined connection.

Theory of operation. ``Engine.unit`` builds each statement as a *piece* (what a single
query would send, with Execute but no Sync), joins the pieces and ends them with one
Sync. The server answers the pieces in order: the ``UnitExchange`` points its ``reply``,
``statement`` and ``parses`` at the piece being answered, so the engine's reply routing
(DataRows, descriptions, ParseComplete, an error and the statement cache's bookkeeping)
works on it as on a single query, and moves to the next piece at each CommandComplete.
An error stops at its piece (the server skips the rest up to Sync and rolls everything
back); one after the last piece is the implicit COMMIT's. Leading pieces of pgmux's own
(``SET TRANSACTION``) come first; their WARNING (25P01: outside a transaction block) is
expected and not passed on.
"""

from __future__ import annotations

from pgmux._native import adopt
from pgmux.engine.exchanges import Exchange, QueryExchange, Reply
from pgmux.engine.statements import Statement

SET_TRANSACTION_WARNING = "25P01"  # "SET TRANSACTION can only be used in transaction blocks"


class UnitItem:
    """One statement of a unit, encoded: ``prepared`` names a ``Client.prepare`` statement
    (its parameters are then the Python values, adapted to the types the server holds)."""

    __slots__ = ("sql", "oids", "formats", "values", "prepared", "params")

    def __init__(self, sql: str, oids: tuple[int, ...], formats: tuple[int, ...],
                 values: list[bytes | None], prepared: str | None = None,
                 params: tuple[object, ...] = ()):
        self.sql = sql
        self.oids = oids
        self.formats = formats
        self.values = values
        self.prepared = prepared
        self.params = params


class UnitPiece(QueryExchange):
    """One statement of a unit while it is built: its bytes (no Sync), its reply, its
    statement. Never in a FIFO itself."""

    __slots__ = ()


class UnitExchange(Exchange):
    """An atomic unit in flight: its pieces, and the one being answered."""

    __slots__ = ("pieces", "index", "leading", "commit")

    def __init__(self, data: bytes, pieces: list[Exchange], leading: int):
        first = pieces[0]
        Exchange.__init__(self, data, first.reply, first.statement, first.parses)
        self.pieces = pieces
        self.index = 0  # the piece being answered (len(pieces): the implicit COMMIT)
        self.leading = leading  # pieces of pgmux's own, before the user's statements
        self.commit = Reply()  # what the implicit COMMIT answers (an error, or nothing)
        self.statements = len(pieces)  # (its pipeline slots: ``ServerTimes.slots``)

    @property
    def failed_at(self) -> int | None:
        """The index among the user's statements of the one that failed; None when the
        unit succeeded or failed at its COMMIT (or in a statement of pgmux's own)."""
        if self.reply.error is None or self.index >= len(self.pieces):
            return None
        index = self.index - self.leading
        return index if index >= 0 else None

    def command_complete(self, tag: str) -> bool:
        self.reply.command = tag
        self._next()
        return False

    def empty_query(self) -> None:
        self.reply.command = ""
        self._next()

    def _next(self) -> None:
        pieces = self.pieces
        pieces[self.index].parses = self.parses
        self.index += 1
        if self.index < len(pieces):
            piece = pieces[self.index]
            self.reply, self.statement, self.parses = piece.reply, piece.statement, piece.parses
        else:
            self.reply, self.statement, self.parses = self.commit, None, False

    def skipped(self) -> list[Statement]:
        """Statements whose Parse the server skipped after an error (never created)."""
        return [piece.statement for piece in self.pieces[self.index + 1:]
                if piece.parses and piece.statement is not None]

    def mutes(self, fields: dict[str, str]) -> bool:
        """A notice to drop: the warning a leading SET TRANSACTION earns."""
        return self.index < self.leading and fields.get("C") == SET_TRANSACTION_WARNING

    def answers(self) -> list[Reply]:
        return [piece.reply for piece in self.pieces[self.leading:]]

adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
