# The C layout of pgmux.engine.costs' classes, for its compiled twin (pgmux._native).

cimport cython

from pgmux.engine.exchanges cimport Exchange
from pgmux.engine.statements cimport Statement


cdef class StatementCosts:
    cdef public double slow_after
    cdef public bint known
    cdef public dict _seconds

    cpdef bint tracks(self, key) except -1
    cpdef note(self, key, double seconds)
    cpdef bint is_slow(self, key) except -1


cdef class ServerTimes:
    cdef public StatementCosts costs
    cdef public double _last_done, _rtt, _typical

    @cython.locals(costs=StatementCosts, exchange=Exchange, statement=Statement, sent=double,
                   trip=double, started=double, last=double, rtt=double, typical=double,
                   seconds=double, factor=double, slow_after=double)
    cpdef answered_all(self, list exchanges, double now)
    cpdef Py_ssize_t slots(self, Py_ssize_t statements) except -1
