# The layout of pgmux.pool.dispatch for its compiled twin (pgmux._native); declared once, in
# dispatch.pxd, which the other compiled modules cimport under the name they import it by.
include "dispatch.pxd"
