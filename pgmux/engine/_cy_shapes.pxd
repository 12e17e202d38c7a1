# The layout of pgmux.engine.shapes for its compiled twin (pgmux._native); declared once, in
# shapes.pxd, which the other compiled modules cimport under the name they import it by.
include "shapes.pxd"
