"""The multiplexed path's entry: a client's query methods, the vetting and encoding every
multiplexed statement shares, and prepared statements' handles.

``Multiplexed`` is the part of ``Client`` (``pgmux.client``) that runs statements on the
pipelined connections; the fan-outs (``pgmux.batch``) and atomic units (``pgmux.atomic``)
build on it. Its state is the client's, made by ``Client.__init__``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gevent import getcurrent
from gevent.event import Event
from gevent.hub import get_hub

from pgmux._native import adopt
from pgmux.cache import put_bounded
from pgmux.engine import Engine
from pgmux.engine.exchanges import Exchange, Reply
from pgmux.engine.result import Result, Row, first_row, first_value, rowcount_from_tag
from pgmux.errors import InterfaceError
from pgmux.pool import dispatch
from pgmux.pool.freshness import ReadYourWrites, WalFence, WriteClassifier
from pgmux.pool.lazy import LazyPipelinePool
from pgmux.pool.router import CatalogEntry, PipelinePool
from pgmux.sql.facts import check_parameter_count, parameters_allowed
from pgmux.telemetry import Observer
from pgmux.telemetry.multiplexed import observe
from pgmux.types.names import type_oid

try:  # the hub of the calling thread, without creating one in a foreign thread
    from gevent._hub_local import get_hub_if_exists as hub_of_this_thread
except ImportError:  # pragma: no cover - older gevent
    hub_of_this_thread = get_hub

__all__ = ["Encoded", "Multiplexed", "Params", "PreparedStatement", "hub_of_this_thread"]

Params = Sequence[Any]
Encoded = tuple[tuple[int, ...], tuple[int, ...], list[bytes | None]]  # oids, formats, values
VETTED_LIMIT = 4096  # SQL texts the guard passed, remembered with their parameter count
MAX_VETTED_SQL = 65536  # longer texts are vetted every time, not kept alive


def _run(self: Multiplexed, sql: str, params: Params, timeout: float | None,
         build: dispatch.Build = Engine.query) -> Reply:
    """The entry of every multiplexed query: ``sql`` vetted, its parameters encoded,
    sent, answered; its reply (whose error is raised here). Flat on purpose: the call
    count of this path is asserted (tests/client/test_hot_path.py). With telemetry on,
    the same with ``build`` traced (``pgmux.telemetry.multiplexed``). A module function
    (``Multiplexed._run`` is the same), so that the compiled twin types its locals
    (``multiplexed.pxd``) and calls ``dispatch.run`` in C."""
    observer = self._observer
    if observer is not None and build is Engine.query:
        return self._run_observed(observer, sql, params, timeout)
    # A greenlet the client's hub spawned, or the hub's own parent (the main greenlet), runs
    # in the hub's thread (a greenlet's parent is in its own thread): that settles it
    # without the thread-local lookup of the hub.
    hub = self._hub
    current = getcurrent()
    if current.parent is not hub and current is not hub.parent and (
            hub_of_this_thread() is not hub):
        self._in_own_thread()  # raises
    pool = self._pipelines.current
    if pool is None:
        pool = self._first_pool(sql)
    vetted = self._vetted
    allowed = vetted.get(sql)
    if allowed is None or not pool.standard_conforming_strings:
        allowed = self._vet(sql, pool.standard_conforming_strings)
    if len(params) > allowed:
        check_parameter_count(sql, len(params))  # raises, saying why
    oids, formats, values = self._encode(params)
    slow = pool.costs.known and pool.costs.is_slow((sql, oids))
    if self._reads is None:
        exchange = dispatch.run(pool, build, (sql, oids, formats, values), timeout, slow)
    else:
        exchange = self._send(pool, build, (sql, oids, formats, values), timeout, slow)
    reply = exchange.reply
    error = reply.error
    if error is not None:
        raise error
    if self._fence is not None:
        self._after_statement(sql)
    return reply


class Multiplexed:
    """The multiplexed API of a ``Client`` (and of its ``with_target`` views): ``query``,
    ``fetchone``, ``fetchval``, ``execute`` and ``prepare``, through one entry (``_run``)."""

    # The client's state (``Client.__init__``), as this path reads it.
    acquire_timeout: float
    _closed: bool
    _hub: Any  # the gevent hub of the thread that made the client
    _pipelines: LazyPipelinePool
    _observer: Observer | None  # pgmux.telemetry: None while nothing emits
    _check: Callable[..., None] | None  # the guard's check; None with guard="off"
    _encode: Callable[[Params], Encoded]
    _vetted: dict[str, int]  # SQL the guard passed -> parameters it takes
    _fence: WalFence | None  # set by the first read_your_writes view
    _reads: ReadYourWrites | None  # a read_your_writes view's routing
    _writes: WriteClassifier
    _catalog: dict[str, CatalogEntry]
    _preparing: dict[str, Event]  # names whose prepare() is under way

    def query(self, sql: str, params: Params = (), *, timeout: float | None = None) -> Result:
        """Run one statement on the multiplexed path and return its rows."""
        return _run(self, sql, params, timeout).result()

    def fetchone(self, sql: str, params: Params = (), *,
                 timeout: float | None = None) -> Row | None:
        """The first row, or None."""
        return first_row(_run(self, sql, params, timeout))

    def fetchval(self, sql: str, params: Params = (), *, timeout: float | None = None) -> Any:
        """The first column of the first row, or None."""
        return first_value(_run(self, sql, params, timeout))

    def execute(self, sql: str, params: Params = (), *, timeout: float | None = None) -> int:
        """Run a command and return its row count (-1 if its tag has none)."""
        return rowcount_from_tag(_run(self, sql, params, timeout).command)

    def _after_statement(self, sql: str) -> None:
        """A statement succeeded: fence it if it may have written (read-your-writes)."""
        fence = self._fence
        if fence is not None and self._writes.is_write(sql):
            fence.after_write()

    def _after_write_block(self) -> None:
        """A transaction committed or a session ended: fence it (read-your-writes)."""
        fence = self._fence
        if fence is not None:
            fence.after_write()

    _run = _run

    def _run_observed(self, observer: Observer, sql: str, params: Params,
                      timeout: float | None) -> Reply:
        """``_run`` as one traced operation. Apart, so that ``_run`` itself has no closure:
        its captured names would be cells allocated on every call, telemetry off too."""
        return observe(observer, sql, params, Engine.query,
                       lambda traced: self._run(sql, params, timeout, traced), self._index_of)

    def _first_pool(self, sql: str) -> PipelinePool:
        """The pipeline pool, opened now (``sql`` refused first, with no server at all)."""
        if self._check is not None:
            self._check(sql)
        return self._pipelines.get()

    def _encoded(self, pool: PipelinePool, sql: str, params: Params) -> Encoded:
        """``sql`` vetted as the multiplexed path vets it; its parameters encoded."""
        standard = pool.standard_conforming_strings
        allowed = self._vetted.get(sql)
        if allowed is None or not standard:
            allowed = self._vet(sql, standard)
        if len(params) > allowed:
            check_parameter_count(sql, len(params))  # raises, saying why
        return self._encode(params)

    def _index_of(self, engine: Engine) -> int | None:
        """(Telemetry) the index of the pipelined connection ``engine`` belongs to."""
        pool = self._pipelines.current
        return pool.index_of(engine) if pool is not None else None

    def _vet(self, sql: str, standard_strings: bool) -> int:
        """Guard ``sql`` as the server reads it; how many parameters it takes (remembered
        per SQL text, so a repeated statement costs one lookup)."""
        if self._check is not None:
            self._check(sql, standard_strings)
        allowed = parameters_allowed(sql)
        if standard_strings and len(sql) <= MAX_VETTED_SQL:
            put_bounded(self._vetted, sql, allowed, VETTED_LIMIT)
        return allowed

    def _send(self, pool: PipelinePool, build: dispatch.Build, args: tuple[Any, ...],
              timeout: float | None, slow: bool = False, statements: int = 1) -> Exchange:
        """Hand one request (of ``statements`` statements: a unit's are admitted by the
        slots they cost) to the pool layer (a read_your_writes view routes it itself)."""
        return dispatch.run(pool, build, args, timeout, slow, statements)

    def _in_own_thread(self) -> None:
        """Refuse a call from another native thread (gevent's thread pool, a Thread)."""
        if hub_of_this_thread() is not self._hub:
            raise InterfaceError("a pgmux Client can be used only from the thread (gevent hub) "
                                 "that created it; this call came from another native thread")

    def prepare(self, name: str, sql: str,
                types: Sequence[int | str] | None = None) -> PreparedStatement:
        """Register a named statement, prepared on every pipeline connection before returning."""
        self._in_own_thread()
        pool = self._pipelines.get()
        if self._check is not None:
            self._check(sql, pool.standard_conforming_strings)
        oids = tuple(type_oid(t) if isinstance(t, str) else int(t) for t in types or ())
        while (existing := self._catalog.get(name)) is not None:
            if existing.sql != sql or existing.param_oids != oids:
                raise InterfaceError(f"a statement named {name!r} is already prepared "
                                     "with different SQL")
            preparing = self._preparing.get(name)
            if preparing is None:
                return PreparedStatement(self, existing)
            preparing.wait()  # another greenlet is preparing it: wait for its outcome
        entry = CatalogEntry(name, sql, oids)
        self._catalog[name] = entry
        self._preparing[name] = done = Event()
        try:
            pool.prepare_everywhere(entry, self.acquire_timeout)
        except BaseException:
            if self._catalog.get(name) is entry:
                del self._catalog[name]
            raise
        finally:
            del self._preparing[name]
            done.set()
        return PreparedStatement(self, entry)

    @property
    def observer(self) -> Observer | None:
        """What this client emits (spans, metrics, slow-query log lines); None: nothing."""
        return self._observer


class PreparedStatement:
    """A handle to a statement registered with ``Client.prepare``."""

    def __init__(self, client: Multiplexed, entry: CatalogEntry):
        self._client = client
        self._entry = entry

    @property
    def name(self) -> str:
        """The name it was registered under (``Client.prepare``'s first argument)."""
        return self._entry.name

    @property
    def sql(self) -> str:
        """Its SQL text, with ``$1``-style placeholders."""
        return self._entry.sql

    @property
    def param_oids(self) -> tuple[int, ...]:
        """The parameter types it was registered with (() where the server infers them)."""
        return self._entry.param_oids

    @property
    def entry(self) -> CatalogEntry:
        """The client's record of the statement (name, SQL, parameter types), from which
        every pipeline connection prepares it, a new or replaced one too."""
        return self._entry

    def _run(self, params: Params, timeout: float | None,
             build: dispatch.Build = Engine.catalog_query) -> Reply:
        """One execution on the multiplexed path: its reply (whose error is raised here)."""
        client = self._client
        observer = client._observer
        if observer is not None and build is Engine.catalog_query:
            return self._run_observed(observer, params, timeout)
        client._in_own_thread()
        entry = self._entry
        pool = client._pipelines.get()
        slow = pool.costs.known and pool.costs.is_slow((entry.sql, entry.param_oids))
        reply = client._send(pool, build, (entry.name, entry.sql, entry.param_oids, params),
                             timeout, slow).reply
        error = reply.error
        if error is not None:
            raise error
        client._after_statement(entry.sql)  # read-your-writes: fence what may have written
        return reply

    def _run_observed(self, observer: Observer, params: Params,
                      timeout: float | None) -> Reply:
        """``_run`` traced (apart: no closure cells in ``_run``)."""
        client = self._client
        return observe(observer, self._entry.sql, params, Engine.catalog_query,
                       lambda traced: self._run(params, timeout, traced), client._index_of)

    def query(self, params: Params = (), *, timeout: float | None = None) -> Result:
        """Run it with ``params`` on the multiplexed path and return its rows, as
        ``Client.query`` does."""
        return self._run(params, timeout).result()

    def fetchone(self, params: Params = (), *, timeout: float | None = None) -> Row | None:
        """Run it with ``params`` and return its first row, or None."""
        return first_row(self._run(params, timeout))

    def fetchval(self, params: Params = (), *, timeout: float | None = None) -> Any:
        """Run it with ``params`` and return the first column of its first row, or None."""
        return first_value(self._run(params, timeout))

    def execute(self, params: Params = (), *, timeout: float | None = None) -> int:
        """Run it with ``params`` and return its row count (-1 if its command tag has none)."""
        return rowcount_from_tag(self._run(params, timeout).command)

    def __repr__(self) -> str:
        return f"<PreparedStatement {self._entry.name!r}>"


adopt(globals())  # the compiled twin's names, when it runs (pgmux._native)
