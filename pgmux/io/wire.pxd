# The C layout of pgmux.io.wire's Wire, for its compiled twin (pgmux._native).

cdef class Wire:
    cdef public object source, frames

    cpdef list receive(self)
