# The C layout of pgmux.io.pinned's PinnedConnection, for its compiled twin (pgmux._native): a
# transaction's statements run its start, send, receive loop and outcome typed.

cimport cython

from pgmux.engine.core cimport Engine
from pgmux.engine.exchanges cimport Exchange
from pgmux.io.wire cimport Wire


cdef class PinnedConnection:
    cdef public object server, registry
    cdef public Engine engine
    cdef public object notifications, cancel_grace, broken, active, created
    cdef public bint used
    cdef public object waited, residue, for_session, pool_generation
    cdef public object _sock, _fileno
    cdef public Wire _wire
    cdef public object _deadline
    cdef public list _prefix, _written_prefix
    cdef public object _dropped_notifications
    cdef public bint _reply_pending
    cdef public dict _facts

    @cython.locals(engine=Engine, messages=list)
    cpdef receive_more(self)

    cpdef send(self, data)

    @cython.locals(prefix=list, started=list)
    cpdef list start(self, exchanges, owner=*, bint send=*)

    @cython.locals(started=list, prefix=list, alone=bint, timed_out=bint)
    cpdef bint run(self, exchanges, timeout, owner=*) except -1

    cpdef mark_broken(self, reason)

    @cython.locals(engine=Engine, exchange=Exchange)
    cpdef tuple execute_statement(self, sql, params, timeout)

    @cython.locals(exchange=Exchange, timed_out=bint, facts=tuple)
    cpdef query(self, sql, params=*, timeout=*)

    @cython.locals(exchange=Exchange, timed_out=bint)
    cpdef command(self, sql, timeout=*)

    @cython.locals(end=Exchange)
    cpdef end_and_reset(self, sql, statements)

    cpdef defer(self, sql, tag)

    cpdef bint undefer(self, tag) except -1
