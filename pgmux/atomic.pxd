# Typed locals of pgmux.atomic's unit path, for its compiled twin (pgmux._native): the pool,
# the vetted texts and the unit's exchange read as C fields, dispatch.run called in C.

cimport cython

from pgmux.engine.exchanges cimport Reply
from pgmux.engine.units cimport UnitExchange, UnitItem
from pgmux.pending cimport Pending as PendingC  # (the name Pending stays the module's, re-exported)
from pgmux.pool cimport _cy_dispatch as dispatch  # (the twin: its C functions)
from pgmux.pool.router cimport PipelinePool


@cython.locals(pool=PipelinePool, vetted=dict, verdicts=dict)
cpdef UnitItem _unit_item(self, statement, params)

@cython.locals(pool=PipelinePool, exchange=UnitExchange, reply=Reply)
cpdef list _run_unit(self, list items, list leading, timeout, bint writes=*, build=*)

@cython.locals(index=Py_ssize_t, one=PendingC)
cpdef _settle_each(list pending, list answers)
