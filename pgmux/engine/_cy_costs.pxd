# The layout of pgmux.engine.costs for its compiled twin (pgmux._native); declared once, in
# costs.pxd, which the other compiled modules cimport under the name they import it by.
include "costs.pxd"
