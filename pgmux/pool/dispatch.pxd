# The C layout of pgmux.pool.dispatch for its compiled twin (pgmux._native): the typed locals of
# its hot path, and a request's fields (a ticket's, and its own) as C fields.

cimport cython

from pgmux.engine.core cimport Engine
from pgmux.engine.exchanges cimport Exchange
from pgmux.io.pipeline cimport PipelineDriver
from pgmux.pool.router cimport PipelinePool
from pgmux.pool.slots cimport Ticket


cdef class _Request(Ticket):
    cdef public PipelinePool pool
    cdef public object build
    cdef public tuple args
    cdef public object until, budget
    cdef public PipelineDriver driver
    cdef public Exchange exchange
    cdef public PipelineDriver prefer
    cdef public dict learned

    @cython.locals(pool=PipelinePool, prefer=PipelineDriver, driver=PipelineDriver)
    cpdef send(self, token)
    cpdef line_up(self)

    @cython.locals(engine=Engine, exchange=Exchange)
    cpdef serve(self, PipelineDriver driver)
    cpdef prerequisite(self, PipelineDriver driver, Exchange exchange)

    @cython.locals(pool=PipelinePool)
    cpdef resume(self, PipelineDriver driver, Exchange exchange)
    cpdef fail(self, error)

    @cython.locals(exchange=Exchange)
    cpdef answer(self, outcome=*)
    cpdef result(self)
    cpdef abandon(self)

    @cython.locals(driver=PipelineDriver, exchange=Exchange)
    cpdef bint settle(self, outcome=*) except -1


@cython.locals(driver=PipelineDriver, engine=Engine, exchange=Exchange, request=_Request)
cpdef run(PipelinePool pool, build, tuple args, timeout, bint slow=*, Py_ssize_t statements=*)
