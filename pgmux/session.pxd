# The C layout of pgmux.session's sessions, transactions and savepoints, for its compiled twin
# (pgmux._native): a transaction's statements reach the pinned connection through C fields.

cimport cython

from pgmux.io.pinned cimport PinnedConnection


cdef class _Runner:
    cdef public object _observer
    # as the pure-Python classes: weak references to a session or a transaction
    cdef object __weakref__

    cpdef PinnedConnection _use(self)
    cpdef _session(self)
    @cython.locals(conn=PinnedConnection)
    cpdef _query(self, sql, params, timeout)
    cpdef _command(self, PinnedConnection conn, sql, operation=*)


cdef class Session(_Runner):
    cdef public object _pool, _acquire_timeout, _on_exit, _owner, _state, _transaction, _pipeline
    cdef public object _session_scoped
    cdef public PinnedConnection _conn

    cpdef PinnedConnection _check(self)


cdef class Transaction(_Runner):
    cdef public Session _s
    cdef public object _begin, _owns_session, _on_commit, _state, _savepoints

    @cython.locals(session=Session, conn=PinnedConnection)
    cpdef _open(self)
    @cython.locals(conn=PinnedConnection)
    cpdef _commit(self)
    @cython.locals(conn=PinnedConnection)
    cpdef _rollback(self)
    cpdef _finish(self, sql)
    cpdef _end(self, PinnedConnection conn, sql)
    cpdef _end_now(self, PinnedConnection conn, sql)


cdef class Savepoint(_Runner):
    cdef public Transaction _tx
    cdef public object _name, _state
