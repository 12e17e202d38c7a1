# The layout of pgmux.engine.settings for its compiled twin (pgmux._native); declared once, in
# settings.pxd, which the other compiled modules cimport under the name they import it by.
include "settings.pxd"
