# The C layout of pgmux.pool.counters' PoolCounters, for its compiled twin (pgmux._native):
# the pinned pool counts a transaction's acquire and use by C calls.

cdef class PoolCounters:
    cdef public long requests, requests_queued, timeouts, requests_errors
    cdef public long connections_made, connections_failed, connections_lost
    cdef public double wait_time, usage_time, connect_time
    cdef public object observer

    cpdef acquired(self, double seconds, bint queued)
    cpdef queued_for(self, double seconds)
    cpdef used(self, double seconds)
