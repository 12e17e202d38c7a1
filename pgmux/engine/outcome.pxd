# The C layout of pgmux.engine.outcome's RetryBudget, for its compiled twin (pgmux._native).

cdef class RetryBudget:
    cdef public Py_ssize_t _unsent, _connections, _clashes, _changes, _descriptions
    cdef public list _stale_on
