# The layout of pgmux.engine.requests for its compiled twin (pgmux._native); declared once, in
# requests.pxd, which the other compiled modules cimport under the name they import it by.
include "requests.pxd"
