# The C layout of pgmux.pool.slots' SlotLine, for its compiled twin (pgmux._native).

from pgmux.io.pipeline cimport PipelineDriver


cdef class SlotLine:
    cdef public object _counters, _fast, _slow
    cdef public Py_ssize_t _order, waiting
    cdef public object _loop, _timer
    cdef public double _timer_at


cpdef bint fits(PipelineDriver driver, Py_ssize_t statements, Py_ssize_t limit) except -1
