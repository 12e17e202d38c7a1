# The layout of pgmux.io.wire for its compiled twin (pgmux._native); declared once, in
# wire.pxd, which the other compiled modules cimport under the name they import it by.
include "wire.pxd"
