# Typed locals of pgmux.pool.dispatch's hot path, for its compiled twin (pgmux._native).

cimport cython

from pgmux.engine.core cimport Engine
from pgmux.engine.exchanges cimport Exchange
from pgmux.io.pipeline cimport PipelineDriver
from pgmux.pool.router cimport PipelinePool


@cython.locals(driver=PipelineDriver, engine=Engine, exchange=Exchange)
cpdef run(PipelinePool pool, build, tuple args, timeout, bint slow=*, Py_ssize_t statements=*)
