# The layout of pgmux.engine.rowshape for its compiled twin (pgmux._native); declared once, in
# rowshape.pxd, which the other compiled modules cimport under the name they import it by.
include "rowshape.pxd"
