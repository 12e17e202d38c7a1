# Typed locals of pgmux.multiplexed's entry, for its compiled twin (pgmux._native): the pool,
# the exchange and its reply read as C fields, dispatch.run called in C.

cimport cython

from pgmux.engine.exchanges cimport Exchange, Reply
from pgmux.pool cimport _cy_dispatch as dispatch  # (the twin: its C functions)
from pgmux.pool.router cimport PipelinePool


@cython.locals(pool=PipelinePool, vetted=dict, exchange=Exchange, reply=Reply)
cpdef _run(self, sql, params, timeout, build=*)
