# The layout of pgmux.io.pinned for its compiled twin (pgmux._native); declared once, in
# pinned.pxd, which the other compiled modules cimport under the name they import it by.
include "pinned.pxd"
