# The layout of pgmux.engine.requests for its compiled twin (pgmux._native); declared once, in requests.pxd,
# which the other compiled modules cimport under the name they import the module by.
include "requests.pxd"
