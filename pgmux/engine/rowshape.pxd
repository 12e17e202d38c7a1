# The C layout of pgmux.engine.rowshape's RowShape, for its compiled twin (pgmux._native).

cdef class RowShape:
    cdef public object columns, names, decoders, decode, decode_run, unknown
