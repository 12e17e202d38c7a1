# The C layout of pgmux.pool.slots' SlotLine, for its compiled twin (pgmux._native).

cimport cython

from pgmux.io.pipeline cimport PipelineDriver


cdef class SlotLine:
    cdef public object _counters, _fast, _slow
    cdef public Py_ssize_t _order, waiting
    cdef public object _loop, _timer
    cdef public double _timer_at

    @cython.locals(served=Py_ssize_t, waited=cython.double, now=cython.double,
                   statements=Py_ssize_t)
    cpdef serve(self, PipelineDriver driver, list live, Py_ssize_t limit)


cpdef bint fits(PipelineDriver driver, Py_ssize_t statements, Py_ssize_t limit) except -1
