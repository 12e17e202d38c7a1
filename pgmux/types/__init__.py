"""Type codecs: PostgreSQL text/binary column data <-> Python values, by type OID.

Sans-IO: imports only the standard library and pgmux.errors.
"""

from pgmux.types import oids
from pgmux.types.copy import encode_copy_row
from pgmux.types.hstore import Hstore
from pgmux.types.ranges import Multirange, Range
from pgmux.types.registry import TypeRegistry, default_registry
from pgmux.types.temporal import Interval
from pgmux.types.text import Json

__all__ = ["Hstore", "Interval", "Json", "Multirange", "Range", "TypeRegistry",
           "default_registry", "encode_copy_row", "oids"]
