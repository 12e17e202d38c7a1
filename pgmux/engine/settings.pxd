# The C layout of pgmux.engine.settings' ServerSettings, for its compiled twin (pgmux._native).

cdef class ServerSettings:
    cdef public object parameters
    cdef public bint shared, standard_conforming_strings
    cdef public Py_ssize_t epoch
