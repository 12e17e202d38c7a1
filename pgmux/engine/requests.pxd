# The C layout of pgmux.engine.requests' Requests (the request-building half of an Engine), for
# its compiled twin (pgmux._native).

cimport cython

from pgmux.engine.exchanges cimport Exchange, Reply
from pgmux.engine.settings cimport ServerSettings
from pgmux.engine.shapes cimport ShapeFactory
from pgmux.engine.statements cimport Descriptions, Statement, StatementCache
from pgmux.engine.units cimport UnitItem


cdef class Requests:
    cdef public object registry
    cdef public ServerSettings settings
    cdef public ShapeFactory shapes
    cdef public Descriptions descriptions
    cdef public Py_ssize_t schema_seen
    cdef public bint named
    cdef public StatementCache statements
    cdef public dict catalog, _unnamed_known, _lookups
    cdef public bint _holding_closes
    cdef public list outgoing

    @cython.locals(cache=StatementCache, statement=Statement, stamp=tuple)
    cpdef query(self, sql, oids, formats, values, tail=*, kind=*, bint cached=*)

    @cython.locals(statement=Statement)
    cpdef _unnamed(self, sql, oids, formats, values, tail, kind)

    cpdef _parse_and_run(self, Statement statement, description, formats, values, tail, kind)

    cpdef _learn(self, Statement statement, description)

    @cython.locals(pieces=list, piece=Exchange)
    cpdef unit(self, items, leading=*)

    @cython.locals(item=UnitItem)
    cpdef _piece(self, item)

    @cython.locals(statement=Statement, cache=StatementCache, item=UnitItem)
    cpdef _prerequisite(self, item)
