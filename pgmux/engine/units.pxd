# The C layout of pgmux.engine.units' exchanges, for its compiled twin (pgmux._native).

cimport cython

from pgmux.engine.exchanges cimport Exchange, QueryExchange, Reply


cdef class UnitItem:
    cdef public object sql, oids, formats, values, prepared, params


cdef class UnitPiece(QueryExchange):
    pass


cdef class UnitExchange(Exchange):
    cdef public list pieces
    cdef public Py_ssize_t index, leading
    cdef public Reply commit

    cpdef bint command_complete(self, tag) except -1

    @cython.locals(pieces=list, piece=Exchange)
    cpdef _next(self)

    @cython.locals(piece=Exchange)
    cpdef list answers(self)
