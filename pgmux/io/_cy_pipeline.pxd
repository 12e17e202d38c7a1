# The layout of pgmux.io.pipeline for its compiled twin (pgmux._native); declared once, in
# pipeline.pxd, which the other compiled modules cimport under the name they import it by.
include "pipeline.pxd"
