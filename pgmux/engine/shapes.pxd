# The C layout of pgmux.engine.shapes' ShapeFactory, for its compiled twin (pgmux._native).

from pgmux.engine.settings cimport ServerSettings


cdef class ShapeFactory:
    cdef public object registry
    cdef public ServerSettings settings
    cdef public dict _by_payload, _styled
    cdef public object _stamp

    cpdef current(self)
