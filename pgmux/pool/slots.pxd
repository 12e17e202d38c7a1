# The C layout of pgmux.pool.slots' Ticket and SlotLine, for its compiled twin (pgmux._native):
# a ticket's fields are C fields, and the line joins and serves tickets by C calls.

cimport cython

from pgmux.io.pipeline cimport PipelineDriver


cdef class Ticket:
    cdef public object token
    cdef public bint slow
    cdef public Py_ssize_t statements
    cdef public object patience
    cdef public Py_ssize_t order
    cdef public double joined, expires
    cdef public object error

    cpdef serve(self, PipelineDriver driver)


cdef class SlotLine:
    cdef public object _counters, _fast, _slow
    cdef public Py_ssize_t _order, waiting
    cdef public object _loop, _timer
    cdef public double _timer_at

    @cython.locals(joined=cython.double, at=cython.double)
    cpdef join(self, Ticket ticket)

    @cython.locals(served=Py_ssize_t, waited=cython.double, now=cython.double,
                   statements=Py_ssize_t, ticket=Ticket)
    cpdef serve(self, PipelineDriver driver, list live, Py_ssize_t limit)


cpdef bint fits(PipelineDriver driver, Py_ssize_t statements, Py_ssize_t limit) except -1
