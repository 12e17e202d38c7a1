# The layout of pgmux.pool.router for its compiled twin (pgmux._native); declared once, in
# router.pxd, which the other compiled modules cimport under the name they import it by.
include "router.pxd"
