# The layout of pgmux.engine.exchanges for its compiled twin (pgmux._native); declared once, in
# exchanges.pxd, which the other compiled modules cimport under the name they import it by.
include "exchanges.pxd"
