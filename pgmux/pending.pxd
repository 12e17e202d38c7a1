# The C layout of pgmux.pending's Pending, for its compiled twin (pgmux._native): a block
# makes and settles one per statement.

cdef class Pending:
    cdef public object _shape, _what, _value, _error
    cdef public bint _ready

    cpdef settle(self, result, error)
