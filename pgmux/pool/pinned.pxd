# The C layout of pgmux.pool.pinned's PinnedPool, for its compiled twin (pgmux._native): a
# transaction's acquire and release read the pool's state as C fields.

cimport cython

from pgmux.io.pinned cimport PinnedConnection
from pgmux.pool.counters cimport PoolCounters


cdef class PinnedPool:
    cdef public object size, pooler, placement, pooler_detected, acquire_timeout, max_lifetime
    cdef public object reset_timeout, cancel_grace, registry, descriptions, reconnects
    cdef public tuple setup
    cdef public dict _resets
    cdef public object _connect, _cache_size, _on_notice, _loop, _generation
    cdef public bint _closed
    cdef public PoolCounters counters
    cdef public object observer
    cdef public object _free, _lent, _waiters
    cdef public dict _holders, _lent_at
    cdef public set _open

    cpdef _take(self, timeout)
    cpdef PinnedConnection _usable(self, item)
    @cython.locals(greenlet=object, held=object)
    cpdef release(self, PinnedConnection conn)
    cpdef tuple reset_for(self, PinnedConnection conn)
    cpdef bint _keep(self, PinnedConnection conn) except -1
    cpdef bint _misplaced(self, PinnedConnection conn) except -1
    cpdef bint _expired(self, PinnedConnection conn) except -1
    cpdef _drop(self, PinnedConnection conn)
    cpdef _give_back(self, item)
