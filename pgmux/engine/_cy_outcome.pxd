# The layout of pgmux.engine.outcome for its compiled twin (pgmux._native); declared once, in
# outcome.pxd, which the other compiled modules cimport under the name they import it by.
include "outcome.pxd"
