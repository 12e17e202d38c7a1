# The layout of pgmux.pool.slots for its compiled twin (pgmux._native); declared once, in
# slots.pxd, which the other compiled modules cimport under the name they import it by.
include "slots.pxd"
