# The layout of pgmux.engine.core for its compiled twin (pgmux._native); declared once, in
# core.pxd, which the other compiled modules cimport under the name they import it by.
include "core.pxd"
