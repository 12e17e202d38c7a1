# The C layout of pgmux.io.pipeline's PipelineDriver, for its compiled twin (pgmux._native): its
# submit, its writer's and reader's loops and the batch's bookkeeping run typed.

cimport cython

from pgmux.engine.core cimport Engine
from pgmux.engine.costs cimport ServerTimes, StatementCosts
from pgmux.engine.exchanges cimport Exchange
from pgmux.io.wire cimport Wire


cdef class PipelineDriver:
    cdef public object conn
    cdef public Py_ssize_t index
    cdef public object state, failure
    cdef public list _done
    cdef public Engine engine
    cdef public list _pending
    cdef public dict _followers
    cdef public Py_ssize_t load
    cdef public object _wake_writer
    cdef public bint _writer_parked
    cdef public object _on_dead, _on_slot_freed, _slot_waiters
    cdef public StatementCosts costs
    cdef public ServerTimes times
    cdef public Py_ssize_t slow_in_flight
    cdef public object _hub, _loop, _sock, _writer, _reader, _idle
    cdef public Py_ssize_t units, readables, flush_calls, flush_incomplete, reconnects

    cpdef submit(self, Exchange exchange, token=*)

    @cython.locals(engine=Engine, exchange=Exchange, pending=list, sent=Py_ssize_t)
    cpdef _write_loop(self)

    @cython.locals(wire=Wire, engine=Engine, done=list, messages=list)
    cpdef _read_loop(self)

    @cython.locals(exchange=Exchange, load=Py_ssize_t, tokens=list)
    cpdef _completed(self, list done, bint hand_on=*)


cpdef switch_all(list tokens)
