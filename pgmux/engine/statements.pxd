# The C layout of pgmux.engine.statements' classes, for its compiled twin (pgmux._native).
# Types are checked as Python checks nothing: only what the module itself always assigns.

cdef class Descriptions:
    cdef public Py_ssize_t limit
    cdef public object _entries
    cdef public Py_ssize_t schema_changes

    cpdef get(self, key)
    cpdef put(self, key, description)


cdef class Statement:
    cdef public object name, sql, param_oids, key, param_types, columns, shape, stamp
    cdef public object result_formats, result_codes, parse_codes, bind_prefix, parse_error
    cdef public bint parsed
    cdef public object describing, _parse

    cpdef parse_message(self)


cdef class StatementCache:
    cdef public Py_ssize_t capacity
    cdef public object entries
    cdef public Statement newest
    cdef public dict _parked
    cdef public object _prefix
    cdef public list to_close

    cpdef get(self, key)
