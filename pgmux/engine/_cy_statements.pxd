# The layout of pgmux.engine.statements for its compiled twin (pgmux._native); declared once, in
# statements.pxd, which the other compiled modules cimport under the name they import it by.
include "statements.pxd"
