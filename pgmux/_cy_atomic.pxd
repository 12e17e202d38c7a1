# The layout of pgmux.atomic for its compiled twin (pgmux._native); declared in atomic.pxd.
include "atomic.pxd"
