# The C layout of pgmux.engine.core's Engine, for its compiled twin (pgmux._native): the reply
# loop (receive) and the decision after a reply (outcome) run typed.

cimport cython

from pgmux.engine.exchanges cimport Exchange, Reply
from pgmux.engine.requests cimport Requests

cdef long _DATA_ROW, _READY_FOR_QUERY, _COMMAND_COMPLETE, _BIND_COMPLETE, _ROW_RUN


cdef class Engine(Requests):
    cdef public bint _shared, _watch_tags, _schema_moved, _just_begun
    cdef public object fifo, status
    cdef public Py_ssize_t messages
    cdef public object _on_done, _on_notice, _on_notification

    cpdef outcome(self, Exchange exchange)

    @cython.locals(head=Exchange, reply=Reply, kind=long)
    cpdef receive(self, list messages)
