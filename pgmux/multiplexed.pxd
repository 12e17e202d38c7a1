# The C layout of pgmux.multiplexed's Multiplexed (the client's state its entry reads), and the
# typed locals of that entry, for its compiled twin (pgmux._native): the client's state, the
# pool, the exchange and its reply read as C fields, dispatch.run called in C.

cimport cython

from pgmux.engine.exchanges cimport Exchange, Reply
from pgmux.pool cimport _cy_dispatch as dispatch  # (the twin: its C functions)
from pgmux.pool.router cimport PipelinePool


cdef class Multiplexed:
    cdef public object acquire_timeout, _closed, _hub, _pipelines, _observer, _check, _encode
    cdef public dict _vetted
    cdef public object _fence, _reads, _writes, _catalog, _preparing
    cdef object __weakref__


@cython.locals(pool=PipelinePool, vetted=dict, exchange=Exchange, reply=Reply)
cpdef _run(Multiplexed self, sql, params, timeout, build=*)
