# The C layout of pgmux.engine.exchanges' classes, for its compiled twin (pgmux._native): the
# engine and the drivers read and write these fields for every message and every query.

cimport cython

from pgmux.engine.rowshape cimport RowShape
from pgmux.engine.statements cimport Statement

cdef class Reply:
    cdef public RowShape shape
    cdef public list rows
    cdef public object command, error, undecoded

    @staticmethod
    @cython.locals(reply=Reply)
    cdef Reply new(shape)


cdef class Exchange:
    cdef public object data
    cdef public Reply reply
    cdef public Statement statement
    cdef public bint parses, wanted
    cdef public object state, failure, token
    cdef public double sent_at
    cdef public bint slow, undecoded
    cdef public Py_ssize_t weight, statements
    cdef readonly bint plain, describes  # the class's PLAIN and DESCRIBES

    @staticmethod
    @cython.locals(exchange=Exchange)
    cdef Exchange new(kind, data, Reply reply, Statement statement, bint parses)

    cpdef bint command_complete(self, tag) except -1


cdef class QueryExchange(Exchange):
    pass


cdef class DescribeExchange(Exchange):
    cdef public object param_types, columns, description


cdef class ScriptExchange(Exchange):
    cdef public Reply last

    cpdef bint command_complete(self, tag) except -1


cdef class TextExchange(QueryExchange):
    cdef public object target, column, rows


cdef class TypeLookupExchange(ScriptExchange):
    cdef public object asked


cdef class CopyExchange(ScriptExchange):
    cdef public object direction
    cdef public bint began
    cdef public list chunks

    cpdef bint command_complete(self, tag) except -1


cdef class SyncExchange(Exchange):
    pass


cdef class PortalExchange(Exchange):
    cpdef bint command_complete(self, tag) except -1
