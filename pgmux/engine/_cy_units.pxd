# The layout of pgmux.engine.units for its compiled twin (pgmux._native); declared once, in
# units.pxd, which the other compiled modules cimport under the name they import it by.
include "units.pxd"
