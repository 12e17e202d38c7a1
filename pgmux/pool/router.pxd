# The C layout of pgmux.pool.router's PipelinePool, for its compiled twin (pgmux._native): the
# choice of a driver (free_driver) runs typed.

cimport cython

from pgmux.engine.costs cimport StatementCosts
from pgmux.io.pipeline cimport PipelineDriver
from pgmux.pool.slots cimport SlotLine


cdef class PipelinePool:
    cdef public Py_ssize_t size, max_in_flight
    cdef public object acquire_timeout
    cdef public dict catalog
    cdef public Py_ssize_t reconnects
    cdef public object _connect, _registry, _descriptions
    cdef public StatementCosts costs
    cdef public bint _named, standard_conforming_strings
    cdef public object _cache_size, _on_notice, _backoff, _probe
    cdef public list _slots, _live
    cdef public Py_ssize_t _rr
    cdef public object _loop
    cdef public Py_ssize_t reserved
    cdef public dict _supervisors
    cdef public object _prober
    cdef public bint _closed
    cdef public Py_ssize_t rotations
    cdef public object _max_lifetime, _placement, _rebalance_interval, _drain_timeout
    cdef public dict _expires
    cdef public set _draining
    cdef public object _maintainer, counters
    cdef public SlotLine _line
    cdef public Py_ssize_t _units_done

    @cython.locals(live=list, count=Py_ssize_t, start=Py_ssize_t, offset=Py_ssize_t,
                   best=PipelineDriver, driver=PipelineDriver, best_load=Py_ssize_t,
                   load=Py_ssize_t)
    cpdef free_driver(self, bint slow=*, Py_ssize_t statements=*)
